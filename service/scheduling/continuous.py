"""Continuous (step-level) batching: the decoder runs as a loop of steps over the active sequences.

Queued sources join at the next step (after their encoder pass) and a sequence leaves the moment
it emits </s> or reaches its length limit, so short outputs never wait for long ones. Beam search
and teacher forcing run as a request-level batch of their own between steps.

The step loop runs in the engine thread itself, so a decoder step never waits for the event loop:
sources arrive through the intake's queue, and finished results go back to the loop as outcomes,
in one call per step.
"""
from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from service.config import BatcherConfig
from service.domain import Decoded, DecodeOptions, NotReady, Source
from service.engine.decoding import StepBatch
from service.engine.engine import Engine
from service.metrics import ModelMetrics
from service.scheduling.intake import Intake, Outcome, Request, resolve
from service.scheduling.request import decode_requests


class ContinuousBatcher:
    """The queue and the engine thread's step loop (step-level batches)."""

    def __init__(self, engine: Engine, cfg: BatcherConfig, metrics: ModelMetrics,
                 clock: Callable[[], float] = time.perf_counter):
        self.engine = engine
        self.cfg = cfg
        self.metrics = metrics
        self.intake = Intake(cfg, metrics, clock)
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None  # where outcomes are resolved (set by start())
        self._wake = threading.Event()  # sources queued, or stop() asked
        self._stopping = False
        self._task: asyncio.Future | None = None  # the step loop, running in the engine thread
        self._in_service = 0  # rows decoding now (admission's room)
        # One worker: the step loop holds it from start() to stop().
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnserve-engine")

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.run_in_executor(self._executor, self._step_forever)

    @property
    def running(self) -> bool:
        """Started and not stopped: sources submitted now will be decoded."""
        return self._task is not None

    async def submit(self, sources: list[Source], options: DecodeOptions,
                     deadline_s: float | None) -> list[list[Decoded]]:
        """As RequestBatcher.submit: per item its hypotheses, best first, or Overloaded at once."""
        # Free rows: sources join the running batch at the next step.
        room = max(0, self.cfg.max_batch_size - self._in_service)
        requests = self.intake.admit(sources, options, deadline_s, room)
        self._notify()
        return await self.intake.answers(requests)

    def _notify(self) -> None:
        """New sources are queued: wake the step loop."""
        self._wake.set()

    async def drain(self, timeout_s: float) -> bool:
        """As RequestBatcher.drain: True when every admitted source was resolved within timeout_s."""
        return await self.intake.drain(timeout_s)

    async def stop(self) -> None:
        """Stop the step loop (its rows fail with NotReady), then what is still queued."""
        if self._task is not None:
            self._stopping = True
            self._wake.set()
            await self._task
            self._task = None
        self.intake.fail_queued()
        self._executor.shutdown(wait=True)

    def _deliver(self, outcomes: list[Outcome]) -> None:
        """From the engine thread: resolve futures on the event loop."""
        if outcomes:
            self._loop.call_soon_threadsafe(resolve, outcomes)

    def _step_forever(self) -> None:
        batch = StepBatch(self.engine)  # its rows' keys are their Requests
        queue = self.intake.queue
        while not self._stopping:
            if not batch and not queue:
                self._wake.wait()
                self._wake.clear()
                continue
            joining = []
            if self._admit_now(batch):
                popped = self.intake.pop_live(self.cfg.max_batch_size - len(batch))
                self._deliver(popped.refused)
                joining = popped.batch
            started = self._clock()
            whole = [r for r in joining if r.options.beam_size > 1 or r.target is not None]
            if whole:  # beam search and teacher forcing run as their own batch between steps
                joining = [r for r in joining if r.options.beam_size == 1 and r.target is None]
                self._deliver(self._decoded_whole(whole))
            self._in_service = len(batch) + len(joining)
            try:
                finished = self._step(batch, joining)
            except Exception as e:  # fail this batch's callers, keep the loop
                self._deliver([(r, e) for r in batch.keys + joining])
                batch.clear()
                continue
            finally:
                self._in_service = len(batch)
            self.intake.rate.record(len(finished) + len(whole), self._clock() - started, len(batch) + len(finished))
            # Rows whose caller left while this step ran: the one step that cannot be saved
            # (they leave at the next step). Reading a future's state from this thread is a benign race.
            self.metrics.decode_row_steps_after_cancel.inc(
                sum(r.future.cancelled() for r in batch.keys) + sum(r.future.cancelled() for r, _ in finished))
            if finished:
                self._deliver([(r, [result]) for r, result in finished])
        self._deliver([(r, NotReady("server is shutting down")) for r in batch.keys])

    def _admit_now(self, batch: StepBatch) -> bool:
        """Whether queued sources join at this step: at once when nothing decodes, else when the
        oldest has waited max_join_wait_ms or enough wait to fill the batch (one encoder run for all)."""
        if not batch:
            return True
        queue = self.intake.queue
        try:
            oldest = queue[0].enqueued_s
        except IndexError:  # nothing queued
            return False
        return (len(queue) >= self.cfg.max_batch_size - len(batch)
                or (self._clock() - oldest) * 1000 >= self.cfg.max_join_wait_ms)

    def _decoded_whole(self, requests: list[Request]) -> list[Outcome]:
        """Engine thread: whole requests decoded between steps; a failure fails only them."""
        try:
            return list(zip(requests, decode_requests(self.engine, self.metrics, requests)))
        except Exception as e:
            return [(r, e) for r in requests]

    def _step(self, batch: StepBatch, joining: list[Request]) -> list[tuple[Request, Decoded]]:
        """Engine thread: a cancelled caller's row leaves, the joining sources enter, one decoder step
        runs; returns the rows that ended."""
        batch.keep([i for i, r in enumerate(batch.keys) if not r.future.done()])
        batch.join([(r, r.tokens, r.options) for r in joining])
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
