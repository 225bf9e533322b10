"""attnserve beside the servers people would pick instead, each measured the same way in one run
(`make bench` runs it; or `python -m bench.servers`).

    python -m bench.servers --bundle models/g2p-en/1 --loadgen build/attnserve-loadgen [--rounds 2]
    python -m bench.servers --tune      # the peers' own settings compared first, each one's best kept

The peers run our own Engine, so what differs is the serving stack: MLServer 1.7.1
(bench/mlserver_runtime.py; the same Open Inference Protocol, gRPC and REST) and BentoML 1.4
(bench/bentoml_service.py; REST only), each with its adaptive batching, each from its own virtual
environment (bench/peer_servers.py). All get the test split's words, lexicon and cache off on our
side (the peers have neither): single-word ModelInfer calls over gRPC from bench/cpp/loadgen.cc
(closed loop at 1, 16 and 64 calls outstanding, and 16 words a call at 16; one connection at 1, 64
otherwise) and single-word calls over REST from wrk (Debian's; a Lua script cycles the words) at 1,
16 and 64 connections, every point --seconds long. attnserve runs as it ships (--workers 0: one process per core) and as one
process (--workers 1), the mode before worker processes, for the ratio between the two in the same run.

Each point records calls/s, latency, errors, the server's CPU per call and the cores it used: the
CPU time of every process of the server (the supervisor and its workers; a peer and its worker
processes) over the point's wall time. Rounds interleave the servers, so that a busy machine weighs
on each alike; read the ratios within a round. Writes bench/results/servers.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from bench.harness import BIN, MODEL_ONLY, Server, free_port, server_cpu_seconds, test_words
from bench.overload import METHOD, write_requests
from bench.peer_servers import BENTOML, MLSERVER, BentoML, MLServer, oip_wrk_script
from service.engine.bundle import load_bundle

# The loadgen's connections: a lone caller has one; calls outstanding by the dozen come from many callers,
# 64 connections' worth, which the kernel spreads over worker processes (it spreads connections, not
# calls). wrk, for REST, opens one connection per call outstanding.
CHANNELS = 64


def channels(concurrency: int) -> int:
    return 1 if concurrency == 1 else CHANNELS


GRPC_POINTS = {"c1": (1, 1), "c16": (16, 1), "c64": (64, 1), "16 words c16": (16, 16)}  # (calls outstanding, words)
REST_POINTS = {"REST c1": 1, "REST c16": 16, "REST c64": 64}
# The peers' settings compared first (--tune; `make bench` does): MLServer's inference worker processes
# against its adaptive batching (max_batch_size calls within max_batch_time seconds), by gRPC calls/s
# at c16 and c64; BentoML's worker processes, by REST calls/s at c16 and c64.
MLSERVER_TUNING = [{"parallel_workers": w, "max_batch_size": size, "max_batch_time": wait_s}
                   for w in (0, 1, 2) for size, wait_s in ((64, 0.008), (64, 0.002), (16, 0.002))]
BENTOML_TUNING = [{"workers": w, "max_batch_size": 64, "max_latency_ms": 1000} for w in (1, 2)]
DEFAULTS = {"MLServer": MLSERVER_TUNING[3], "BentoML": BENTOML_TUNING[0]}  # without --tune: each one's default
PEERS = {"MLServer": MLServer, "BentoML": BentoML}


class Attnserve:
    """attnserve-server as it ships, lexicon and cache off, with `workers` processes."""

    def __init__(self, bundle_dir: Path, workers: int):
        self.http_port = free_port()
        self.server = Server([str(BIN / "attnserve-server"), "--model-dir", str(bundle_dir), "--host", "127.0.0.1",
                              "--metrics-port", str(self.http_port), "--workers", str(workers), *MODEL_ONLY])
        self.proc, self.addr, self.name = self.server.proc, self.server.addr, load_bundle(bundle_dir).name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.__exit__(*exc)

    def wrk_script(self, path: Path, words: list[str]) -> Path:
        return oip_wrk_script(path, self.name, words)


def grpc_point(loadgen: str, server, requests: Path, seconds: float, concurrency: int) -> dict:
    cpu0, t0 = server_cpu_seconds(server.proc.pid), time.perf_counter()
    out = subprocess.run([loadgen, "--target", server.addr, "--method", METHOD, "--requests", str(requests),
                          "--seconds", str(seconds), "--deadline-ms", "30000", "--concurrency", str(concurrency),
                          "--channels", str(channels(concurrency))], capture_output=True, text=True, check=True).stdout
    wall, cpu = time.perf_counter() - t0, server_cpu_seconds(server.proc.pid) - cpu0
    r = json.loads(out)
    ok = r["latency_ms"].get("OK", {"p50_ms": 0.0, "p90_ms": 0.0, "p99_ms": 0.0})
    calls = r["codes"].get("OK", 0)
    return {"calls_per_s": calls / r["seconds"], "p50_ms": ok["p50_ms"], "p90_ms": ok["p90_ms"],
            "p99_ms": ok["p99_ms"], "errors": r["answered"] - calls, "cores": cpu / wall,
            "cpu_ms_per_call": 1000 * cpu / max(calls, 1), "client_cores": r["client_cpu_s"] / wall}


def rest_point(script: Path, server, seconds: float, connections: int) -> dict:
    cpu0, t0 = server_cpu_seconds(server.proc.pid), time.perf_counter()
    # wrk takes whole seconds only
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "30s", "-s", str(script),
            f"http://127.0.0.1:{server.http_port}"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    wall, cpu = time.perf_counter() - t0, server_cpu_seconds(server.proc.pid) - cpu0
    r = json.loads(out.strip().splitlines()[-1])
    calls = r["requests"] - r["non2xx"] - r["errors"]
    return {"calls_per_s": calls / r["seconds"], "p50_ms": r["p50_ms"], "p90_ms": r["p90_ms"], "p99_ms": r["p99_ms"],
            "errors": r["non2xx"] + r["errors"], "cores": cpu / wall, "cpu_ms_per_call": 1000 * cpu / max(calls, 1)}


def points(loadgen: str, server, work: dict, seconds: float, which: tuple[str, ...] | None = None) -> dict:
    """Every point the server speaks (BentoML has no gRPC), or those named in `which`."""
    grpc = getattr(server, "addr", None) is not None
    script = server.wrk_script(work["tmp"] / f"{type(server).__name__}.lua", work["words"])
    if grpc:
        grpc_point(loadgen, server, work[1], 2.0, 64)  # warm-up: connections, the first batches
    else:
        rest_point(script, server, 2.0, 64)
    out = {}
    for name, (concurrency, words) in GRPC_POINTS.items():
        if grpc and (which is None or name in which):
            out[name] = grpc_point(loadgen, server, work[words], seconds, concurrency)
    for name, connections in REST_POINTS.items():
        if which is None or name in which:
            out[name] = rest_point(script, server, seconds, connections)
    for name, x in out.items():
        print(f"    {name}: {x['calls_per_s']:.0f} calls/s, p50 {x['p50_ms']:.2f} ms, p99 {x['p99_ms']:.1f} ms, "
              f"{x['cores']:.2f} cores, {x['cpu_ms_per_call']:.3f} ms CPU a call, errors {x['errors']}", flush=True)
    return out


def available(peer: str) -> bool:
    return (MLSERVER if peer == "MLServer" else BENTOML).exists()


def tune(bundle_dir: Path, loadgen: str, work: dict, seconds: float, peers: tuple[str, ...] = tuple(PEERS)) -> dict:
    """Each peer at each of its settings: the best of each by its calls/s at c16 plus c64."""
    out = {}
    for peer, grid, (c16, c64) in (("MLServer", MLSERVER_TUNING, ("c16", "c64")),
                                   ("BentoML", BENTOML_TUNING, ("REST c16", "REST c64"))):
        if peer not in peers or not available(peer):
            continue
        runs = []
        for settings in grid:
            print(f"  {peer} {settings}", flush=True)
            with PEERS[peer](bundle_dir, settings) as m:
                runs.append({"settings": settings, "points": points(loadgen, m, work, seconds, which=(c16, c64))})
        best = max(runs, key=lambda r: r["points"][c16]["calls_per_s"] + r["points"][c64]["calls_per_s"])
        out[peer] = {"runs": runs, "best": best["settings"]}
    return out


def workload(bundle_dir: Path, tmp: Path) -> dict:
    bundle = load_bundle(bundle_dir)
    words = test_words(bundle)
    write_requests(tmp / "w1.bin", bundle.name, words)
    write_requests(tmp / "w16.bin", bundle.name, words, per_request=16)
    return {1: tmp / "w1.bin", 16: tmp / "w16.bin", "words": words, "tmp": tmp}


def measure(bundle_dir: Path, loadgen: str, seconds: float, rounds: int, peer_settings: dict,
            attnserve_workers: tuple[int, ...] = (0, 1)) -> dict:
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        work = workload(bundle_dir, Path(tmp))
        out = []
        for i in range(rounds):
            this: dict = {}
            for workers in attnserve_workers:
                print(f"  round {i + 1}: attnserve --workers {workers}", flush=True)
                with Attnserve(bundle_dir, workers) as server:
                    this[f"attnserve --workers {workers}"] = points(loadgen, server, work, seconds)
            for peer, settings in peer_settings.items():
                print(f"  round {i + 1}: {peer} {settings}", flush=True)
                with PEERS[peer](bundle_dir, settings) as m:
                    this[peer] = points(loadgen, m, work, seconds)
            out.append(this)
    # What else ran shows in the load average: with nothing else, this run's own processes keep it near 2.
    return {"seconds": seconds, "channels": CHANNELS, "peer_settings": peer_settings,
            "cpus": len(os.sched_getaffinity(0)), "load_average": [load_before, os.getloadavg()[0]], "rounds": out}


def ratio(run: dict, ours: str, theirs: str, point: str, key: str = "calls_per_s") -> float:
    return run[ours][point][key] / max(run[theirs][point][key], 1e-9)


TARGETS = [  # (what, point, ours, theirs, key, needed, higher is better)
    ("attnserve / MLServer calls/s, gRPC c16", "c16", "attnserve --workers 0", "MLServer", "calls_per_s", 2.0, True),
    ("attnserve / MLServer calls/s, gRPC c64", "c64", "attnserve --workers 0", "MLServer", "calls_per_s", 2.0, True),
    ("attnserve / MLServer calls/s, REST c16", "REST c16", "attnserve --workers 0", "MLServer", "calls_per_s", 3.0,
     True),
    ("attnserve / MLServer words/s, 16 words a call", "16 words c16", "attnserve --workers 0", "MLServer",
     "calls_per_s", 2.0, True),
    ("attnserve / MLServer calls/s, gRPC c1", "c1", "attnserve --workers 0", "MLServer", "calls_per_s", 3.0, True),
    ("c1 p50: workers minus single process, ms (<= 0.3)", "c1", "attnserve --workers 0", "attnserve --workers 1",
     "p50_ms", 0.3, False),
    ("p99 at c64: attnserve / MLServer (<= 1)", "c64", "attnserve --workers 0", "MLServer", "p99_ms", 1.0, False),
    ("c64 calls/s: workers / single process", "c64", "attnserve --workers 0", "attnserve --workers 1", "calls_per_s",
     1.8, True),
    ("attnserve / BentoML calls/s, REST c16 (the second peer; no target set)", "REST c16", "attnserve --workers 0",
     "BentoML", "calls_per_s", 1.0, True),
    ("attnserve / BentoML calls/s, REST c64 (the second peer; no target set)", "REST c64", "attnserve --workers 0",
     "BentoML", "calls_per_s", 1.0, True),
]


OURS = "attnserve --workers 0"
# Issue 69's targets beside MLServer at its best (bench/report.py's table): (what, point, the peer, key,
# needed, higher is better); attnserve with its default worker processes.
ISSUE_69 = [
    ("9a. attnserve / MLServer calls/s, gRPC c16 >= 2", "c16", "MLServer", "calls_per_s", 2.0, True),
    ("9b. attnserve / MLServer calls/s, gRPC c64 >= 2", "c64", "MLServer", "calls_per_s", 2.0, True),
    ("9c. attnserve / MLServer calls/s, gRPC c1 >= 3", "c1", "MLServer", "calls_per_s", 3.0, True),
    ("9d. attnserve / MLServer calls/s, REST c16 >= 3", "REST c16", "MLServer", "calls_per_s", 3.0, True),
    ("9e. p99 at c64: attnserve no worse than MLServer (MLServer's / ours)", "c64", "MLServer", "p99_ms", 1.0, False),
]


def round_figures(r: dict, point: str, theirs: str, key: str, ours: str = OURS) -> list[float]:
    """Ours over theirs at one point, in each round where both ran it ([] where none did)."""
    runs = [run for run in r.get("rounds", []) if ours in run and theirs in run and point in run[ours]
            and point in run[theirs]]
    return [ratio(run, ours, theirs, point, key) for run in runs]


def target_rows(r: dict) -> list[tuple[str, list[float], float, bool]]:
    """Each target's figure in each round, what it needs, and whether every round meets it."""
    rows = []
    for what, point, ours, theirs, key, need, higher in TARGETS:
        if not all(ours in run and theirs in run and point in run[ours] for run in r["rounds"]):
            continue
        if key == "p50_ms" and not higher:  # a difference in ms
            figures = [run[ours][point][key] - run[theirs][point][key] for run in r["rounds"]]
        else:
            figures = [ratio(run, ours, theirs, point, key) for run in r["rounds"]]
        rows.append((what, figures, need, all(f >= need if higher else f <= need for f in figures)))
    cores = [run["attnserve --workers 0"]["c64"]["cores"] for run in r["rounds"] if "attnserve --workers 0" in run]
    if cores:
        rows.append(("cores used at c64 by attnserve", cores, 1.8, all(c >= 1.8 for c in cores)))
    return rows


