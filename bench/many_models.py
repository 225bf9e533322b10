"""Serving many small models: one server with every model of a repository, as `make serve` starts it.

    python -m bench.many_models [--repository models] [--calls 300]

Measures, for the whole server: the time from the process's start to health SERVING (every model
verified, loaded and warmed), and its resident memory (the server and any processes it started)
with every model loaded; for each model: the unloaded single-word latency, calls one after the other
over gRPC (its test words, the model itself: lexicon bypassed, no response cache), and beside it the
same words decoded in this process by the same engine alone (no server, no gRPC), once the server has
stopped: what is the model's and what is the server's. Writes bench/results/many_models.json and .md.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.harness import BIN, MODEL_ONLY, free_port, process_tree, test_words, wait_serving

RESULTS = Path(__file__).resolve().parent / "results"
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

    options = pb.DecodeOptions(bypass_lexicon=True, return_attention=True, allow_unknown_symbols=True)  # test words may hold unseen letters
    return timed_ms(lambda i: stub.Transduce(pb.TransduceRequest(inputs=[words[i % len(words)]], model_name=model,
                                                                 options=options), timeout=10), calls)


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


def measure(repository: Path, calls: int) -> dict:
    import grpc

    from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
    from service.engine.bundle import load_bundle

    port = free_port()
    argv = [str(BIN / "attnserve-server"), "--model-repository", str(repository), "--host", "127.0.0.1",
            "--port", str(port), "--metrics-port", "-1", *MODEL_ONLY]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_serving(f"127.0.0.1:{port}", proc)
        startup_s = time.perf_counter() - started
        memory = rss_mb(proc.pid)
        rows = []
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pbg.TransducerStub(channel)
            echo_ms = echo_p50_ms(channel, calls)
            served = [m for m in stub.ListModels(pb.ListModelsRequest(), timeout=10).models if m.state == "READY"]
            for m in sorted(served, key=lambda m: m.name):
                bundle = load_bundle(repository / m.name / m.served_version)
                ms = sorted(latencies_ms(stub, m.name, test_words(bundle), calls))
                rows.append({"model": m.name, "version": m.served_version,
                             "precision": stub.GetModelInfo(pb.GetModelInfoRequest(model_name=m.name)).precision,
                             "p50_ms": round(statistics.median(ms), 3), "p99_ms": round(ms[int(0.99 * (len(ms) - 1))], 3)})
                print(f"  {m.name}: p50 {rows[-1]['p50_ms']:.2f} ms, p99 {rows[-1]['p99_ms']:.2f} ms", flush=True)
        memory = max(memory, rss_mb(proc.pid))
    finally:
        proc.terminate()
        proc.wait(60)
    for row in rows:  # with the server gone, so that nothing else shares the cores
        row["engine_p50_ms"] = engine_p50_ms(repository / row["model"] / row["version"], row["precision"], calls)
    return {"repository": str(repository), "models": len(rows), "startup_s": round(startup_s, 2),
            "rss_mb": round(memory, 1), "echo_p50_ms": echo_ms, "calls_per_model": calls, "per_model": rows,
            "targets": TARGETS}


def markdown(r: dict) -> str:
    t = r["targets"]
    ok = lambda v, limit: "met" if v <= limit else f"missed by {v - limit:.2f}"  # noqa: E731
    lines = [f"# Serving many small models ({r['models']} models, one server)", "",
             "`python -m bench.many_models`: one server with every model of the repository; the model itself "
             "answers (lexicon bypassed, no cache), single-word calls one after the other.", "",
             "| measure | value | target |", "|---|---:|---|",
             f"| start-up to SERVING | {r['startup_s']:.2f} s | <= {t['startup_s']:g} s: {ok(r['startup_s'], t['startup_s'])} |",
             f"| resident memory, every model loaded | {r['rss_mb']:.0f} MB | < {t['rss_mb']:g} MB: "
             f"{ok(r['rss_mb'], t['rss_mb'])} |",
             f"| a health check's p50: the transport's floor under each p50 below | {r['echo_p50_ms']:.2f} ms | |",
             "",
             "The engine alone: the same words decoded one after the other in one process by the model's "
             "engine, without the server (the server's engine settings, one thread): what of each p50 is the "
             "model's, and what the server adds (the health check's floor included).", "",
             f"| model | precision | p50 ms | p99 ms | p50 <= {t['p50_ms']:g} ms | engine alone, p50 ms | server adds, ms |",
             "|---|---|---:|---:|---|---:|---:|"]
    lines += [f"| {m['model']} | {m['precision']} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} | {ok(m['p50_ms'], t['p50_ms'])} "
              f"| {m['engine_p50_ms']:.2f} | {m['p50_ms'] - m['engine_p50_ms']:.2f} |" for m in r["per_model"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repository", type=Path, default=Path("models"))
    p.add_argument("--calls", type=int, default=300, help="timed calls per model (after 20 to warm up)")
    p.add_argument("--out", type=Path, default=RESULTS / "many_models")
    args = p.parse_args(argv)
    result = measure(args.repository, args.calls)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
