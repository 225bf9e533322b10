"""Length grouping (`--length-grouping`, service/scheduling/lengths.py) measured side by side.

    python -m bench.lengths [--rounds 2] [--duration-s 8] [--groupings false,true]
    python -m bench.lengths --inprocess [--seconds 2]

Server: `attnserve-server --mode request --length-grouping G` (model only: no lexicon, no cache),
each grouping in turn, round after round, on the workloads of `make bench`: "varied" (the test
words of <= 4 and of >= 11 letters, one of each in turn) and "uniform" (the test words shuffled),
one word per request at concurrency 64 (bench/loadgen.py). Prints words/s, p50/p99 and the share
of greedy row-steps spent on rows that had ended (1 - attnserve_decode_row_steps_useful_total /
attnserve_decode_row_steps_total, read from /metrics before and after the load).

In-process: the engine alone, batches of the varied and the uniform words as they come, against
the same batches split by lengths.split (what --length-grouping true does): words/s and the
same waste share.
The cores are shared, so only the figures of one run, side by side, compare.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import BIN, MODEL_ONLY, Server, free_port, metric_samples, test_words, varied


def workloads(bundle_dir: str) -> dict[str, list[str]]:
    """make bench's two single-word workloads."""
    from service.engine.bundle import load_bundle

    words = test_words(load_bundle(bundle_dir))
    return {"varied": varied(words), "uniform": words}


def counters(metrics_port: int) -> tuple[float, float]:
    """attnserve_decode_row_steps_total and attnserve_decode_row_steps_useful_total, over models."""
    got = {"attnserve_decode_row_steps_total": 0.0, "attnserve_decode_row_steps_useful_total": 0.0}
    for sample in metric_samples(metrics_port):
        if sample.name in got:
            got[sample.name] += sample.value
    return got["attnserve_decode_row_steps_total"], got["attnserve_decode_row_steps_useful_total"]


def serve_and_load(bundle_dir: str, grouping: str, words_file: Path, duration_s: float, concurrency: int,
                   words_per_request: int = 1) -> dict:
    metrics_port = free_port()
    with Server([str(BIN / "attnserve-server"), "--model-dir", bundle_dir, "--host", "127.0.0.1",
                 "--metrics-port", str(metrics_port), *MODEL_ONLY, "--mode", "request",
                 "--length-grouping", grouping]) as server:
        rows0, useful0 = counters(metrics_port)
        out = subprocess.run([sys.executable, "-m", "bench.loadgen", "--addr", server.addr,
                              "--words", str(words_file), "--concurrency", str(concurrency),
                              "--words-per-request", str(words_per_request),
                              "--duration-s", str(duration_s)], capture_output=True, text=True, check=True)
        rows1, useful1 = counters(metrics_port)
    r = json.loads(out.stdout)
    r["waste"] = 1 - (useful1 - useful0) / (rows1 - rows0) if rows1 > rows0 else None
    return r


def inprocess(bundle_dir: str, sets: dict[str, list[str]], seconds: float, batches=(64, 32, 16)) -> None:
    from service.engine.bundle import load_bundle
    from service.config import EngineConfig
    from service.engine.engine import Engine
    from service.scheduling.lengths import split

    engine = Engine(load_bundle(bundle_dir), EngineConfig())
    engine.warm_up([list(w) for w in sets["uniform"][:64]])
    plans = {"false": lambda c: [c], "true": lambda c: [[c[i] for i in g] for g in split([len(w) for w in c])]}

    def run(words, plan, batch):
        n = row_steps = useful = i = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            chunk = [words[(i + k) % len(words)] for k in range(batch)]
            i = (i + batch) % len(words)
            for group in plan(chunk):
                steps = [d.steps for d in engine.decode([list(w) for w in group])]
                row_steps, useful = row_steps + max(steps) * len(steps), useful + sum(steps)
            n += batch
        return n / (time.perf_counter() - t0), 1 - useful / row_steps

    print(f"in-process engine ({engine.precision}), {seconds:g} s a figure")
    for name, words in sets.items():
        for batch in batches:
            for rnd in range(2):
                for grouping, plan in plans.items():
                    wps, waste = run(words, plan, batch)
                    print(f"  {name:7s} batch {batch:2d} round {rnd} grouping {grouping:5s} {wps:6.0f} words/s  "
                          f"waste {waste:.2f}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", default="models/g2p-en/1")
    p.add_argument("--inprocess", action="store_true")
    p.add_argument("--seconds", type=float, default=2.0, help="in-process: seconds a figure")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--duration-s", type=float, default=8.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--words-per-request", type=int, default=1)
    p.add_argument("--groupings", default="false,true", help="--length-grouping values, in turn")
    p.add_argument("--workloads", default="varied,uniform")
    args = p.parse_args(argv)
    sets = workloads(args.bundle)
    sets = {k: sets[k] for k in args.workloads.split(",")}
    if args.inprocess:
        inprocess(args.bundle, sets, args.seconds)
        return
    tmp = Path(tempfile.mkdtemp(prefix="attnserve-lengths-"))
    for name, words in sets.items():
        (tmp / f"{name}.txt").write_text("\n".join(words))
    for name in sets:
        for rnd in range(args.rounds):
            for grouping in args.groupings.split(","):
                r = serve_and_load(args.bundle, grouping, tmp / f"{name}.txt", args.duration_s, args.concurrency,
                                   args.words_per_request)
                print(f"{name:7s} round {rnd} grouping {grouping:5s} {r['words_per_s']:6.0f} words/s  p50 {r['p50_ms']:6.1f} "
                      f"p99 {r['p99_ms']:6.1f} ms  waste {r['waste']:.2f}  errors {r['errors']}", flush=True)


if __name__ == "__main__":
    main()
