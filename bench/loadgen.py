"""Load generator for the native API: closed loop, open loop (Poisson) and streaming.

    python -m bench.loadgen --addr 127.0.0.1:50051 --words words.txt --mode closed \
        --concurrency 64 --words-per-request 1 --duration-s 8

Prints one JSON object: words/s, calls/s, latency percentiles (ms), errors and
this process's CPU seconds (client and server share the machine's cores).
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import resource
import time

import grpc
import numpy as np

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg

ECHO_METHOD = "/attnserve.bench.Echo/Echo"


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Recorder:
    def __init__(self):
        self.latencies: list[float] = []
        self.words = 0
        self.errors = 0

    def summary(self, seconds: float, cpu: float) -> dict:
        lat = np.array(self.latencies) * 1000 if self.latencies else np.zeros(1)
        return {"seconds": round(seconds, 3), "calls": len(self.latencies), "words": self.words,
                "errors": self.errors, "words_per_s": self.words / seconds, "calls_per_s": len(self.latencies) / seconds,
                "p50_ms": float(np.percentile(lat, 50)), "p90_ms": float(np.percentile(lat, 90)),
                "p99_ms": float(np.percentile(lat, 99)), "client_cpu_s": round(cpu, 3),
                "client_cpu_util": round(cpu / seconds, 3)}


def make_call(channel, args, words):
    """An async function sending one request of `args.words_per_request` words."""
    if args.mode == "echo":
        echo = channel.unary_unary(ECHO_METHOD)
        payload = b"x" * 16
        return lambda: echo(payload, timeout=30), 1
    stub = pbg.TransducerStub(channel)
    options = pb.DecodeOptions(return_attention=args.attention)
    source = itertools.cycle(words)
    k = args.words_per_request

    def call():
        return stub.Transduce(pb.TransduceRequest(inputs=[next(source) for _ in range(k)], options=options),
                              timeout=30)
    return call, k


async def timed(call, k: int, rec: Recorder) -> None:
    """One call: its latency and words on success, an error otherwise."""
    t = time.perf_counter()
    try:
        await call()
    except grpc.aio.AioRpcError:
        rec.errors += 1
        return
    rec.latencies.append(time.perf_counter() - t)
    rec.words += k


async def closed_loop(channel, args, words, rec: Recorder, stop_at: float):
    call, k = make_call(channel, args, words)

    async def worker():
        while time.perf_counter() < stop_at:
            await timed(call, k, rec)
    await asyncio.gather(*(worker() for _ in range(args.concurrency)))


def poisson_gaps(rate: float, seed: int = 1):
    """Seconds between arrivals: the one schedule the open loop here and bench/inprocess.py share."""
    rng = random.Random(seed)
    while True:
        yield rng.expovariate(rate)


async def send_at_poisson_times(send, rate: float, stop_at: float, clock=time.perf_counter) -> None:
    """Start `send()` (a coroutine function) at Poisson times until stop_at, each call independent of
    the others' latency, then wait for them all. clock: the time stop_at is on, which must run with the
    event loop's (asyncio.sleep's); a test passes loop.time of a loop on virtual time, so that when each
    call starts does not depend on how busy the machine is."""
    pending = set()
    next_at = clock()
    gaps = poisson_gaps(rate)
    while next_at < stop_at:
        delay = next_at - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(send())
        pending.add(task)
        task.add_done_callback(pending.discard)
        next_at += next(gaps)
    await asyncio.gather(*pending)


async def open_loop(channel, args, words, rec: Recorder, stop_at: float):
    """Poisson arrivals at args.rate calls/s."""
    call, k = make_call(channel, args, words)
    await send_at_poisson_times(lambda: timed(call, k, rec), args.rate, stop_at)


async def streaming(channel, args, words, rec: Recorder, stop_at: float):
    """args.concurrency streams, each keeping args.window single-word requests in flight."""
    stub = pbg.TransducerStub(channel)
    options = pb.DecodeOptions(return_attention=args.attention)
    source = itertools.cycle(words)

    async def one_stream():
        call = stub.TransduceStream(timeout=args.duration_s + 30)
        sent_at: dict[str, float] = {}
        counter = itertools.count()
        window = asyncio.Semaphore(args.window)

        async def writer():
            while time.perf_counter() < stop_at:
                await window.acquire()
                rid = str(next(counter))
                sent_at[rid] = time.perf_counter()
                await call.write(pb.TransduceRequest(inputs=[next(source)], request_id=rid, options=options))
            await call.done_writing()

        async def reader():
            async for r in call:
                window.release()
                if r.HasField("error"):
                    rec.errors += 1
                    continue
                rec.latencies.append(time.perf_counter() - sent_at.pop(r.request_id))
                rec.words += 1
        await asyncio.gather(writer(), reader())
    await asyncio.gather(*(one_stream() for _ in range(args.concurrency)))


async def run(args) -> dict:
    words = [w for w in open(args.words, encoding="utf-8").read().split() if w]
    random.Random(0).shuffle(words)
    async with grpc.aio.insecure_channel(args.addr) as channel:
        await asyncio.wait_for(channel.channel_ready(), 30)
        rec = Recorder()
        if args.warmup_s:  # connections, server warm-up; not measured
            await {"closed": closed_loop, "echo": closed_loop, "open": open_loop, "stream": streaming}[args.mode](
                channel, args, words, Recorder(), time.perf_counter() + args.warmup_s)
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        fn = {"closed": closed_loop, "echo": closed_loop, "open": open_loop, "stream": streaming}[args.mode]
        await fn(channel, args, words, rec, t0 + args.duration_s)
        return rec.summary(time.perf_counter() - t0, cpu_seconds() - cpu0)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--addr", required=True)
    p.add_argument("--words", required=True, help="file of words, whitespace-separated")
    p.add_argument("--mode", choices=["closed", "open", "stream", "echo"], default="closed")
    p.add_argument("--concurrency", type=int, default=64, help="closed loop: callers; stream: streams")
    p.add_argument("--words-per-request", type=int, default=1)
    p.add_argument("--rate", type=float, default=100.0, help="open loop: calls per second")
    p.add_argument("--window", type=int, default=64, help="stream: requests in flight per stream")
    p.add_argument("--duration-s", type=float, default=8.0)
    p.add_argument("--warmup-s", type=float, default=1.0)
    p.add_argument("--attention", action=argparse.BooleanOptionalAction, default=True)
    args = p.parse_args(argv)
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    main()
