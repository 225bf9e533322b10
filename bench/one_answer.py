"""One answer per input, counted over a real server: each test word sent alone (every call in flight
at once, so each is batched with whatever else is there), then the same words `--batch` to a call;
how many outputs changed and how many scores moved by more than 1e-4, per batching mode and decoding.

    python -m bench.one_answer [--model-dir models/g2p-en/1] [--words 1000] [--precision auto]

The server runs as `make serve` would, with the lexicon bypassed per call and the cache off, so
every answer is the model's. tests/engine/test_one_answer.py holds the server to zero and zero.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys

import grpc

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from bench.harness import BIN, Server, test_words

SCORE_TOLERANCE = 1e-4
CONNECTIONS = 4  # several connections, so the server's worker processes each take some calls


def shuffled_test_words(bundle_dir: str, n: int) -> list[str]:
    """n of the bundle's test-split spellings in the benches' shuffled order: mixed lengths in every call."""
    from service.engine.bundle import load_bundle

    return list(dict.fromkeys(test_words(load_bundle(bundle_dir))))[:n]


async def answers(address: str, words: list[str], beam_size: int, per_call: int) -> dict:
    """word -> (output text, log-probability), every call in flight at once."""
    options = pb.DecodeOptions(return_attention=False, beam_size=beam_size, bypass_lexicon=True)
    channels = [grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(CONNECTIONS)]
    try:
        async def call(i: int, chunk: list[str]):
            stub = pbg.TransducerStub(channels[i % len(channels)])
            reply = await stub.Transduce(pb.TransduceRequest(inputs=chunk, options=options), timeout=300)
            return [(w, r.output_text, r.log_prob) for w, r in zip(chunk, reply.results)]

        chunks = [words[i:i + per_call] for i in range(0, len(words), per_call)]
        replies = await asyncio.gather(*(call(i, c) for i, c in enumerate(chunks)))
        return {w: (text, score) for reply in replies for w, text, score in reply}
    finally:
        for ch in channels:
            await ch.close()


async def compare(address: str, words: list[str], beam_size: int, batch: int) -> dict:
    """Alone against `batch` to a call: the words whose output changed and whose score moved."""
    alone = await answers(address, words, beam_size, per_call=1)
    together = await answers(address, words, beam_size, per_call=batch)
    changed = [(w, alone[w][0], together[w][0]) for w in words if alone[w][0] != together[w][0]]
    moved = [(w, alone[w][1], together[w][1]) for w in words if abs(alone[w][1] - together[w][1]) > SCORE_TOLERANCE]
    return {"words": len(words), "outputs_changed": len(changed), "scores_moved": len(moved),
            "max_score_delta": max(abs(alone[w][1] - together[w][1]) for w in words),
            "changed_examples": changed[:5], "moved_examples": moved[:5]}


def server_argv(model_dir: str, mode: str, precision: str) -> list[str]:
    return [str(BIN / "attnserve-server"), "--model-dir", model_dir, "--host", "127.0.0.1", "--metrics-port", "-1",
            "--mode", mode, "--precision", precision, "--cache-entries", "0", "--max-pending-age-s", "30"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default="models/g2p-en/1")
    p.add_argument("--words", type=int, default=1000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "int8"])
    p.add_argument("--modes", nargs="+", default=["request", "continuous"])
    p.add_argument("--beam-sizes", nargs="+", type=int, default=[1, 4])
    args = p.parse_args(argv)
    words = shuffled_test_words(args.model_dir, args.words)
    out = {"model_dir": args.model_dir, "precision": args.precision, "batch": args.batch, "runs": {}}
    for mode in args.modes:
        with Server(server_argv(args.model_dir, mode, args.precision)) as server:
            for beam in args.beam_sizes:
                r = asyncio.run(compare(server.addr, words, beam, args.batch))
                out["runs"][f"{mode}, {'greedy' if beam == 1 else f'beam {beam}'}"] = r
                print(f"{mode}, beam {beam}: {r['outputs_changed']} of {r['words']} outputs changed, "
                      f"{r['scores_moved']} scores moved > {SCORE_TOLERANCE} (max {r['max_score_delta']:.2e})",
                      file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