def lines(r: dict) -> list[str]:
    peers = "; ".join(f"{peer} {settings}" for peer, settings in r["peer_settings"].items())
    out = [f"{peers}; {r['seconds']:g} s a point, gRPC over one connection at c1 and {r['channels']} else, "
           f"{r['cpus']} CPUs shared by client and server" + (
               "; 1-minute load average {:.1f} at the start and {:.1f} at the end".format(*r["load_average"])
               if "load_average" in r else "") + ".", "",
           "| target | each round | needed | met |", "|---|---|---|---|"]
    out += [f"| {what} | {', '.join(f'{f:.2f}' for f in figures)} | {need} | {'yes' if met else '**no**'} |"
            for what, figures, need, met in target_rows(r)]
    out += ["", "| round | point | server | calls/s | p50 ms | p99 ms | errors | cores used | CPU ms a call |",
            "|---|---|---|---|---|---|---|---|---|"]
    for i, run in enumerate(r["rounds"], 1):
        for point in [*GRPC_POINTS, *REST_POINTS]:
            for server, pts in run.items():
                if point in pts:
                    x = pts[point]
                    out.append(f"| {i} | {point} | {server} | {x['calls_per_s']:.0f} | {x['p50_ms']:.2f} | "
                               f"{x['p99_ms']:.1f} | {x['errors']} | {x['cores']:.2f} | {x['cpu_ms_per_call']:.3f} |")
    for peer, tuning in r.get("tuning", {}).items():
        out += ["", f"{peer}'s settings, calls/s (the best kept):", "", "| settings | c16 | c64 |", "|---|---|---|"]
        out += [f"| {t['settings']} | " + " | ".join(f"{x['calls_per_s']:.0f}" for x in t["points"].values()) + " |"
                for t in tuning["runs"]]
    return out


