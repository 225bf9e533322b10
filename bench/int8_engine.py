"""The int8 engine's ways side by side, in-process, interleaved: `python -m bench.int8_engine`.

Each way is a copy of one bundle (build/int8_engine/<way>/) whose int8 graphs are made by one of
training/quantize.py's methods: fp32 (the bundle's own graphs), the per-row int8 the shipped bundles
hold (`rowwise`), onnxruntime's per-tensor dynamic int8 it replaced (`dynamic`, batch-dependent: kept
to compare against), and the candidates of issue 69. Every engine runs on one intra-op thread, as a
server worker decodes, greedy through the ONNX Loop (request mode's decoding); the ways take turns
round after round so that a busy machine weighs on each alike, and each figure is the best round's:
words/s of batches of 64 test words, and the p50 of lone words' decode times. Ratios are against
the per-row int8 the shipped bundles hold. Not part of `make bench` (bench/limits.py and the frontier
measure the served and per-tensor int8 there); docs/performance.md, "int8 that is per-row and fast".
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from attnserve.bundle import write
from bench.harness import test_words
from service.config import EngineConfig
from service.engine.bundle import load_bundle
from service.engine.engine import Engine

OUT = Path("build/int8_engine")


def way_bundle(shipped: Path, method: str, out: Path = OUT) -> Path:
    """A copy of the bundle quantized by `method` as `make quantize` does it (evaluated, checked, timed),
    reused when already there; "fp32" and "shipped" read the bundle itself."""
    if method in ("fp32", "shipped"):
        return shipped
    target = out / shipped.parent.name / method / shipped.name
    if (target / "manifest.json").exists():
        return target
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(shipped, target, ignore=shutil.ignore_patterns("*.int8.onnx", "manifest.json"))
    bundle = load_bundle(shipped)
    graphs = {role: f for role, f in bundle.manifest.graphs.items() if not role.endswith(".int8")}
    write(target, bundle.manifest.replace(graphs=graphs, int8=None))
    # in a process of its own: its engine makes the process's thread pool, every core, and these are timed on one
    subprocess.run([sys.executable, "-m", "training.quantize", "--bundle", str(target), "--method", method],
                   check=True, stdout=subprocess.DEVNULL)
    return target


def measure(ways: dict, words: list[str], rounds: int, seconds: float, lone_words: int) -> dict:
    engines = {name: Engine(load_bundle(path), EngineConfig(intra_op_threads=1, precision="fp32" if name == "fp32"
                                                            else "int8", greedy_loop="onnx"))
               for name, path in ways.items()}
    chunks = [[list(w) for w in words[i:i + 64]] for i in range(0, len(words) - 63, 64)]
    lone = [[list(w)] for w in words[:lone_words]]
    for e in engines.values():
        e.decode(chunks[0])  # warm-up
    rates = {name: [] for name in engines}
    p50s = {name: [] for name in engines}
    for _ in range(rounds):
        for name, engine in engines.items():
            n, i, started = 0, 0, time.perf_counter()
            while time.perf_counter() - started < seconds:
                engine.decode(chunks[i % len(chunks)])
                n, i = n + 64, i + 1
            rates[name].append(n / (time.perf_counter() - started))
            times = []
            for w in lone:
                t = time.perf_counter()
                engine.decode(w)
                times.append(time.perf_counter() - t)
            p50s[name].append(1000 * statistics.median(times))
    return {name: {"batch64_words_per_s": max(rates[name]), "batch1_p50_ms": min(p50s[name])} for name in engines}


def main(argv=None):
    import os

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", default="models/g2p-en/1")
    p.add_argument("--ways", nargs="+", default=["fp32", "dynamic", "shipped"],
                   help="fp32, shipped (the bundle's own int8), or a training/quantize.py method")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=1.0, help="per batch-64 point per round")
    p.add_argument("--lone-words", type=int, default=100, help="lone words per batch-1 point per round")
    args = p.parse_args(argv)
    shipped = Path(args.bundle)
    ways = {w: way_bundle(shipped, w) for w in args.ways}
    r = measure(ways, test_words(load_bundle(shipped)), args.rounds, args.seconds, args.lone_words)
    base = r.get("shipped")
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) after the run; best of {args.rounds} interleaved rounds, "
          f"one intra-op thread, greedy ONNX Loop, {args.bundle}")
    print("| way | batch 64 words/s | x shipped int8 | batch 1 p50 ms | x shipped int8 | test WER | one answer |\n"
          "|---|---|---|---|---|---|---|")
    for name, m in r.items():
        ratio = (lambda k: f"{m[k] / base[k]:.2f}") if base else (lambda k: "-")
        manifest = load_bundle(ways[name]).manifest
        int8 = manifest.int8 if name != "fp32" else {"metrics": manifest.metrics, "batch_independence": {}}
        m["test_wer"] = int8.get("metrics", {}).get("test", {}).get("wer")
        m["independent"] = int8.get("batch_independence", {}).get("independent")
        m["encoder_lstms"] = int8.get("encoder_lstms", {}).get("kept")
        print(f"| {name} | {m['batch64_words_per_s']:.0f} | {ratio('batch64_words_per_s')} | "
              f"{m['batch1_p50_ms']:.2f} | {ratio('batch1_p50_ms')} | "
              f"{'-' if m['test_wer'] is None else format(100 * m['test_wer'], '.2f') + '%'} | "
              f"{m['independent'] if name != 'fp32' else '-'} |")
    print(json.dumps(r))
    return r


if __name__ == "__main__":
    main()
