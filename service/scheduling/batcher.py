"""Batching: sources from concurrent calls share the engine.

A request's sources go into one bounded queue, each with its own future. Two modes:

- `Batcher` (request-level): take up to `max_batch_size` sources, waiting at most
  `max_wait_ms` after the first arrival for company (or `company_wait_ms` for as many as the
  last batches had, when they had company), decode them to the end
  together, resolve every future. With `length_grouping` (service/scheduling/lengths.py) a
  batch is decoded as length-sorted groups, shortest first, each answered as it ends.
- `ContinuousBatcher` (step-level): the decoder runs as a loop of steps over the
  active sequences; queued sources join at the next step (after their encoder
  pass) and a sequence leaves the moment it emits </s> or reaches its length
  limit, so short outputs never wait for long ones.

What happens to a batch once formed (greedy, beam, forced, the continuous step's sampling) is
the engine's (service/engine/decoding.py). Knows nothing of gRPC: callers get results or the
domain's errors. All numeric work runs in one worker thread; futures are resolved on the event loop.
Every time the scheduler reads (enqueue times, deadlines, the measured rate, join waits) comes from
one clock, time.perf_counter unless a test passes its own to drive time.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from service.config import BatcherConfig
from service.domain import DeadlineExpired, Decoded, DecodeOptions, NotReady, Overloaded
from service.engine.decoding import StepBatch, Work, decode_whole
from service.engine.engine import Engine
from service.metrics import ModelMetrics
from service.scheduling import lengths
from service.scheduling.admission import ServiceRate, refusal
from service.tasks import cancel_and_wait


@dataclass
class _Item:
    tokens: list[str]
    options: DecodeOptions
    future: asyncio.Future  # -> list[Decoded], best hypothesis first
    deadline_s: float | None  # the caller's, on the batcher's clock
    enqueued_s: float  # on the batcher's clock
    target: list[int] | None = None  # teacher forcing (Score, the lexicon): the given output's ids


class Batcher:
    """The queue and the engine thread (request-level batches). What a call is answered with
    before the queue (cache, lexicon, several words) is the answering layer's, which calls submit()."""

    def __init__(self, engine: Engine, cfg: BatcherConfig, metrics: ModelMetrics,
                 clock: Callable[[], float] = time.perf_counter):
        self.engine = engine
        self.cfg = cfg
        self.metrics = metrics
        # The wait for company (max_wait_ms) sleeps on the event loop for what is left on this clock.
        self._clock = clock
        self._queue: deque[_Item] = deque()
        self._arrived = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._pending: set[asyncio.Future] = set()  # futures of admitted sources not yet resolved (drain)
        # What admission estimates waits from (service/scheduling/admission.py): "under load" is a half-full batch.
        self.rate = ServiceRate(loaded_rows=max(1, cfg.max_batch_size // 2))
        self._in_service = 0  # continuous mode: rows decoding now
        self._last_end_s = 0.0  # request mode: when the last batch finished
        self._batch_s = 0.0  # request mode: recent batches' wall time (a source with less time left is dropped)
        self._last_rows = (0, 0)  # request mode: the sources of the last two batches popped (company_wait_ms)
        # One worker: onnxruntime already uses the cores for one batch at a time.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnserve-engine")

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="attnserve-batcher")

    @property
    def running(self) -> bool:
        """Started and not stopped: sources submitted now will be decoded."""
        return self._task is not None

    async def drain(self, timeout_s: float) -> bool:
        """Wait until every admitted source is resolved (or timeout_s); True when all were.

        For a hot reload: once the servicer points at a new batcher no source enters this
        one, so its queue and running batch only empty out. Call stop() afterwards.
        """
        pending = [f for f in self._pending if not f.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
        return all(f.done() for f in pending)

    async def stop(self) -> None:
        """Stop the loop; sources still queued fail with NotReady."""
        await cancel_and_wait(self._task)
        self._task = None
        while self._queue:
            item = self._queue.popleft()
            if not item.future.done():
                item.future.set_exception(NotReady("server is shutting down"))
        self.metrics.queue_depth.set(0)
        self._executor.shutdown(wait=True)

    async def submit(self, work: list[tuple[list[str], list[int] | None]], options: DecodeOptions,
                     deadline_s: float | None) -> list[list[Decoded]]:
        """Admit (source tokens, forced target ids or None) items, queue them and wait for every one:
        per item its hypotheses, best first. Raises Overloaded at once when the call cannot be
        answered within its deadline (on the batcher's clock) or the queue's time bound.
        Cancelling the caller drops its sources from the queue and the running batch."""
        if len(self._queue) + len(work) > self.cfg.max_queue_size:
            self.metrics.admission_refusals.labels("queue_size").inc()
            raise Overloaded(f"queue is full ({len(self._queue)} of {self.cfg.max_queue_size} sources waiting)")
        refused = refusal(len(self._queue), len(work), self._room(), self.rate, deadline_s,
                          self.cfg.max_queue_wait_ms, self._clock)
        if refused is not None:
            self.metrics.admission_refusals.labels(refused[0]).inc()
            raise Overloaded(refused[1])
        loop = asyncio.get_running_loop()
        now = self._clock()
        items = [_Item(tokens, options, loop.create_future(), deadline_s, now, target) for tokens, target in work]
        self._queue.extend(items)
        self._pending.update(it.future for it in items)
        self.metrics.queue_depth.set(len(self._queue))
        self._notify()
        try:
            return list(await asyncio.gather(*(it.future for it in items)))
        finally:
            for it in items:  # on cancellation, the loop skips these
                it.future.cancel()
                self._pending.discard(it.future)

    def _room(self) -> int:
        """Sources the next batch takes in (request mode: a whole batch, after the running one)."""
        return self.cfg.max_batch_size

    def _notify(self) -> None:
        """New sources are queued: wake the batch loop."""
        self._arrived.set()

    async def _next_batch(self) -> list[_Item]:
        while not self._queue:
            self._arrived.clear()
            await self._arrived.wait()
        now = self._clock()
        full_by = now + self.cfg.max_wait_ms / 1000  # a full batch, up to max_wait_ms
        # Company expected: the last two batches each had company (so not a chance meeting of lone
        # callers), so the callers they answered are likely to be back within a round trip.
        company = min(self._last_rows) if min(self._last_rows) > 1 else 0
        company_by = now + self.cfg.company_wait_ms / 1000
        while len(self._queue) < self.cfg.max_batch_size:
            until = max(full_by, company_by) if len(self._queue) < company else full_by
            remaining = until - self._clock()
            if remaining <= 0:
                break
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                break
        batch = self._pop_live(self.cfg.max_batch_size)
        if batch:
            self._last_rows = (self._last_rows[1], len(batch))
        return batch

    def _pop_live(self, n: int) -> list[_Item]:
        """Up to n queued sources whose callers are still waiting."""
        batch, expired = [], []
        now = self._clock()
        while self._queue and len(batch) < n:
            item = self._queue.popleft()
            if item.future.done():  # skip sources whose caller went away
                continue
            left_s = None if item.deadline_s is None else item.deadline_s - now
            if left_s is not None and left_s <= 0:
                expired.append((item, DeadlineExpired("the deadline passed while the call was queued")))
            elif left_s is not None and left_s <= self._batch_s:
                # Its deadline passes before a batch could finish: decoding it would only delay the
                # others. The caller still has time to go elsewhere, so it hears a shed, not a timeout.
                expired.append((item, Overloaded(
                    f"overloaded: {1000 * left_s:.0f} ms left, less than a batch takes here "
                    f"({1000 * self._batch_s:.0f} ms); retry later or elsewhere")))
            else:
                batch.append(item)
        if expired:
            self._deliver(expired)
        self.metrics.queue_depth.set(len(self._queue))
        for it in batch:
            self.metrics.queue_wait_seconds.observe(now - it.enqueued_s)
        return batch

    def _deliver(self, outcomes: list[tuple[_Item, object]]) -> None:
        """On the event loop: resolve futures now."""
        _resolve(outcomes)

    async def _run(self) -> None:
        while True:
            batch = await self._next_batch()
            if not batch:
                continue
            await self._decode_and_resolve(batch)

    def _groups(self, batch: list[_Item]) -> list[list[_Item]]:
        """The engine batches a popped batch is decoded as, in order: the sources popped together
        are all decoded before the next pop, so grouping never passes a source over."""
        if not self.cfg.length_grouping or len(batch) < 2:
            return [batch]
        return [[batch[i] for i in g] for g in lengths.split(
            [len(it.tokens) for it in batch],
            [lengths.expected_steps(len(it.tokens), it.options.max_output_len) for it in batch])]

    async def _decode_and_resolve(self, batch: list[_Item]) -> None:
        """Decode whole items in the worker thread, group by group, each group's callers answered as
        it ends; an engine failure fails only that group's callers."""
        started = self._clock()
        # The rate admission uses is wall time from when this batch could start (the previous one's
        # end, or its first arrival) to its end: the hand-offs through a busy event loop count too.
        could_start = max(self._last_end_s, min(it.enqueued_s for it in batch))
        decoded = 0
        for group in self._groups(batch):
            group = [it for it in group if not it.future.done()]  # callers gone while a group before ran
            if not group:
                continue
            self.metrics.batch_size.observe(len(group))
            group_started = self._clock()
            try:
                results = await asyncio.get_running_loop().run_in_executor(self._executor, self._decode_whole, group)
            except Exception as e:
                for it in group:
                    if not it.future.done():
                        it.future.set_exception(e)
                continue
            self.metrics.batch_seconds.observe(self._clock() - group_started)
            decoded += len(group)
            for it, hyps in zip(group, results):
                if not it.future.done():
                    it.future.set_result(hyps)
        if not decoded:
            return
        end = self._clock()
        self.rate.record(decoded, end - could_start, len(batch))
        self._last_end_s = end
        self._batch_s = 0.8 * self._batch_s + 0.2 * (end - started)

    def _decode_whole(self, batch: list[_Item]) -> list[list[Decoded]]:
        """Worker thread: decode whole items (service/engine/decoding.py) and count what it spent."""
        results, counts = decode_whole(self.engine, [Work(it.tokens, it.options, it.target) for it in batch])
        self.metrics.decode_steps.inc(counts.steps)
        # Every row stays in a request-level batch until its last step, cancelled callers' too;
        # its own steps end at its </s> (or its limit), the rest is spent waiting for the longest.
        self.metrics.decode_row_steps.inc(counts.row_steps)
        self.metrics.decode_row_steps_useful.inc(counts.useful_row_steps)
        self.metrics.generated_tokens.inc(counts.generated_tokens)
        self.metrics.inputs.inc(len(batch))
        return results


class ContinuousBatcher(Batcher):
    """The step loop runs in the engine thread itself, so a decoder step never waits for the
    event loop: sources arrive through the thread-safe queue, and finished results go back
    to the loop in one call per step."""

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = threading.Event()
        self._stopping = False
        self._task = self._loop.run_in_executor(self._executor, self._step_forever)

    def _notify(self) -> None:
        self._wake.set()

    def _room(self) -> int:
        """Free rows: sources join the running batch at the next step."""
        return max(0, self.cfg.max_batch_size - self._in_service)

    async def stop(self) -> None:
        if self._task is not None:
            self._stopping = True
            self._wake.set()
            await self._task
            self._task = None
        await super().stop()

    def _step_forever(self) -> None:
        batch = StepBatch(self.engine)  # its rows' keys are their _Items
        while not self._stopping:
            if not batch and not self._queue:
                self._wake.wait()
                self._wake.clear()
                continue
            joining = self._pop_live(self.cfg.max_batch_size - len(batch)) if self._admit_now(batch) else []
            started = self._clock()
            whole = [it for it in joining if it.options.beam_size > 1 or it.target is not None]
            if whole:  # beam search and teacher forcing run as their own batch between steps
                joining = [it for it in joining if it.options.beam_size == 1 and it.target is None]
                self._deliver(self._outcomes(whole, self._decode_whole))
            self._in_service = len(batch) + len(joining)
            try:
                finished = self._step(batch, joining)
            except Exception as e:  # fail this batch's callers, keep the loop
                self._deliver([(it, e) for it in batch.keys + joining])
                batch.clear()
                continue
            finally:
                self._in_service = len(batch)
            self.rate.record(len(finished) + len(whole), self._clock() - started, len(batch) + len(finished))
            # Rows whose caller left while this step ran: the one step that cannot be saved
            # (they leave at the next step). Reading a future's state from this thread is a benign race.
            self.metrics.decode_row_steps_after_cancel.inc(
                sum(it.future.cancelled() for it in batch.keys) + sum(it.future.cancelled() for it, _ in finished))
            if finished:
                self._deliver([(it, [result]) for it, result in finished])
        self._deliver([(it, NotReady("server is shutting down")) for it in batch.keys])

    def _admit_now(self, batch: StepBatch) -> bool:
        """Whether queued sources join at this step: at once when nothing decodes, else when the
        oldest has waited max_join_wait_ms or enough wait to fill the batch (one encoder run for all)."""
        if not batch:
            return True
        try:
            oldest = self._queue[0].enqueued_s
        except IndexError:  # nothing queued
            return False
        return (len(self._queue) >= self.cfg.max_batch_size - len(batch)
                or (self._clock() - oldest) * 1000 >= self.cfg.max_join_wait_ms)

    @staticmethod
    def _outcomes(items: list[_Item], decode) -> list[tuple[_Item, object]]:
        try:
            return list(zip(items, decode(items)))
        except Exception as e:
            return [(it, e) for it in items]

    def _deliver(self, outcomes: list[tuple[_Item, object]]) -> None:
        """From the engine thread: resolve futures on the event loop."""
        if outcomes:
            self._loop.call_soon_threadsafe(_resolve, outcomes)

    def _step(self, batch: StepBatch, joining: list[_Item]) -> list[tuple[_Item, Decoded]]:
        """Worker thread: a cancelled caller's row leaves, the joining sources enter, one decoder step
        runs; returns the rows that ended."""
        batch.keep([i for i, it in enumerate(batch.keys) if not it.future.done()])
        batch.join([(it, it.tokens, it.options) for it in joining])
        if not batch:
            return []
        rows, started = len(batch), self._clock()
        finished = batch.step()
        self.metrics.batch_size.observe(rows)
        self.metrics.batch_seconds.observe(self._clock() - started)
        self.metrics.decode_steps.inc()
        self.metrics.decode_row_steps.inc(rows)
        self.metrics.decode_row_steps_useful.inc(rows)  # a row leaves at the step it ends
        for _, result in finished:
            self.metrics.generated_tokens.inc(len(result.output_ids))
        self.metrics.inputs.inc(len(finished))
        return finished


def _resolve(outcomes: list[tuple[_Item, object]]) -> None:
    for item, outcome in outcomes:
        if item.future.done():  # the caller went away
            continue
        if isinstance(outcome, Exception):
            item.future.set_exception(outcome)
        else:
            item.future.set_result(outcome)


def make_batcher(engine: Engine, cfg: BatcherConfig, metrics: ModelMetrics) -> Batcher:
    return (ContinuousBatcher if cfg.mode == "continuous" else Batcher)(engine, cfg, metrics)
