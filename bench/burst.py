"""A burst: N single-word ModelInfer calls sent at once from the stock tritonclient aio client,
each with a client timeout, and the final status of every one counted.

    python -m bench.burst                          (starts the server as `make serve` runs it)
    python -m bench.burst --addr 127.0.0.1:50051   (a server already running)

What a client of an overloaded server hears is the point: a refusal it can act on
(RESOURCE_EXHAUSTED, UNAVAILABLE: retry elsewhere, back off) or CANCELLED, which reads as
"you gave up" and which no retry policy retries. Prints one JSON object: the count of each
status, how many calls were answered OK, and the wall time of the burst.

Runs tritonclient in this process, so it imports nothing of the server's generated
`inference` code (protobuf's descriptor pool holds one definition of each message).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

from bench.harness import BIN, Server

# `make serve`'s own flags (Makefile: MODEL_REPOSITORY, DEFAULT_MODEL, MODEL_POLL_S).
SERVE_ARGV = [str(BIN / "attnserve-server"), "--model-repository", "models", "--default-model", "g2p-en",
              "--model-poll-s", "5", "--metrics-port", "-1"]


def words_of(model_dir: Path, count: int) -> list[str]:
    """`count` words from the model's own test split (read from its manifest's data), shuffled by
    random.Random(0), repeated when the split is shorter."""
    from bench.harness import test_words
    from service.engine.bundle import load_bundle

    words = test_words(load_bundle(max(model_dir.glob("[0-9]*"), key=lambda p: int(p.name))))
    return [words[i % len(words)] for i in range(count)]


async def burst(addr: str, model: str, words: list[str], timeout_s: float, warm: bool = False,
                connections: int = 1, say_when_done: int = 0) -> dict:
    """Every word in its own call, all started at once, in turn over `connections` clients (one
    connection each); the status of each as tritonclient reports it. say_when_done: print a line once
    that many calls have finished (a test holding the rest in the server then lets them go)."""
    import numpy as np
    import tritonclient.grpc.aio as triton
    from tritonclient.utils import InferenceServerException

    statuses: Counter[str] = Counter()
    details: Counter[tuple[str, str]] = Counter()  # (status, message): where each refusal came from
    clients = [triton.InferenceServerClient(addr) for _ in range(connections)]
    try:
        async def one(client, word: str) -> None:
            text = triton.InferInput("TEXT", [1], "BYTES")
            text.set_data_from_numpy(np.array([word.encode()], dtype=np.object_))
            try:
                await client.infer(model, [text], client_timeout=timeout_s)
                statuses["OK"] += 1
            except InferenceServerException as e:
                status = str(e.status()).removeprefix("StatusCode.")
                statuses[status] += 1
                details[status, re.sub(r"\d+", "N", str(e.message()))] += 1  # one line per cause, not per number
            if statuses.total() == say_when_done:
                print(f"done {say_when_done}", flush=True)

        if warm:  # each connection is up, its HTTP/2 settings exchanged, before the burst
            await asyncio.gather(*(c.is_server_ready(client_timeout=30) for c in clients))
        started = time.perf_counter()
        await asyncio.gather(*(one(clients[i % connections], w) for i, w in enumerate(words)))
        wall_s = time.perf_counter() - started
    finally:
        await asyncio.gather(*(c.close() for c in clients))
    return {"calls": len(words), "timeout_s": timeout_s, "ok": statuses["OK"], "statuses": dict(statuses.most_common()),
            "wall_s": round(wall_s, 2),
            "details": [{"status": s, "message": m, "count": n} for (s, m), n in details.most_common()]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--addr", help="a running server; default: start one as `make serve` does")
    p.add_argument("--calls", type=int, default=10000)
    p.add_argument("--timeout-s", type=float, default=3.0, help="each call's client timeout")
    p.add_argument("--model", default="g2p-en")
    p.add_argument("--words-from", type=Path, default=Path("models/g2p-en"), help="a model directory")
    p.add_argument("--words", type=Path, help="a file of words, one a line, instead of --words-from's test split")
    p.add_argument("--connections", type=int, default=1, help="clients the calls are spread over, one connection each")
    p.add_argument("--warm", action="store_true", help="one call on the connection before the burst")
    p.add_argument("--say-when-done", type=int, default=0, help="print `done N` once N calls have finished")
    p.add_argument("--repeat", type=int, default=1, help="bursts one after another, each counted")
    args, server_args = p.parse_known_args(argv)
    if args.words:
        listed = args.words.read_text().split()
        words = [listed[i % len(listed)] for i in range(args.calls)]
    else:
        words = words_of(args.words_from, args.calls)
    if args.addr:
        for _ in range(args.repeat):
            print(json.dumps(asyncio.run(burst(args.addr, args.model, words, args.timeout_s, args.warm, args.connections,
                                             args.say_when_done))), flush=True)
        return
    with Server(SERVE_ARGV + server_args) as server:  # further flags go to the server
        for _ in range(args.repeat):
            result = asyncio.run(burst(server.addr, args.model, words, args.timeout_s, args.warm, args.connections,
                                             args.say_when_done))
            print(json.dumps({**result, "server_args": server_args}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
