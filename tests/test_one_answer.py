"""One answer per input, over a real server in its default precision: a word decoded alone (many
single-word calls at once, so each is batched with whatever else is in flight) and the same word
among 63 others in one call give the same output and scores within 1e-4, in request and
continuous batching, greedy and beam, across the server's worker processes. The shipped model is
served int8 by default (`--precision auto`), so this holds its int8 graphs to it.
"""
from __future__ import annotations

import asyncio
import os
import random
import subprocess

import grpc
import pytest

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from service.engine.bundle import load_bundle
from tests.conftest import SHIPPED_MODEL
from tests.helpers import free_port, wait_serving
from tests.live import VENV_BIN, terminate
from training.evaluate import load_splits

WORDS = 256
BATCH = 64
SCORE_TOLERANCE = 1e-4
MODES = ("request", "continuous")
DECODINGS = {"greedy": 1, "beam 4": 4}


@pytest.fixture(scope="module")
def words() -> list[str]:
    """Test-split words of the shipped model, in a shuffled order: mixed lengths in every call."""
    m = load_bundle(SHIPPED_MODEL).manifest
    test = sorted({"".join(p.src) for p in load_splits(m["data"])["test"]})
    return random.Random(7).sample(test, WORDS)


def serve(mode: str, tmp_path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    proc = subprocess.Popen([str(VENV_BIN / "attnserve-server"), "--model-dir", str(SHIPPED_MODEL), "--host",
                             "127.0.0.1", "--port", str(port), "--metrics-port", "-1", "--mode", mode,
                             "--cache-entries", "0", "--max-pending-age-s", "30"],
                            stdout=open(tmp_path / f"{mode}.log", "wb"), stderr=subprocess.STDOUT, env=env)
    wait_serving(f"127.0.0.1:{port}", 180, proc)
    return proc, f"127.0.0.1:{port}"


async def answers(address: str, words: list[str], beam_size: int, per_call: int) -> dict:
    """word -> (output, score), every call in flight at once on a few connections."""
    options = pb.DecodeOptions(return_attention=False, beam_size=beam_size, bypass_lexicon=True)
    channels = [grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(4)]  # connections of their own: the server's workers each take some
    try:
        async def call(i: int, chunk: list[str]):
            stub = pbg.TransducerStub(channels[i % len(channels)])
            reply = await stub.Transduce(pb.TransduceRequest(inputs=chunk, options=options), timeout=120)
            return [(w, r.output_text, r.log_prob) for w, r in zip(chunk, reply.results)]

        chunks = [words[i:i + per_call] for i in range(0, len(words), per_call)]
        replies = await asyncio.gather(*(call(i, c) for i, c in enumerate(chunks)))
        return {w: (text, score) for reply in replies for w, text, score in reply}
    finally:
        for ch in channels:
            await ch.close()


@pytest.mark.parametrize("mode", MODES)
async def test_a_word_has_one_answer_alone_or_in_any_batch(mode, words, tmp_path):
    proc, address = serve(mode, tmp_path)
    try:
        for decoding, beam_size in DECODINGS.items():
            alone = await answers(address, words, beam_size, per_call=1)
            together = await answers(address, words, beam_size, per_call=BATCH)
            changed = [w for w in words if alone[w][0] != together[w][0]]
            moved = [w for w in words if abs(alone[w][1] - together[w][1]) > SCORE_TOLERANCE]
            assert (changed, moved) == ([], []), (
                f"{mode}, {decoding}: {len(changed)} outputs changed, e.g. "
                f"{[(w, alone[w][0], together[w][0]) for w in changed[:3]]}; {len(moved)} scores moved by more "
                f"than {SCORE_TOLERANCE}, e.g. {[(w, alone[w][1], together[w][1]) for w in moved[:3]]}")
    finally:
        terminate(proc)
