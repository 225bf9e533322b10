"""Serving many small models: one server with every model of a repository, as `make serve` starts it.

    make build/attnserve-loadgen    # once: the C++ client that times the calls (else the Python stub alone)
    python -m bench.many_models [--repository models] [--calls 300] [--rounds 3]

Measures, for the whole server: the time from the process's start to health SERVING (every model
verified, loaded and warmed), and its resident memory (the server and any processes it started)
with every model loaded; for each model: the unloaded single-word latency, calls one after the other
over gRPC (its test words, the model itself: lexicon bypassed, no response cache) from the C++ load
generator and from grpcio's Python stub (which spends a few tenths of a millisecond of its own on a
call), and beside it the
same words decoded in this process by the same engine alone (no server, no gRPC), once the server has
stopped: what is the model's and what is the server's. Writes bench/results/many_models.json and .md.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import BIN, MODEL_ONLY, free_port, process_tree, test_words, wait_serving, write_messages

RESULTS = Path(__file__).resolve().parent / "results"
LOADGEN = Path(__file__).resolve().parents[1] / "build" / "attnserve-loadgen"  # `make build/attnserve-loadgen`
# What a user of many small models asks of one server.
TARGETS = {"startup_s": 30.0, "rss_mb": 1536.0, "p50_ms": 3.0}


def rss_mb(pid: int) -> float:
    total_kb = 0
    for p in process_tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
        except OSError:
            pass
    return total_kb / 1024


def timed_ms(call, calls: int, warmup: int = 20) -> list[float]:
    """Milliseconds of each of `calls` calls, one after the other, after `warmup` untimed ones."""
    out = []
    for i in range(warmup + calls):
        started = time.perf_counter()
        call(i)
        if i >= warmup:
            out.append((time.perf_counter() - started) * 1000)
    return out


def echo_p50_ms(channel, calls: int) -> float:
    """A health check's p50 on the same channel: the transport's own floor under every model's p50, which
    tells a reader how fast this machine is."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    health = health_pb2_grpc.HealthStub(channel)
    return round(statistics.median(timed_ms(lambda i: health.Check(health_pb2.HealthCheckRequest(), timeout=10),
                                            calls)), 3)


def latencies_ms(stub, model: str, words: list[str], calls: int) -> list[float]:
    from attnserve.v1 import attnserve_pb2 as pb

    options = model_only()
    return timed_ms(lambda i: stub.Transduce(pb.TransduceRequest(inputs=[words[i % len(words)]], model_name=model,
                                                                 options=options), timeout=10), calls)


def model_only():
    """Every call's options: the model itself answers (no lexicon), its attention returned, and a test word's
    letters the model never saw read as unknown rather than refused."""
    from attnserve.v1 import attnserve_pb2 as pb

    return pb.DecodeOptions(bypass_lexicon=True, return_attention=True, allow_unknown_symbols=True)


def p50_p99(ms: list[float]) -> tuple[float, float]:
    ms = sorted(ms)
    return round(statistics.median(ms), 3), round(ms[int(0.99 * (len(ms) - 1))], 3)


def requests_file(path: Path, model: str, words: list[str]) -> Path:
    """The model's single-word calls, as the load generator sends them."""
    from attnserve.v1 import attnserve_pb2 as pb

    options = model_only()
    return write_messages(path, (pb.TransduceRequest(inputs=[w], model_name=model, options=options) for w in words))


