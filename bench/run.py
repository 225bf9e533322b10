"""`make bench`: every number side by side in one run, on one machine, on the test split's words.

    python -m bench.run [--bundle models/g2p-en/1] [--duration-s 8]
    python -m bench.run --engine-only      # words/s of in-process decoding by batch size

Writes bench/results/bench.json, bench/results/bench.md, bench/results/bench.png and
bench/results/frontier.png. Everything runs in the precision the server serves by default
(`--precision auto`: int8 where `make quantize` measured it within 0.1 points of fp32's test WER),
with one fp32 server run beside it. Not a test: it measures. Machines are shared and noisy, so compare the ratios
within a run rather than absolute numbers across runs.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

from bench.harness import BIN, MODEL_ONLY, Server, load, test_words, varied
from bench.report import write_report
from bench.sweep import engine_latency, engine_sweep
from service.engine.bundle import load_bundle
from service.engine.engine import served_precision
from training.evaluate import load_refs

OPEN_LOOP_FRACTIONS = (0.3, 0.5, 0.7, 0.9)


def closed_loop(server: Server, words_file: Path, d: float) -> dict:
    """Unloaded latency, (a) 1 word per request at concurrency 64, (b) 16 words per request at 16."""
    return {"unloaded": load(server, str(words_file), d / 2, concurrency=1),
            "a_1word_c64": load(server, str(words_file), d, concurrency=64),
            "b_16words_c16": load(server, str(words_file), d, concurrency=16, words_per_request=16)}


def open_loop_curves(server: Server, bundle_dir: str, words_file: Path, mode: str, rate_a: float, d: float) -> dict:
    """Target 5: the server and the same batcher and engine in-process, at the same Poisson arrival
    times, at each fraction of (a)'s throughput."""
    from bench import inprocess

    out = {}
    for f in OPEN_LOOP_FRACTIONS:
        served = load(server, str(words_file), d, mode="open", rate=f * rate_a)
        inproc = inprocess.measure(bundle_dir, str(words_file), mode, f * rate_a, d)
        print(f"  in-process at {f * rate_a:.0f}/s: p50 {inproc['p50_ms']:.2f} ms, p99 {inproc['p99_ms']:.2f} ms",
              flush=True)
        out[f"{int(f * 100)}%"] = {**served, "rate": f * rate_a, "in_process": inproc}
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", default="models/g2p-en/1")
    p.add_argument("--checkpoint", default="runs/g2p-en-gpu/stage2/best.pt",
                   help="the bundle's training checkpoint, for the naive PyTorch peer (bundles ship none: "
                        "`make train` writes g2p-en's here); without it that peer is left out, and said so")
    p.add_argument("--duration-s", type=float, default=8.0)
    p.add_argument("--out", default="bench/results")
    p.add_argument("--engine-only", action="store_true", help="only the in-process engine sweep, printed")
    p.add_argument("--loadgen", default="build/attnserve-loadgen", help="bench/cpp/loadgen.cc, built (fairness)")
    args = p.parse_args(argv)
    bundle = load_bundle(args.bundle)
    refs = load_refs(bundle.manifest.data, "test")
    words = test_words(bundle, refs)
    d = args.duration_s
    r: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                           "platform": platform.platform()},
               "bundle": str(bundle.path), "test_words": len(words), "duration_s": d}

    served = served_precision(bundle.manifest, "auto")
    r["served_precision"] = served
    print(f"engine (in-process onnxruntime, no server); the server serves {served}", flush=True)
    r["engine"] = engine_sweep(bundle, words, seconds=min(d, 4.0))
    r["engine_latency"] = engine_latency(bundle, words, served, seconds=min(d, 3.0))
    if args.engine_only:
        return
    print("the machine's own ceilings (bench/limits.py)", flush=True)
    from bench import limits

    r["limits"] = limits.measure(str(bundle.path), r["engine"])
    tmp = Path(tempfile.mkdtemp(prefix="attnserve-bench-"))
    words_file = tmp / "words.txt"
    words_file.write_text("\n".join(words))
    varied_file = tmp / "varied.txt"
    varied_file.write_text("\n".join(varied(words)))

    print("gRPC floor: echo RPC", flush=True)
    with Server([sys.executable, "-m", "bench.echo"], health=False) as echo:
        r["echo"] = load(echo, str(words_file), d, mode="echo", concurrency=64)
        r["echo_unloaded"] = load(echo, str(words_file), d / 2, mode="echo", concurrency=1)

    server_argv = [str(BIN / "attnserve-server"), "--model-dir", str(bundle.path), "--host", "127.0.0.1",
                   "--metrics-port", "-1", *MODEL_ONLY]
    for mode in ("continuous", "request"):
        print(f"attnserve, {mode} batching, {served}", flush=True)
        with Server(server_argv + ["--mode", mode]) as s:
            m = r[mode] = closed_loop(s, words_file, d)
            m["c_stream"] = load(s, str(words_file), d, mode="stream", concurrency=2, window=128)
            m["varied_c64"] = load(s, str(varied_file), d, concurrency=64)
            m["open_loop"] = open_loop_curves(s, str(bundle.path), words_file, mode,
                                              m["a_1word_c64"]["calls_per_s"], d)
    if served != "fp32":
        print("attnserve, request batching, fp32 (--precision fp32)", flush=True)
        with Server(server_argv + ["--mode", "request", "--precision", "fp32"]) as s:
            r["request_fp32"] = closed_loop(s, words_file, d)
    if served == "int8":  # the int8 served before answers were made batch-independent, for its speed
        from bench.frontier import DYNAMIC_INT8, dynamic_int8_bundle

        dynamic_int8_bundle()
        print("attnserve, request batching, int8 per tensor (onnxruntime dynamic; --precision int8)", flush=True)
        dynamic_argv = [a if a != str(bundle.path) else DYNAMIC_INT8 for a in server_argv]
        with Server(dynamic_argv + ["--mode", "request", "--precision", "int8"]) as s:
            r["request_int8_per_tensor"] = closed_loop(s, words_file, d)

    if Path(args.checkpoint).is_file():
        print("naive PyTorch server (eager, one request at a time)", flush=True)
        with Server([sys.executable, "-m", "bench.peers", "naive-server", "--checkpoint", args.checkpoint],
                    health=False) as naive:
            r["naive_torch"] = load(naive, str(words_file), d, concurrency=8)
    else:  # a bundle ships no weights for PyTorch; the report says the peer was not run
        print(f"naive PyTorch server left out: no checkpoint {args.checkpoint} (`make train`, or --checkpoint)",
              flush=True)
    r["wer"] = {"fp32": bundle.manifest.metrics.get("test"), "int8": bundle.manifest.int8.get("metrics", {}).get("test")}
    print("two models in one server: fair sharing (bench/fairness.py)", flush=True)
    from bench import fairness

    r["fairness"] = fairness.measure(bundle.path, args.loadgen, d)
    print("attnserve beside MLServer and BentoML, each at its best (bench/servers.py)", flush=True)
    from bench import servers

    r["servers"] = servers.tuned_and_measured(bundle.path, args.loadgen, d)
    print("real traffic: English words by their frequency, lexicon and cache on and off (bench/realtraffic.py)",
          flush=True)
    from bench import realtraffic

    r["real_traffic"] = realtraffic.measure(bundle, d, r["engine"], echo_unloaded=r["echo_unloaded"])
    print("the frontier: accuracy against speed, every model on the test words (bench/frontier.py)", flush=True)
    from bench import frontier

    r["frontier"] = frontier.measure(words, refs)
    write_report(r, Path(args.out))


if __name__ == "__main__":
    main()
