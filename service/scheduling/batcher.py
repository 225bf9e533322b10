"""Batching: sources from concurrent calls share the engine. The one interface, two modes behind it.

A call's sources go into one bounded queue, each with its own future (service/scheduling/intake.py:
the queue, admission by deadline, resolving the callers, held by either mode). Two modes, chosen
by `BatcherConfig.mode`:

- `RequestBatcher` (request-level, service/scheduling/request.py): a batch is decoded to the end
  together; with `length_grouping` as length-sorted groups (service/scheduling/lengths.py).
- `ContinuousBatcher` (step-level, service/scheduling/continuous.py): sources join the running
  batch at the next step and leave the moment they end.

`auto` is request batching, chosen by measurement: `python -m bench.modes` runs the two side by side,
and what it found, with why no rule switching modes by load was kept, is in docs/performance.md,
"Continuous batching". `make_batcher` says at start which mode serves and why, in a log line and in
attnserve_batching_mode, whichever mode was asked for.

What happens to a batch once formed (greedy, beam, forced, the continuous step's sampling) is
the engine's (service/engine/decoding.py). Knows nothing of gRPC: callers get results or the
domain's errors. All numeric work runs in one worker thread; futures are resolved on the event loop.
Every time the scheduler reads (enqueue times, deadlines, the measured rate, join waits) comes from
one clock, time.perf_counter unless a test passes its own to drive time.
"""
from __future__ import annotations

import logging
from typing import Protocol, runtime_checkable

from service.config import BatcherConfig
from service.domain import Decoded, DecodeOptions, Source
from service.engine.engine import Engine
from service.metrics import ModelMetrics
from service.scheduling.continuous import ContinuousBatcher
from service.scheduling.request import RequestBatcher

log = logging.getLogger("attnserve")


@runtime_checkable
class Batcher(Protocol):
    """What the answering layer and the repository use of a batcher, whichever the mode."""

    engine: Engine  # the engine it decodes on
    metrics: ModelMetrics  # the model's metrics it records into

    def start(self) -> None:
        """On the event loop: begin decoding what is submitted."""

    @property
    def running(self) -> bool:
        """Started and not stopped: sources submitted now will be decoded."""

    async def submit(self, sources: list[Source], options: DecodeOptions,
                     deadline_s: float | None) -> list[list[Decoded]]:
        """Admit a call's sources, queue them and wait for every one:
        per source its hypotheses, best first. Raises Overloaded at once when the call cannot be
        answered within its deadline (`deadline_s`, on the batcher's clock) or the queue's time
        bound. Cancelling the caller drops its sources from the queue and the running batch."""

    async def drain(self, timeout_s: float) -> bool:
        """Wait until every admitted source is resolved (or timeout_s); True when all were."""

    async def stop(self) -> None:
        """Stop decoding; sources still queued fail with NotReady."""


MODES = {"request": RequestBatcher, "continuous": ContinuousBatcher}

# Why each mode serves: a reason is one of these keys (the gauge's label), with its sentence for the log.
REASONS = {
    "configured": "as --mode asked",
    "auto_measured": "--mode auto: request batching, which python -m bench.modes measured the faster on these "
                     "models (docs/performance.md, \"Continuous batching\")",
}


def chosen_mode(cfg: BatcherConfig) -> tuple[str, str]:
    """The mode that serves and its reason (a key of REASONS)."""
    if cfg.mode == "auto":
        return "request", "auto_measured"
    return cfg.mode, "configured"


def make_batcher(engine: Engine, cfg: BatcherConfig, metrics: ModelMetrics) -> Batcher:
    mode, reason = chosen_mode(cfg)
    log.info("%s: %s batching, %s", engine.name, mode, REASONS[reason])
    for m in MODES:  # one series at 1: the mode serving and why
        for r in REASONS:
            metrics.batching_mode.labels(m, r).set(1 if (m, r) == (mode, reason) else 0)
    return MODES[mode](engine, cfg, metrics)
