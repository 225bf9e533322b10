"""The alternatives a user might pick, measured on the same words.

- a naive server: the PyTorch training model, eager, one request at a time,
  behind the same gRPC API (`python -m bench.peers naive-server ...`);
- the `g2p-en` package's own model (numpy, in-process), loaded without the NLTK
  downloads its module attempts at import.
"""
from __future__ import annotations

import argparse
import asyncio
import time

PEER_NOTE = "g2p-en was probably trained on CMUdict words including our test split"


async def naive_server(checkpoint: str, port: int) -> None:
    import grpc
    import torch

    from attnserve.v1 import attnserve_pb2 as pb
    from training.data import EOS_ID, Vocab
    from training.export import load_checkpoint
    from training.train import collate

    model, ckpt = load_checkpoint(checkpoint)
    src_vocab, tgt_vocab = Vocab(ckpt["src_vocab"]), Vocab(ckpt["tgt_vocab"])
    max_len = ckpt["train_config"]["max_output_len"]

    async def transduce(raw: bytes, context) -> pb.TransduceResponse:
        req = pb.TransduceRequest.FromString(raw)
        results = []
        for text in req.inputs:  # one word at a time, eager PyTorch, blocking the loop: "naive"
            chars = list(text.lower())
            src, src_len, _, _ = collate([(src_vocab.encode(chars), [])])
            with torch.no_grad():
                tokens, out_len, score, attn = model.greedy(src, src_len, max_len)
            n = int(out_len[0])
            out = tgt_vocab.decode(t for t in tokens[0, :n].tolist() if t != EOS_ID)
            result = pb.Result(output_tokens=out, output_text=" ".join(out), log_prob=float(score[0]))
            if attn is not None:  # None for a model without attention
                result.attention.CopyFrom(pb.Attention(rows=n, cols=len(chars), weights=attn[0, :n].flatten().tolist()))
            results.append(result)
        return pb.TransduceResponse(results=results)

    server = grpc.aio.server(maximum_concurrent_rpcs=None)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("attnserve.v1.Transducer", {
        "Transduce": grpc.unary_unary_rpc_method_handler(
            transduce, response_serializer=pb.TransduceResponse.SerializeToString)}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def load_g2p_en():
    """g2p-en's neural model only (not its CMUdict lookup), with NLTK's downloads disabled."""
    import nltk

    nltk.download = lambda *args, **kwargs: False  # its module asks for tagger/cmudict data at import
    from g2p_en import g2p as g2p_module

    g = g2p_module.G2p.__new__(g2p_module.G2p)
    g.graphemes = ["<pad>", "<unk>", "</s>"] + list("abcdefghijklmnopqrstuvwxyz")
    probe = g2p_module.G2p.__init__.__code__.co_consts  # the phoneme list is a literal in __init__
    g.phonemes = next(c for c in probe if isinstance(c, tuple) and "AA0" in c)
    g.phonemes = ["<pad>", "<unk>", "<s>", "</s>"] + list(g.phonemes)
    g.g2idx = {x: i for i, x in enumerate(g.graphemes)}
    g.idx2g = dict(enumerate(g.graphemes))
    g.p2idx = {x: i for i, x in enumerate(g.phonemes)}
    g.idx2p = dict(enumerate(g.phonemes))
    g.load_variables()
    return g


def g2p_en_timed(words: list[str], g=None) -> tuple[dict[str, list[str]], list[float]]:
    """g2p-en's predictions (stress removed, as in our corpus) and each word's seconds, one word at
    a time (its only mode)."""
    g = g or load_g2p_en()
    outputs, seconds = {}, []
    for w in words:
        started = time.perf_counter()
        out = g.predict(w)
        seconds.append(time.perf_counter() - started)
        outputs[w] = [p.rstrip("012") for p in out]
    return outputs, seconds


def g2p_en_outputs(words: list[str]) -> tuple[dict[str, list[str]], float]:
    """g2p-en's predictions and its words/s."""
    outputs, seconds = g2p_en_timed(words)
    return outputs, len(words) / sum(seconds)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    n = sub.add_parser("naive-server")
    n.add_argument("--checkpoint", required=True)
    n.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    if args.cmd == "naive-server":
        asyncio.run(naive_server(args.checkpoint, args.port))


if __name__ == "__main__":
    main()