def tuned_and_measured(bundle_dir: Path, loadgen: str, seconds: float, rounds: int = 2) -> dict:
    """What `make bench` runs: the peers' settings compared (half-length points), then the rounds with their best."""
    with tempfile.TemporaryDirectory() as tmp:
        tuning = tune(bundle_dir, loadgen, workload(bundle_dir, Path(tmp)), seconds / 2)
    best = {peer: t["best"] for peer, t in tuning.items()}
    return {**measure(bundle_dir, loadgen, seconds, rounds, best), "tuning": tuning}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", default="models/g2p-en/1")
    p.add_argument("--loadgen", default="build/attnserve-loadgen")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tune", action="store_true", help="compare the peers' settings first and keep each one's best")
    p.add_argument("--attnserve-workers", type=int, nargs="+", default=[0, 1])
    p.add_argument("--peers", nargs="*", default=[peer for peer in PEERS if available(peer)])
    p.add_argument("--peer-settings", type=json.loads, default={},
                   help='each peer\'s settings as JSON, e.g. a run\'s "peer_settings" (instead of tuning again)')
    p.add_argument("--out", default="bench/results")
    args = p.parse_args(argv)
    bundle_dir = Path(args.bundle)
    settings, tuning = {peer: args.peer_settings.get(peer, DEFAULTS[peer]) for peer in args.peers}, {}
    if args.tune:
        with tempfile.TemporaryDirectory() as tmp:
            tuning = tune(bundle_dir, args.loadgen, workload(bundle_dir, Path(tmp)), args.seconds, tuple(args.peers))
        settings.update({peer: t["best"] for peer, t in tuning.items()})
    r = measure(bundle_dir, args.loadgen, args.seconds, args.rounds, settings, tuple(args.attnserve_workers))
    if tuning:
        r["tuning"] = tuning
    r["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "servers.json").write_text(json.dumps(r, indent=2) + "\n")
    (out / "servers.md").write_text("\n".join([f"# attnserve beside its peers ({r['when']})", "", *lines(r)]) + "\n")
    print("\n".join(lines(r)))
    return r


if __name__ == "__main__":
    main()