def loadgen_p50_p99(loadgen: str, addr: str, model: str, requests: Path, calls: int) -> tuple[float, float]:
    """The same calls from the C++ load generator (bench/cpp/loadgen.cc), one at a time for about as long as
    `calls` take: a client whose own time per call is small beside grpcio's Python stub's."""
    out = subprocess.run([loadgen, "--target", addr, "--method", "/attnserve.v1.Transducer/Transduce",
                          "--requests", str(requests), "--seconds", f"{calls / 300:.2f}", "--deadline-ms", "10000",
                          "--concurrency", "1", "--channels", "1"], capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    if set(r["codes"]) != {"OK"}:
        raise RuntimeError(f"{model}: the load generator's calls ended {r['codes']}")
    return r["latency_ms"]["OK"]["p50_ms"], r["latency_ms"]["OK"]["p99_ms"]


def engine_p50_ms(bundle_dir: Path, precision: str, calls: int) -> float:
    """A lone word's p50 through the engine alone, as the server's worker decodes it (its EngineConfig
    but the precision it served, decode_whole): the model's share of the server's p50."""
    from service.config import EngineConfig
    from service.domain import DecodeOptions
    from service.engine.bundle import load_bundle
    from service.engine.decoding import Work, decode_whole
    from service.repository.models import warm_engine

    bundle = load_bundle(bundle_dir)
    engine = warm_engine(bundle, EngineConfig(precision=precision))
    options, words = DecodeOptions(allow_unknown=True), test_words(bundle)
    return round(statistics.median(timed_ms(
        lambda i: decode_whole(engine, [Work(engine.tokenize(words[i % len(words)]), options, None)]), calls)), 3)


def measure(repository: Path, calls: int, rounds: int, loadgen: str | None) -> dict:
    import grpc

    from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
    from service.engine.bundle import load_bundle

    port = free_port()
    argv = [str(BIN / "attnserve-server"), "--model-repository", str(repository), "--host", "127.0.0.1",
            "--port", str(port), "--metrics-port", "-1", *MODEL_ONLY]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_serving(f"127.0.0.1:{port}", 300, proc, poll_s=0.05)  # start-up time is measured by it
        startup_s = time.perf_counter() - started
        memory = rss_mb(proc.pid)
        rows = []
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel, tempfile.TemporaryDirectory() as tmp:
            stub = pbg.TransducerStub(channel)
            echo_ms = echo_p50_ms(channel, calls)
            served = sorted((m for m in stub.ListModels(pb.ListModelsRequest(), timeout=10).models
                             if m.state == "READY"), key=lambda m: m.name)
            words = {m.name: test_words(load_bundle(repository / m.name / m.served_version)) for m in served}
            requests = {m.name: requests_file(Path(tmp) / f"{m.name}.bin", m.name, words[m.name]) for m in served}
            # Rounds over every model in turn: a spell of noise on a shared host then weighs on one round of
            # each model rather than on all of one model's calls. A figure is the median of its rounds'.
            python: dict[str, list[tuple[float, float]]] = {m.name: [] for m in served}
            cpp: dict[str, list[tuple[float, float]]] = {m.name: [] for m in served}
            for _ in range(rounds):
                for m in served:
                    python[m.name].append(p50_p99(latencies_ms(stub, m.name, words[m.name], calls)))
                    if loadgen:
                        cpp[m.name].append(loadgen_p50_p99(loadgen, f"127.0.0.1:{port}", m.name, requests[m.name],
                                                           calls))
            for m in served:
                measured = cpp[m.name] or python[m.name]
                rows.append({"model": m.name, "version": m.served_version,
                             "precision": stub.GetModelInfo(pb.GetModelInfoRequest(model_name=m.name)).precision,
                             "p50_ms": statistics.median(p for p, _ in measured),
                             "p99_ms": statistics.median(q for _, q in measured),
                             "round_p50_ms": [p for p, _ in measured],
                             "python_p50_ms": statistics.median(p for p, _ in python[m.name])})
                print(f"  {m.name}: p50 {rows[-1]['p50_ms']:.2f} ms (rounds {rows[-1]['round_p50_ms']}), "
                      f"p99 {rows[-1]['p99_ms']:.2f} ms; Python client p50 {rows[-1]['python_p50_ms']:.2f}", flush=True)
        memory = max(memory, rss_mb(proc.pid))
    finally:
        proc.terminate()
        proc.wait(60)
    for row in rows:  # with the server gone, so that nothing else shares the cores
        row["engine_p50_ms"] = engine_p50_ms(repository / row["model"] / row["version"], row["precision"], calls)
    return {"repository": str(repository), "models": len(rows), "startup_s": round(startup_s, 2),
            "rss_mb": round(memory, 1), "echo_p50_ms": echo_ms, "calls_per_model": calls, "rounds": rounds,
            "client": "bench/cpp/loadgen.cc" if loadgen else "python", "per_model": rows,
            "targets": TARGETS}


def markdown(r: dict) -> str:
    t = r["targets"]
    ok = lambda v, limit: "met" if v <= limit else f"missed by {v - limit:.2f}"  # noqa: E731
    client = ("the project's C++ load generator (bench/cpp/loadgen.cc, as `make bench` times a lone call), one call "
              "at a time, with grpcio's Python stub's p50 beside it" if r["client"] != "python" else "grpcio's Python stub")
    lines = [f"# Serving many small models ({r['models']} models, one server)", "",
             "`python -m bench.many_models`: one server with every model of the repository; the model itself "
             f"answers (lexicon bypassed, no cache), single-word calls one after the other from {client}, "
             f"in {r['rounds']} rounds over the models (each figure the median of its rounds').", "",
             "| measure | value | target |", "|---|---:|---|",
             f"| start-up to SERVING | {r['startup_s']:.2f} s | <= {t['startup_s']:g} s: {ok(r['startup_s'], t['startup_s'])} |",
             f"| resident memory, every model loaded | {r['rss_mb']:.0f} MB | < {t['rss_mb']:g} MB: "
             f"{ok(r['rss_mb'], t['rss_mb'])} |",
             f"| a health check's p50 from the Python stub: its transport's floor | {r['echo_p50_ms']:.2f} ms | |",
             "",
             "The engine alone: the same words decoded one after the other in one process by the model's "
             "engine, without the server (the server's engine settings, one thread): what of each p50 is the "
             "model's, and what the server and the client add.", "",
             f"| model | precision | p50 ms | each round's p50 ms | p99 ms | p50 <= {t['p50_ms']:g} ms "
             "| Python stub's p50 ms | engine alone, p50 ms | server and client add, ms |",
             "|---|---|---:|---|---:|---|---:|---:|---:|"]
    lines += [f"| {m['model']} | {m['precision']} | {m['p50_ms']:.2f} | {' '.join(f'{x:.2f}' for x in m['round_p50_ms'])} "
              f"| {m['p99_ms']:.2f} | {ok(m['p50_ms'], t['p50_ms'])} | {m['python_p50_ms']:.2f} "
              f"| {m['engine_p50_ms']:.2f} | {m['p50_ms'] - m['engine_p50_ms']:.2f} |" for m in r["per_model"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repository", type=Path, default=Path("models"))
    p.add_argument("--calls", type=int, default=300, help="timed calls per model and round (after 20 to warm up)")
    p.add_argument("--rounds", type=int, default=3, help="rounds over every model in turn")
    p.add_argument("--loadgen", default=str(LOADGEN) if LOADGEN.exists() else "",
                   help="the C++ load generator to time the calls with (default: build/attnserve-loadgen where built; "
                        "'' for the Python stub alone)")
    p.add_argument("--out", type=Path, default=RESULTS / "many_models")
    args = p.parse_args(argv)
    result = measure(args.repository, args.calls, args.rounds, args.loadgen or None)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
