"""The second peer server of `make bench`: BentoML serving our own Engine over REST, with its adaptive
batching (a batchable API: concurrent calls' word lists are merged into one call, whose words are
greedy-decoded together in one ONNX Loop call, as attnserve's request mode does).

Served by `bentoml serve bench.bentoml_service:G2P` from its own virtual environment
(build/bentoml-venv, `make bentoml-venv`); bench/servers.py sets the bundle, the batch size and
wait (G2P_BENCH_BUNDLE, _MAX_BATCH, _MAX_LATENCY_MS) and the worker processes, and starts it.
A call is POST /phonemes {"words": ["knight"]}, answered ["N AY T"].

Imports no bench module (only BentoML and the engine).
"""
from __future__ import annotations

import os

import bentoml

from service.config import EngineConfig
from service.engine.bundle import load_bundle
from service.engine.engine import Engine

MAX_BATCH = int(os.environ.get("G2P_BENCH_MAX_BATCH", "64"))
MAX_LATENCY_MS = int(os.environ.get("G2P_BENCH_MAX_LATENCY_MS", "1000"))


@bentoml.service(workers=int(os.environ.get("G2P_BENCH_WORKERS", "1")), traffic={"timeout": 60})
class G2P:
    def __init__(self) -> None:
        self.engine = Engine(load_bundle(os.environ["G2P_BENCH_BUNDLE"]), EngineConfig())  # --precision auto
        self.engine.warm_up([self.engine.tokenize(w) for w in ("warmup", "a", "attention")])

    @bentoml.api(batchable=True, max_batch_size=MAX_BATCH, max_latency_ms=MAX_LATENCY_MS)
    def phonemes(self, words: list[str]) -> list[str]:
        decoded = self.engine.decode([self.engine.tokenize(w) for w in words])
        return [" ".join(d.output_tokens) for d in decoded]
