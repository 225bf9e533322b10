"""The in-process engine's own speed, no server: words/s by precision, greedy loop and batch size (the
sweep whose fastest point in the served precision is E, the ceiling the server's targets are read
against), and batch-1 decode latency. bench/run.py, bench/realtraffic.py and bench/limits.py measure
with it; bench/report.py reads its keys with best().
"""
from __future__ import annotations

import time

from service.config import EngineConfig
from service.engine.engine import Engine


def best(engine: dict, prefix: str, suffix: str = "") -> tuple[str, float]:
    """The fastest engine run whose key ("<precision>/greedy-loop=<onnx|python>/batch=<b>") fits prefix/suffix."""
    key = max((k for k in engine if k.startswith(prefix) and k.endswith(suffix)), key=engine.get)
    return key, engine[key]


def warmed(engine: Engine) -> Engine:
    """The engine warmed up as the server's repository does it at load (which also fits its encoder's
    length-group costs, service/engine/length_groups.py)."""
    from service.repository.models import WARMUP_WORDS

    engine.warm_up([engine.tokenize(w) for w in WARMUP_WORDS])
    return engine


def engine_sweep(bundle, words: list[str], seconds: float) -> dict:
    """In-process onnxruntime greedy decoding, no server: words/s by precision, decode loop and
    batch size, with the server's thread pool (the process's one pool is sized once, by the first
    engine). Keys: "<precision>/greedy-loop=<onnx|python>/batch=<b>"."""
    out = {}
    int8 = "encoder.int8" in bundle.manifest.graphs
    for precision in ("fp32", "int8") if int8 else ("fp32",):
        for loop in ("onnx", "python"):  # --greedy-loop
            engine = warmed(Engine(bundle, EngineConfig(precision=precision, greedy_loop=loop)))
            for batch in (1, 8, 32, 64, 128, 256) if loop == "onnx" else (1, 8, 64):
                key = f"{precision}/greedy-loop={loop}/batch={batch}"
                out[key] = decode_rate(engine, words, batch, seconds)
                print(f"  engine {key}: {out[key]:.0f} words/s", flush=True)
            for batch in (32, 64, 128) if loop == "onnx" else ():
                # As request mode decodes a batch by default (--length-grouping): E is the best of both.
                key = f"{precision}/greedy-loop={loop}/batch={batch}/length-grouped"
                out[key] = decode_rate(engine, words, batch, seconds, grouped=True)
                print(f"  engine {key}: {out[key]:.0f} words/s", flush=True)
    return out


def decode_latency_ms(engine: Engine, words: list[str], seconds: float) -> dict:
    """Single-word decode calls, one after another: the engine's own batch-1 latency (target 4's bound)."""
    lat, started, i = [], time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        t = time.perf_counter()
        engine.decode([list(words[i % len(words)])])
        lat.append(time.perf_counter() - t)
        i += 1
    lat.sort()
    return {"p50_ms": 1000 * lat[len(lat) // 2], "calls": len(lat)}


def engine_latency(bundle, words: list[str], precision: str, seconds: float) -> dict:
    """Batch-1 latency through each greedy loop: request mode decodes with the ONNX Loop, continuous
    mode with one decoder call per step."""
    return {loop: decode_latency_ms(Engine(bundle, EngineConfig(precision=precision, greedy_loop=loop)), words,
                                    seconds) for loop in ("onnx", "python")}


def decode_rate(engine: Engine, words: list[str], batch: int, seconds: float, grouped: bool = False) -> float:
    """Words/s of batches taken in order from the shuffled words; grouped: each batch decoded as
    service/scheduling/lengths.py's length-sorted groups, as the batcher does."""
    from service.scheduling import lengths

    n, started, i = 0, time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        chunk = [list(w) for w in words[i:i + batch]] or [list(w) for w in words[:batch]]
        i = (i + batch) % len(words)
        for group in lengths.split([len(w) for w in chunk]) if grouped else [range(len(chunk))]:
            engine.decode([chunk[k] for k in group])
        n += len(chunk)
    return n / (time.perf_counter() - started)
