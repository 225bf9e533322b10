"""The server's answerer, batcher and engine driven in-process, without gRPC, by the same Poisson arrivals
as bench/loadgen.py's open loop: what the server adds to the tail is the difference (target 5).

    python -m bench.inprocess --bundle models/g2p-en/1 --words words.txt --mode request --rate 300

Same words in the same order (shuffled by random.Random(0), then cycled), same arrival times
(bench.loadgen.poisson_gaps), same warm-up, one word per call; the batcher is built by
make_batcher from the server's own defaults, lexicon and cache off as in `make bench`'s server runs.
Each measurement runs in its own process, like a server, so that no two engines share a thread pool.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import sys
import time
from pathlib import Path


from bench.loadgen import Recorder, send_at_poisson_times
from service.domain import DeadlineExpired, Overloaded


async def open_loop(answerer, words: list[str], rate: float, stop_at: float, rec: Recorder,
                    clock=time.perf_counter) -> None:
    """One-word calls sent at bench/loadgen.py's Poisson times until stop_at, recorded as the load
    generator records its RPCs (a refusal counts as its failed call). clock: as send_at_poisson_times'."""
    source = itertools.cycle(words)

    async def call() -> None:
        text = next(source)
        started = clock()
        try:
            await answerer.transduce([text])
        except (Overloaded, DeadlineExpired):
            rec.errors += 1
            return
        rec.latencies.append(clock() - started)
        rec.words += 1

    await send_at_poisson_times(call, rate, stop_at, clock)


async def run(bundle_path: str, words: list[str], mode: str, rate: float, duration_s: float, warmup_s: float,
              precision: str) -> dict:
    from service.answering.answerer import Answerer
    from service.config import AnswerConfig, BatcherConfig, EngineConfig
    from service.engine.bundle import load_bundle
    from service.metrics import Metrics
    from service.repository.models import warm_engine
    from service.scheduling.batcher import make_batcher

    engine = warm_engine(load_bundle(bundle_path), EngineConfig(precision=precision))
    metrics = Metrics().for_model("bench")
    batcher = make_batcher(engine, BatcherConfig(mode=mode), metrics)
    answerer = Answerer(engine, batcher, AnswerConfig(cache_entries=0, lexicon=False), metrics)
    batcher.start()
    rec = Recorder()
    try:
        if warmup_s:
            await open_loop(answerer, words, rate, time.perf_counter() + warmup_s, Recorder())
        t0 = time.perf_counter()
        await open_loop(answerer, words, rate, t0 + duration_s, rec)
        seconds = time.perf_counter() - t0
    finally:
        await batcher.stop()
    out = rec.summary(seconds, cpu=0.0)
    del out["client_cpu_s"], out["client_cpu_util"]  # no client here
    return out


def measure(bundle_path: str, words_file: str, mode: str, rate: float, duration_s: float,
            precision: str = "auto", warmup_s: float = 1.0) -> dict:
    """One in-process open-loop point, in a process of its own (as the server is)."""
    import subprocess

    out = subprocess.run([sys.executable, "-m", "bench.inprocess", "--bundle", bundle_path, "--words", words_file,
                          "--mode", mode, "--rate", str(rate), "--duration-s", str(duration_s),
                          "--warmup-s", str(warmup_s), "--precision", precision],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", required=True)
    p.add_argument("--words", required=True, help="file of words, whitespace-separated (as bench.loadgen's)")
    p.add_argument("--mode", choices=["request", "continuous"], default="request")
    p.add_argument("--rate", type=float, required=True, help="calls per second")
    p.add_argument("--duration-s", type=float, default=8.0)
    p.add_argument("--warmup-s", type=float, default=1.0)
    p.add_argument("--precision", choices=["auto", "fp32", "int8"], default="auto")
    args = p.parse_args(argv)
    words = [w for w in Path(args.words).read_text(encoding="utf-8").split() if w]
    random.Random(0).shuffle(words)  # as bench/loadgen.py does
    print(json.dumps(asyncio.run(run(args.bundle, words, args.mode, args.rate, args.duration_s, args.warmup_s,
                                     args.precision))))


if __name__ == "__main__":
    main()
