"""Batching: sources from concurrent calls share the engine. The one interface, two modes behind it.

A call's sources go into one bounded queue, each with its own future (service/scheduling/intake.py:
the queue, admission by deadline, resolving the callers, held by either mode). Two modes, chosen
by `BatcherConfig.mode`:

- `RequestBatcher` (request-level, service/scheduling/request.py): a batch is decoded to the end
  together; with `length_grouping` as length-sorted groups (service/scheduling/lengths.py).
- `ContinuousBatcher` (step-level, service/scheduling/continuous.py): sources join the running
  batch at the next step and leave the moment they end.

What happens to a batch once formed (greedy, beam, forced, the continuous step's sampling) is
the engine's (service/engine/decoding.py). Knows nothing of gRPC: callers get results or the
domain's errors. All numeric work runs in one worker thread; futures are resolved on the event loop.
Every time the scheduler reads (enqueue times, deadlines, the measured rate, join waits) comes from
one clock, time.perf_counter unless a test passes its own to drive time.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from service.config import BatcherConfig
from service.domain import Decoded, DecodeOptions, Source
from service.engine.engine import Engine
from service.metrics import ModelMetrics
from service.scheduling.continuous import ContinuousBatcher
from service.scheduling.request import RequestBatcher


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


def make_batcher(engine: Engine, cfg: BatcherConfig, metrics: ModelMetrics) -> Batcher:
    return (ContinuousBatcher if cfg.mode == "continuous" else RequestBatcher)(engine, cfg, metrics)
