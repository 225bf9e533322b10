"""Request-level batching: sources of concurrent calls decoded to the end together.

Take up to `max_batch_size` sources, waiting at most `max_wait_ms` after the first arrival for
company (or `company_wait_ms` for as many as the last batches had, when they had company),
decode them to the end together, resolve every future. With `length_grouping`
(service/scheduling/lengths.py) a batch is decoded as length-sorted groups, shortest first,
each answered as it ends.

The batch loop runs on the event loop; the numeric work in one worker thread.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from service.config import BatcherConfig
from service.domain import Decoded, DecodeOptions, Source
from service.engine.decoding import Work, decode_whole
from service.engine.engine import Engine
from service.metrics import ModelMetrics
from service.scheduling import lengths
from service.scheduling.intake import Intake, Request, resolve
from service.tasks import cancel_and_wait


def decode_requests(engine: Engine, metrics: ModelMetrics, requests: list[Request]) -> list[list[Decoded]]:
    """Engine thread: decode whole requests (service/engine/decoding.py) and count what it spent."""
    results, counts = decode_whole(engine, [Work(r.tokens, r.options, r.target) for r in requests])
    metrics.decode_steps.inc(counts.steps)
    # Every row stays in a request-level batch until its last step, cancelled callers' too;
    # its own steps end at its </s> (or its limit), the rest is spent waiting for the longest.
    metrics.decode_row_steps.inc(counts.row_steps)
    metrics.decode_row_steps_useful.inc(counts.useful_row_steps)
    metrics.generated_tokens.inc(counts.generated_tokens)
    metrics.inputs.inc(len(requests))
    return results


class RequestBatcher:
    """The queue and the engine thread (request-level batches). What a call is answered with
    before the queue (cache, lexicon, several words) is the answering layer's, which calls submit()."""

    def __init__(self, engine: Engine, cfg: BatcherConfig, metrics: ModelMetrics,
                 clock: Callable[[], float] = time.perf_counter):
        self.engine = engine
        self.cfg = cfg
        self.metrics = metrics
        self.intake = Intake(cfg, metrics, clock)
        # The wait for company (max_wait_ms) sleeps on the event loop for what is left on this clock.
        self._clock = clock
        self._arrived = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._last_end_s = 0.0  # when the last batch finished
        self._batch_s = 0.0  # recent batches' wall time (a source with less time left is dropped)
        self._last_rows = (0, 0)  # the sources of the last two batches popped (company_wait_ms)
        # One worker: onnxruntime already uses the cores for one batch at a time.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnserve-engine")

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="attnserve-batcher")

    @property
    def running(self) -> bool:
        """Started and not stopped: sources submitted now will be decoded."""
        return self._task is not None

    async def submit(self, sources: list[Source], options: DecodeOptions,
                     deadline_s: float | None) -> list[list[Decoded]]:
        """Admit a call's sources, queue them and wait for every one:
        per source its hypotheses, best first. Raises Overloaded at once when the call cannot be
        answered within its deadline (on the batcher's clock) or the queue's time bound.
        Cancelling the caller drops its sources from the queue and the running batch."""
        # The next batch takes a whole batch in, after the running one.
        requests = self.intake.admit(sources, options, deadline_s, room=self.cfg.max_batch_size)
        self._notify()
        return await self.intake.answers(requests)

    def _notify(self) -> None:
        """New sources are queued: wake the batch loop."""
        self._arrived.set()

    async def drain(self, timeout_s: float) -> bool:
        """Wait until every admitted source is resolved (or timeout_s); True when all were.

        For a hot reload: once the servicer points at a new batcher no source enters this
        one, so its queue and running batch only empty out. Call stop() afterwards.
        """
        return await self.intake.drain(timeout_s)

    async def stop(self) -> None:
        """Stop the loop; sources still queued fail with NotReady."""
        await cancel_and_wait(self._task)
        self._task = None
        self.intake.fail_queued()
        self._executor.shutdown(wait=True)

    async def _run(self) -> None:
        while True:
            batch = await self._next_batch()
            if not batch:
                continue
            await self._decode_and_resolve(batch)

    async def _next_batch(self) -> list[Request]:
        queue = self.intake.queue
        while not queue:
            self._arrived.clear()
            await self._arrived.wait()
        now = self._clock()
        full_by = now + self.cfg.max_wait_ms / 1000  # a full batch, up to max_wait_ms
        # Company expected: the last two batches each had company (so not a chance meeting of lone
        # callers), so the callers they answered are likely to be back within a round trip.
        company = min(self._last_rows) if min(self._last_rows) > 1 else 0
        company_by = now + self.cfg.company_wait_ms / 1000
        while len(queue) < self.cfg.max_batch_size:
            until = max(full_by, company_by) if len(queue) < company else full_by
            remaining = until - self._clock()
            if remaining <= 0:
                break
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                break
        popped = self.intake.pop_live(self.cfg.max_batch_size, self._batch_s)
        resolve(popped.refused)
        if popped.batch:
            self._last_rows = (self._last_rows[1], len(popped.batch))
        return popped.batch

    def _groups(self, batch: list[Request]) -> list[list[Request]]:
        """The engine batches a popped batch is decoded as, in order: the sources popped together
        are all decoded before the next pop, so grouping never passes a source over."""
        if not self.cfg.length_grouping or len(batch) < 2:
            return [batch]
        return [[batch[i] for i in g] for g in lengths.split(
            [len(r.tokens) for r in batch],
            [lengths.expected_steps(len(r.tokens), r.options.max_output_len) for r in batch])]

    async def _decode_and_resolve(self, batch: list[Request]) -> None:
        """Decode whole requests in the worker thread, group by group, each group's callers answered
        as it ends; an engine failure fails only that group's callers."""
        started = self._clock()
        # The rate admission uses is wall time from when this batch could start (the previous one's
        # end, or its first arrival) to its end: the hand-offs through a busy event loop count too.
        could_start = max(self._last_end_s, min(r.enqueued_s for r in batch))
        decoded = 0
        loop = asyncio.get_running_loop()
        for group in self._groups(batch):
            group = [r for r in group if not r.future.done()]  # callers gone while a group before ran
            if not group:
                continue
            self.metrics.batch_size.observe(len(group))
            group_started = self._clock()
            try:
                results = await loop.run_in_executor(self._executor, decode_requests, self.engine, self.metrics, group)
            except Exception as e:
                resolve([(r, e) for r in group])
                continue
            self.metrics.batch_seconds.observe(self._clock() - group_started)
            decoded += len(group)
            resolve(list(zip(group, results)))
        if not decoded:
            return
        end = self._clock()
        self.intake.rate.record(decoded, end - could_start, len(batch))
        self._last_end_s = end
        self._batch_s = 0.8 * self._batch_s + 0.2 * (end - started)
