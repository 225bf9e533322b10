"""Soak: a real `attnserve-server` process under steady load for a set time (`make soak`).

    python scripts/soak.py --model-dir models/g2p-en --seconds 600

Starts the server from this venv, warms it up, then keeps `--concurrency` callers busy
with a varied mix (word lengths, batch sizes, greedy and beam search, with and without
attention) and prints requests served, errors, and the server's RSS at start (after the
warm-up) and at the end. Exits 1 on any error, on RSS growth over --max-rss-growth-pct,
or when the server does not stop cleanly on SIGTERM.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import string
import subprocess
import sys
import time
from pathlib import Path

import grpc

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the repository's tests/ too
from tests.helpers import free_port, wait_serving  # noqa: E402  (what the tests reach servers with)

COMMON = ("the of and to in is you that it he was for on are as with his they at be this have from or one had "
          "by word but not what all were we when your can said there use an each which she do how their if will "
          "up other about out many then them these so some her would make like him into time has look two more "
          "write go see number no way could people my than first water been call who oil its now find long down "
          "day did get come made may part attention phoenix knight internationalization rhythm queue").split()


def rss_mib(pid: int) -> float:
    """The server's resident memory: the process and every process below it (with --workers, the
    supervisor holds next to nothing and each worker its own models)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            children.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            total += next(int(line.split()[1]) / 1024 for line in Path(f"/proc/{p}/status").read_text().splitlines()
                          if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            if p == pid:
                raise RuntimeError(f"no VmRSS for pid {pid}") from None
    return total


def random_request(rng: random.Random) -> pb.TransduceRequest:
    words = [rng.choice(COMMON) if rng.random() < 0.7 else
             "".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 20))) for _ in range(rng.randint(1, 8))]
    beam = rng.choice([1, 1, 1, 1, 2, 4])
    return pb.TransduceRequest(inputs=words, options=pb.DecodeOptions(
        return_attention=rng.random() < 0.7, beam_size=beam, n_best=rng.randint(1, beam),
        max_output_len=rng.choice([0, 0, 0, 5])))


class Counts:
    def __init__(self):
        self.served = 0
        self.errors: dict[str, int] = {}


async def load(address: str, concurrency: int, seconds: float, counts: Counts, seed: int) -> None:
    stop = time.monotonic() + seconds
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pbg.TransducerStub(channel)

        async def caller(i: int) -> None:
            rng = random.Random(seed * 1000 + i)
            while time.monotonic() < stop:
                request = random_request(rng)
                try:
                    reply = await stub.Transduce(request, timeout=30)
                    if len(reply.results) != len(request.inputs):
                        raise ValueError(f"{len(reply.results)} results for {len(request.inputs)} inputs")
                    counts.served += 1
                except (grpc.aio.AioRpcError, ValueError) as e:
                    key = e.code().name if isinstance(e, grpc.aio.AioRpcError) else "BAD_REPLY"
                    counts.errors[key] = counts.errors.get(key, 0) + 1

        await asyncio.gather(*(caller(i) for i in range(concurrency)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", default=os.environ.get("MODEL_DIR", "models/g2p-en"))
    p.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 600)),
                   help="steady-load time (default: $SOAK_SECONDS or 600)")
    p.add_argument("--warmup-s", type=float, default=None, help="load before the start RSS is taken "
                   "(default: a tenth of --seconds, at most 30)")
    p.add_argument("--concurrency", type=int, default=8, help="callers, each with one call in flight")
    p.add_argument("--max-rss-growth-pct", type=float, default=25.0, help="fail above this growth; 0 = no check")
    p.add_argument("--seed", type=int, default=1)
    args, server_args = p.parse_known_args(argv)  # the rest goes to attnserve-server, e.g. --max-batch-size 16
    warmup_s = min(30.0, args.seconds / 10) if args.warmup_s is None else args.warmup_s
    port = free_port()
    address = f"127.0.0.1:{port}"
    server = Path(sys.executable).parent / "attnserve-server"
    proc = subprocess.Popen([str(server), "--model-dir", args.model_dir, "--host", "127.0.0.1", "--port", str(port),
                             "--metrics-port", "-1", *server_args])
    try:
        try:
            wait_serving(address, 300, proc)
        except (RuntimeError, TimeoutError) as e:
            sys.exit(f"soak: {e}")
        warm = Counts()
        asyncio.run(load(address, args.concurrency, warmup_s, warm, args.seed))
        rss_start, counts = rss_mib(proc.pid), Counts()
        print(f"soak: {args.seconds:.0f} s of load, {args.concurrency} callers, after {warmup_s:.0f} s warm-up "
              f"({warm.served} requests); server RSS {rss_start:.1f} MiB", flush=True)
        started = time.monotonic()
        asyncio.run(load(address, args.concurrency, args.seconds, counts, args.seed + 1))
        elapsed = time.monotonic() - started
        rss_end = rss_mib(proc.pid)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            exit_code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            exit_code = proc.wait()
    errors = sum(counts.errors.values()) + sum(warm.errors.values())
    growth = 100 * (rss_end - rss_start) / rss_start
    print(f"soak: requests served {counts.served} ({counts.served / elapsed:.0f}/s over {elapsed:.0f} s), "
          f"errors {errors} {dict(counts.errors, **warm.errors) if errors else ''}".rstrip())
    print(f"soak: server RSS start {rss_start:.1f} MiB, end {rss_end:.1f} MiB, growth {growth:+.1f}%; "
          f"server exit code {exit_code} after SIGTERM")
    failed = errors > 0 or exit_code != 0 or counts.served == 0 or \
        (args.max_rss_growth_pct > 0 and growth > args.max_rss_growth_pct)
    print("soak: FAILED" if failed else "soak: OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
