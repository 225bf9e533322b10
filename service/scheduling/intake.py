"""The intake both batchers hold: the bounded queue, admission, deadlines and resolving callers.

What flows between the stages is plain data: `admit()` turns a call into `Request`s on the queue,
`pop_live()` hands a batcher the requests to decode as a `Popped` (with the ones it refused on the
way, as outcomes), and the engine thread's results go back as outcomes, `(request, hypotheses or
the error)`, that `resolve()` answers the callers with. Which thread resolves is the batcher's:
`resolve()` runs on the event loop only.

Knows nothing of gRPC; every time it reads comes from the clock it is given.
"""
from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from service.config import BatcherConfig
from service.domain import DeadlineExpired, Decoded, DecodeOptions, NotReady, Overloaded, Source
from service.metrics import ModelMetrics
from service.scheduling.admission import ServiceRate, refusal


@dataclass
class Request:
    """One source of a call, queued: what the engine thread decodes, and the caller's future."""

    tokens: list[str]
    options: DecodeOptions
    future: asyncio.Future  # -> list[Decoded], best hypothesis first
    deadline_s: float | None  # the caller's, on the intake's clock
    enqueued_s: float  # on the intake's clock
    target: list[int] | None = None  # teacher forcing (Score, the lexicon): the given output's ids


# What a request is answered with: its hypotheses (best first), or the error its caller hears.
Outcome = tuple[Request, list[Decoded] | Exception]


@dataclass
class Popped:
    """What one pop of the queue gives a batcher: the requests to decode, and those refused on the
    way (deadline passed, or too close), which the batcher resolves as it resolves its results."""

    batch: list[Request] = field(default_factory=list)
    refused: list[Outcome] = field(default_factory=list)


class Intake:
    """The queue of admitted requests, in arrival order, and the futures of those not yet resolved.

    The queue is a deque: the event loop appends, the engine thread (continuous mode) pops from the
    left; both are atomic. Everything else is read and written on the event loop."""

    def __init__(self, cfg: BatcherConfig, metrics: ModelMetrics, clock: Callable[[], float]):
        self.cfg = cfg
        self.metrics = metrics
        self.clock = clock
        self.queue: deque[Request] = deque()
        self.pending: set[asyncio.Future] = set()  # futures of admitted requests not yet resolved (drain)
        # What admission estimates waits from (service/scheduling/admission.py): "under load" is a half-full batch.
        self.rate = ServiceRate(loaded_rows=max(1, cfg.max_batch_size // 2))

    def admit(self, sources: list[Source], options: DecodeOptions,
              deadline_s: float | None, room: int) -> list[Request]:
        """Queue a call's sources as requests, or raise
        Overloaded at once when it cannot be answered within its deadline or the queue's time
        bound; `room` is how many sources the next batch takes in without waiting for the queue."""
        if len(self.queue) + len(sources) > self.cfg.max_queue_size:
            self.metrics.admission_refusals.labels("queue_size").inc()
            raise Overloaded(f"queue is full ({len(self.queue)} of {self.cfg.max_queue_size} sources waiting)")
        refused = refusal(len(self.queue), len(sources), room, self.rate, deadline_s,
                          self.cfg.max_queue_wait_ms, self.clock)
        if refused is not None:
            self.metrics.admission_refusals.labels(refused[0]).inc()
            raise Overloaded(refused[1])
        loop = asyncio.get_running_loop()
        now = self.clock()
        requests = [Request(s.src_tokens, options, loop.create_future(), deadline_s, now, s.target_ids) for s in sources]
        self.queue.extend(requests)
        self.pending.update(r.future for r in requests)
        self.metrics.queue_depth.set(len(self.queue))
        return requests

    async def answers(self, requests: list[Request]) -> list[list[Decoded]]:
        """Wait for every request of a call: per request its hypotheses, best first. Cancelling the
        caller cancels its futures, so the batchers drop its requests from the queue and the batch."""
        try:
            return list(await asyncio.gather(*(r.future for r in requests)))
        finally:
            for r in requests:
                r.future.cancel()
                self.pending.discard(r.future)

    def pop_live(self, n: int, batch_s: float = 0.0) -> Popped:
        """Up to n queued requests whose callers are still waiting. A request whose deadline has
        passed is refused, and so is one with no more than `batch_s` left (what a batch takes):
        decoding it would only delay the others."""
        popped = Popped()
        now = self.clock()
        while self.queue and len(popped.batch) < n:
            request = self.queue.popleft()
            if request.future.done():  # skip requests whose caller went away
                continue
            left_s = None if request.deadline_s is None else request.deadline_s - now
            if left_s is not None and left_s <= 0:
                popped.refused.append((request, DeadlineExpired("the deadline passed while the call was queued")))
            elif left_s is not None and left_s <= batch_s:
                # The caller still has time to go elsewhere, so it hears a shed, not a timeout.
                popped.refused.append((request, Overloaded(
                    f"overloaded: {1000 * left_s:.0f} ms left, less than a batch takes here "
                    f"({1000 * batch_s:.0f} ms); retry later or elsewhere")))
            else:
                popped.batch.append(request)
        self.metrics.queue_depth.set(len(self.queue))
        for r in popped.batch:
            self.metrics.queue_wait_seconds.observe(now - r.enqueued_s)
        return popped

    async def drain(self, timeout_s: float) -> bool:
        """Wait until every admitted request is resolved (or timeout_s); True when all were."""
        pending = [f for f in self.pending if not f.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
        return all(f.done() for f in pending)

    def fail_queued(self) -> None:
        """On the event loop, once nothing pops any more: what is still queued fails with NotReady."""
        outcomes = []
        while self.queue:
            outcomes.append((self.queue.popleft(), NotReady("server is shutting down")))
        resolve(outcomes)
        self.metrics.queue_depth.set(0)


def resolve(outcomes: list[Outcome]) -> None:
    """On the event loop: answer each request's caller, unless it went away."""
    for request, outcome in outcomes:
        if request.future.done():
            continue
        if isinstance(outcome, Exception):
            request.future.set_exception(outcome)
        else:
            request.future.set_result(outcome)
