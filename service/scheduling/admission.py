"""Admission: take a call only if it can be answered in time; tell the rest at once.

Past capacity a FIFO queue bounded by count serves calls whose callers have given up: the
queue takes longer to drain than the callers' deadlines, so the engine works on calls that
time out before their answer arrives, and every caller waits to hear it failed. Instead,
each arriving call's expected wait is estimated from the queue ahead of it and the engine's
measured service rate under load:

    expected_wait_s = (sources queued + its own - room in the next batch) / sources_per_s

and the call is refused (Overloaded -> RESOURCE_EXHAUSTED) when that does not fit in its
deadline (with headroom: the estimate is a mean, and the answer still has to travel) or in
`max_queue_wait_ms`, the time bound of the queue for calls without a deadline. A call that
fits in the next batch is never refused by time: it waits for no queue. The limit follows
the measured rate, so it needs no tuning by count; `max_queue_size` stays as the bound on
memory. Admitted calls are then served first come, first served: admission keeps the queue
within the deadlines it admitted, so a LIFO order is not needed to save them.

Knows nothing of gRPC: a deadline is an absolute time on the scheduler's clock (time.perf_counter()
unless a test drives its own).
"""
from __future__ import annotations

import math
import time
from typing import Callable

# Admit when the expected wait fits in this share of the time the caller has left.
DEADLINE_HEADROOM = 0.6
# The rate is an average over about this much recent engine time.
RATE_WINDOW_S = 0.5


class _Decayed:
    """Sources over busy seconds, each sum decayed over RATE_WINDOW_S of busy time."""

    def __init__(self):
        self.sources = 0.0
        self.busy_s = 0.0

    def add(self, sources: int, busy_s: float) -> None:
        decay = math.exp(-busy_s / RATE_WINDOW_S)
        self.sources = self.sources * decay + sources
        self.busy_s = self.busy_s * decay + busy_s

    def per_s(self) -> float | None:
        return self.sources / self.busy_s if self.sources > 0 and self.busy_s > 0 else None


class ServiceRate:
    """Sources the engine completes per second of its busy time, under load.

    Busy time only: an idle engine is not slow. Work done in batches of at least `loaded_rows`
    rows is what a long queue drains at, so that rate is used once measured; small batches
    alone would under-state it several times. Written by the engine thread, read on the event
    loop: float updates, and a stale read is harmless.
    """

    def __init__(self, loaded_rows: int):
        self.loaded_rows = loaded_rows
        self._loaded = _Decayed()
        self._any = _Decayed()

    def record(self, sources: int, busy_s: float, rows: int) -> None:
        self._any.add(sources, busy_s)
        if rows >= self.loaded_rows:
            self._loaded.add(sources, busy_s)

    def sources_per_s(self) -> float | None:
        """None until something has been decoded."""
        return self._loaded.per_s() or self._any.per_s()


def refusal(queued: int, own: int, room: int, rate: ServiceRate, deadline_s: float | None,
            max_queue_wait_ms: float, clock: Callable[[], float] = time.perf_counter) -> tuple[str, str] | None:
    """Why a call of `own` sources, with `queued` sources before it and `room` for sources in
    the next batch, cannot be admitted, as (metric label, message); None to admit it. `deadline_s`
    is on `clock`'s time."""
    per_s = rate.sources_per_s()
    waiting = queued + own - room  # sources that must drain before this call's last one starts
    if per_s is None or waiting <= 0:
        return None
    wait_s = waiting / per_s
    expected = f"the expected wait ({wait_s * 1000:.0f} ms for {queued} sources queued at {per_s:.0f}/s)"
    if deadline_s is not None:
        left_s = deadline_s - clock()
        if wait_s > DEADLINE_HEADROOM * left_s:
            return "deadline", f"overloaded: {expected} does not fit in the call's deadline " \
                               f"({max(left_s, 0) * 1000:.0f} ms left); retry later or elsewhere"
    elif max_queue_wait_ms > 0 and wait_s * 1000 > max_queue_wait_ms:  # a caller without a deadline
        return "queue_wait", f"overloaded: {expected} exceeds max_queue_wait_ms ({max_queue_wait_ms:g}); retry later"
    return None
