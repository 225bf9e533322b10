"""`make overload`: goodput of the real server offered 1x, 3x and 10x its capacity.

    python -m bench.overload --bundle models/g2p-en/1 --loadgen build/attnserve-loadgen

The server runs as `make serve` runs it (its own process, default settings). Load comes from
bench/cpp/loadgen.cc, a C++ gRPC client whose CPU stays small beside the server's on the
same 2 cores: single-word ModelInfer calls (the test split's words), each with a deadline.

- capacity: a closed loop of 64 calls outstanding; OK answers per second.
- then, for each factor: an open loop at factor x capacity for --seconds, whatever the replies,
  with a --deadline-ms deadline on every call. Goodput is OK answers per second (an answer after
  its deadline is DEADLINE_EXCEEDED, not OK), reported as a fraction of capacity, beside the
  median time a refused call took to hear RESOURCE_EXHAUSTED.

Writes bench/results/overload.json and overload.md; not a test (machines are noisy).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import BIN, MODEL_ONLY, Server, server_cpu_seconds, write_messages
from attnserve.inference import grpc_service_pb2 as kpb
from service.engine.bundle import load_bundle
from training.evaluate import load_refs

METHOD = "/inference.GRPCInferenceService/ModelInfer"
# Server configurations measured side by side: the default, and the ones it was chosen over.
CONFIGS = {"default": [],
           "tight gRPC backlog": ["--max-pending-calls", "128", "--max-pending-calls-hard", "512"],
           "--intra-op-threads 2": ["--intra-op-threads", "2"]}
# Connections the load generator opens: many clients' worth, so that the kernel's spreading of
# connections (not calls) over the server's worker processes evens out (docs/operations.md#worker-processes).
CHANNELS = 64
BURSTS = (1000, 10000)  # calls sent at once, each with BURST_DEADLINE_MS
BURST_DEADLINE_MS = 3000
TARGET = {3: 0.8, 10: 0.5}  # factor -> goodput / capacity the issue asks for
REFUSAL_P50_TARGET_MS = 5.0


def write_requests(path: Path, model: str, words: list[str], per_request: int = 1) -> None:
    """Serialized ModelInferRequests of `per_request` words each, each after its 4-byte little-endian
    length: what bench/cpp/loadgen.cc sends."""
    def request(chunk: list[str]):
        req = kpb.ModelInferRequest(model_name=model)
        req.inputs.add(name="TEXT", datatype="BYTES", shape=[per_request]).contents.bytes_contents.extend(
            w.encode() for w in chunk)
        return req

    write_messages(path, (request(words[i:i + per_request]) for i in range(0, len(words) - per_request + 1, per_request)))


def drive(loadgen: str, server: Server, requests: Path, seconds: float, deadline_ms: float, method: str = METHOD,
          **mode) -> dict:
    argv = [loadgen, "--target", server.addr, "--method", method, "--requests", str(requests),
            "--seconds", str(seconds), "--deadline-ms", str(deadline_ms), "--channels", str(CHANNELS)]
    for k, v in mode.items():
        argv += [f"--{k}", str(v)]
    cpu0 = server_cpu_seconds(server.proc.pid)
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    result["server_cpu_s"] = round(server_cpu_seconds(server.proc.pid) - cpu0, 2)
    return result


def markdown(r: dict) -> str:
    lines = [f"# Overload ({r['machine']['cpus']} CPUs, {r['when']})", "",
             f"Single-word ModelInfer calls from `bench/cpp/loadgen.cc`. Capacity: a closed loop of 64 calls "
             f"outstanding. Each offered load runs {r['seconds']:.0f} s, open loop, every call with a "
             f"{r['deadline_ms']:.0f} ms deadline; goodput counts OK answers (in time by construction).", "",
             "| server | capacity/s | offered | calls/s offered | goodput/s | goodput / capacity | target | "
             "p50 to hear RESOURCE_EXHAUSTED / CANCELLED | OK p50 / p99 | codes | server CPU s | loadgen CPU s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, c in r["configs"].items():
        cap = c["capacity_per_s"]
        for f, run in c["runs"].items():
            target = TARGET.get(int(float(f)))
            frac = run["goodput_per_s"] / cap
            lat = run["latency_ms"]
            refused = " / ".join(f"{lat[c]['p50_ms']:.1f} ms" if c in lat else "-"
                                 for c in ("RESOURCE_EXHAUSTED", "CANCELLED"))
            ok = f"{lat['OK']['p50_ms']:.0f} / {lat['OK']['p99_ms']:.0f} ms" if "OK" in lat else "-"
            met = "-" if target is None else f"≥ {target}: {'met' if frac >= target else '**not met**'}"
            codes = ", ".join(f"{k} {v}" for k, v in run["codes"].items())
            lines.append(f"| {name} | {cap:.0f} | {f}× | {run['sent'] / run['send_seconds']:.0f} | "
                         f"{run['goodput_per_s']:.0f} | {frac:.2f} | {met} | {refused} | {ok} | {codes} | "
                         f"{run['server_cpu_s']} | {run['client_cpu_s']:.1f} |")
    lines += ["", f"Bursts: calls sent at once, each with a {BURST_DEADLINE_MS / 1000:g} s deadline, answered OK:", "",
              "| server | " + " | ".join(f"{n} at once" for n in BURSTS) + " |",
              "|---|" + "---|" * len(BURSTS)]
    for name, c in r["configs"].items():
        lines.append(f"| {name} | " + " | ".join(
            f"{b['codes'].get('OK', 0)} OK; {', '.join(f'{k} {v}' for k, v in b['codes'].items() if k != 'OK') or '-'}"
            for b in c["bursts"].values()) + " |")
    lines += ["", f"A refused call is meant to hear so within {REFUSAL_P50_TARGET_MS:g} ms (p50). RESOURCE_EXHAUSTED comes "
              "from admission (service/scheduling/admission.py); CANCELLED from gRPC's own backlog bound, past what the "
              "transport can take in (--max-pending-calls)."]
    return "\n".join(lines) + "\n"


def measure(args, bundle, requests: Path, server_flags: list[str]) -> dict:
    """Capacity, then each offered factor of it, against one fresh server process."""
    with Server([str(BIN / "attnserve-server"), "--model-dir", str(bundle.path), "--metrics-port", "-1", *MODEL_ONLY,
                 *server_flags]) as server:
        drive(args.loadgen, server, requests, 2.0, 10_000, concurrency=64)  # warm-up
        cap_run = drive(args.loadgen, server, requests, args.seconds, 10_000, concurrency=64)
        capacity = cap_run["goodput_per_s"]
        print(f"{' '.join(server_flags) or 'default'}: capacity {capacity:.0f} calls/s ({cap_run['codes']})", flush=True)
        runs = {}
        for f in args.factors:
            time.sleep(2.0)  # the previous run's queue drains
            run = runs[f"{f:g}"] = drive(args.loadgen, server, requests, args.seconds, args.deadline_ms,
                                         rate=round(f * capacity))
            print(f"  {f:g}x: offered {run['sent'] / args.seconds:.0f}/s, goodput {run['goodput_per_s']:.0f}/s = "
                  f"{run['goodput_per_s'] / capacity:.2f} of capacity, {run['codes']}", flush=True)
        bursts = {}
        for n in BURSTS:
            time.sleep(4.0)
            burst = bursts[str(n)] = drive(args.loadgen, server, requests, 0.001, BURST_DEADLINE_MS, burst=n)
            print(f"  {n} at once: {burst['codes']}", flush=True)
    return {"server_flags": server_flags, "capacity_per_s": capacity, "capacity_run": cap_run, "runs": runs,
            "bursts": bursts}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", default="models/g2p-en/1")
    p.add_argument("--loadgen", default="build/attnserve-loadgen")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--deadline-ms", type=float, default=1000.0)
    p.add_argument("--factors", type=float, nargs="+", default=[1, 3, 10])
    p.add_argument("--out", default="bench/results")
    p.add_argument("--default-only", action="store_true", help="only the default server configuration")
    p.add_argument("--server-arg", action="append", default=[],
                   help="extra attnserve-server flag for every configuration (repeatable)")
    args = p.parse_args(argv)
    bundle = load_bundle(args.bundle)
    words = ["".join(src) for src in load_refs(bundle.manifest.data, "test")]
    random.Random(0).shuffle(words)
    with tempfile.TemporaryDirectory() as tmp:
        requests = Path(tmp) / "requests.bin"
        write_requests(requests, bundle.name, words)
        configs = {name: measure(args, bundle, requests, flags + args.server_arg) for name, flags in CONFIGS.items()
                   if not args.default_only or not flags}
    r = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
         "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "bundle": str(bundle.path),
         "seconds": args.seconds, "deadline_ms": args.deadline_ms, "configs": configs}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "overload.json").write_text(json.dumps(r, indent=2) + "\n")
    (out / "overload.md").write_text(markdown(r))
    print(markdown(r))


if __name__ == "__main__":
    sys.exit(main())
