"""Request against continuous batching, interleaved, over the loads a user sends (issue 69).

    python -m bench.modes --bundle models/g2p-en/1 --bundle models/g2p-fra/1 \
        --loadgen build/attnserve-loadgen --seconds 4 --rounds 2

One server per mode per model, both running for the whole measurement; each workload runs against
request, then continuous, then again, so that whatever else the machine does falls on both alike.
The C++ load generator (bench/cpp/loadgen.cc) times the calls, so the client's own CPU per call stays
small beside the server's; each caller has a connection of its own, so that the server's worker
processes (one per core by default) share the calls as they would a user's. The mixed workload runs two load generators at once: short single words
and 16 long words a call, each timed on its own, so the p99 of short calls behind long ones shows.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.harness import BIN, MODEL_ONLY, Server, server_cpu_seconds, test_words, write_messages

MODES = ("request", "continuous")
METHOD = "/attnserve.v1.Transducer/Transduce"


def options(beam: int = 1):
    from attnserve.v1 import attnserve_pb2 as pb

    return pb.DecodeOptions(bypass_lexicon=True, return_attention=True, allow_unknown_symbols=True,
                            beam_size=beam, n_best=beam)


def calls_file(path: Path, words: list[str], per_call: int, beam: int = 1) -> Path:
    from attnserve.v1 import attnserve_pb2 as pb

    opts = options(beam)
    calls = (words[i:i + per_call] for i in range(0, len(words) - per_call + 1, per_call))
    return write_messages(path, (pb.TransduceRequest(inputs=c, options=opts) for c in calls))


def workloads(words: list[str], tmp: Path) -> dict[str, list[tuple[Path, int, int]]]:
    """name -> the load generators run at once: (requests file, concurrency, words per call)."""
    short = [w for w in words if len(w) <= 5]
    long_ = [w for w in words if len(w) >= 10]
    one = calls_file(tmp / "one.bin", words, 1)
    return {
        "1 word, c1": [(one, 1, 1)],
        "1 word, c16": [(one, 16, 1)],
        "1 word, c64": [(one, 64, 1)],
        "16 words, c16": [(calls_file(tmp / "sixteen.bin", words, 16), 16, 16)],
        "beam 5 n-best 5, 1 word, c16": [(calls_file(tmp / "beam.bin", words, 1, beam=5), 16, 1)],
        "mixed: short words c16 + 16 long words c4": [(calls_file(tmp / "short.bin", short, 1), 16, 1),
                                                      (calls_file(tmp / "long16.bin", long_, 16), 4, 16)],
    }


def run_loadgen(loadgen: str, addr: str, requests: Path, concurrency: int, seconds: float) -> dict:
    out = subprocess.run([loadgen, "--target", addr, "--method", METHOD, "--requests", str(requests),
                          "--seconds", str(seconds), "--deadline-ms", "30000", "--concurrency", str(concurrency),
                          "--channels", str(concurrency)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def measure_once(loadgen: str, server: Server, gens: list[tuple[Path, int, int]], seconds: float) -> list[dict]:
    cpu0 = server_cpu_seconds(server.proc.pid)
    with ThreadPoolExecutor(len(gens)) as pool:
        outs = list(pool.map(lambda g: run_loadgen(loadgen, server.addr, g[0], g[1], seconds), gens))
    cpu = server_cpu_seconds(server.proc.pid) - cpu0
    rows = []
    for (_, _, per_call), r in zip(gens, outs):
        ok = r["latency_ms"].get("OK", {"n": 0, "p50_ms": float("nan"), "p99_ms": float("nan")})
        rows.append({"calls_per_s": ok["n"] / r["seconds"], "words_per_s": ok["n"] * per_call / r["seconds"],
                     "p50_ms": ok["p50_ms"], "p99_ms": ok["p99_ms"],
                     "errors": sum(n for c, n in r["codes"].items() if c != "OK"),
                     "server_cpu_ms_per_call": 1000 * cpu / max(1, sum(o["answered"] for o in outs))})
    return rows


def measure(bundles: list[str], loadgen: str, seconds: float, rounds: int, only: list[str] | None = None) -> dict:
    from service.engine.bundle import load_bundle

    result = {"load_average_start": os.getloadavg(), "seconds": seconds, "rounds": rounds, "models": {}}
    for bundle_dir in bundles:
        bundle = load_bundle(Path(bundle_dir))
        words = test_words(bundle)
        with tempfile.TemporaryDirectory() as tmp:
            loads = {k: v for k, v in workloads(words, Path(tmp)).items() if not only or k in only}
            argv = [str(BIN / "attnserve-server"), "--model-dir", str(bundle_dir), "--host", "127.0.0.1",
                    "--metrics-port", "-1", *MODEL_ONLY]
            servers = {m: Server(argv + ["--mode", m]) for m in MODES}
            try:
                per = result["models"][bundle_dir] = {}
                for name, gens in loads.items():
                    for g in gens:  # warm each server on this workload's calls
                        for m in MODES:
                            run_loadgen(loadgen, servers[m].addr, g[0], g[1], 0.5)
                    got = {m: [] for m in MODES}
                    for _ in range(rounds):
                        for m in MODES:
                            got[m].append(measure_once(loadgen, servers[m], gens, seconds))
                    per[name] = got
                    print(name, {m: [[round(x["words_per_s"]) for x in rnd] for rnd in got[m]] for m in MODES},
                          flush=True)
            finally:
                for s in servers.values():
                    s.__exit__()
    result["load_average_end"] = os.getloadavg()
    return result


def markdown(r: dict) -> str:
    lines = [f"Each point {r['seconds']} s, {r['rounds']} rounds, request and continuous in turn; load average "
             f"{r['load_average_start'][0]:.2f} at the start, {r['load_average_end'][0]:.2f} at the end. "
             "Medians over the rounds; ratio = continuous / request words/s.", "",
             "| model | workload | stream | request words/s | continuous words/s | ratio | request p50 / p99 ms | "
             "continuous p50 / p99 ms |", "|---|---|---|---|---|---|---|---|"]
    for model, per in r["models"].items():
        for name, got in per.items():
            for i in range(len(got["request"][0])):
                med = {m: {k: statistics.median(rnd[i][k] for rnd in got[m])
                           for k in ("words_per_s", "p50_ms", "p99_ms")} for m in MODES}
                q, c = med["request"], med["continuous"]
                stream = ["", "short", "long"][i + (len(got["request"][0]) > 1)]
                lines.append(f"| {Path(model).parent.name} | {name} | {stream} | {q['words_per_s']:.0f} | "
                             f"{c['words_per_s']:.0f} | {c['words_per_s'] / q['words_per_s']:.2f} | "
                             f"{q['p50_ms']:.2f} / {q['p99_ms']:.2f} | {c['p50_ms']:.2f} / {c['p99_ms']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", action="append", required=True)
    p.add_argument("--loadgen", default="build/attnserve-loadgen")
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--workload", action="append", help="only these workloads (by name; default: every one)")
    p.add_argument("--json", type=Path, help="write the raw figures here")
    args = p.parse_args(argv)
    r = measure(args.bundle, args.loadgen, args.seconds, args.rounds, args.workload)
    if args.json:
        args.json.write_text(json.dumps(r, indent=1))
    print(markdown(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
