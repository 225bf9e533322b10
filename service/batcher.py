"""Request-level dynamic batching: sources from concurrent calls share one engine batch.

A request's sources go into one bounded queue. The batch loop takes up to
`max_batch_size` of them, waiting at most `max_wait_ms` after the first arrival
for company, decodes them in a worker thread and resolves each source's future.
Knows nothing of gRPC: callers get results or the domain errors below.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from service.config import BatcherConfig
from service.engine import Decoded, Engine
from service.metrics import Metrics


class InvalidInput(ValueError):
    """An input the model cannot take (e.g. empty after tokenization)."""


class Overloaded(RuntimeError):
    """The queue is full; the caller should retry later."""


class NotReady(RuntimeError):
    """The batch loop is not running (starting up or shutting down)."""


@dataclass
class _Item:
    tokens: list[str]
    max_output_len: int
    future: asyncio.Future
    enqueued_s: float = field(default_factory=time.perf_counter)


class Batcher:
    def __init__(self, engine: Engine, cfg: BatcherConfig, metrics: Metrics):
        self.engine = engine
        self.cfg = cfg
        self.metrics = metrics
        self._queue: deque[_Item] = deque()
        self._arrived = asyncio.Event()
        self._task: asyncio.Task | None = None
        # One worker: onnxruntime already uses the cores for one batch at a time.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnserve-engine")

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="attnserve-batcher")

    async def stop(self) -> None:
        """Stop the loop; sources still queued fail with NotReady."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        while self._queue:
            item = self._queue.popleft()
            if not item.future.done():
                item.future.set_exception(NotReady("server is shutting down"))
        self.metrics.queue_depth.set(0)
        self._executor.shutdown(wait=True)

    async def transduce(self, texts: list[str], max_output_len: int = 0) -> list[Decoded]:
        """Decode every text; results in input order. Cancelling the caller drops its queued sources."""
        if self._task is None:
            raise NotReady("model is not loaded yet")
        sources = [self.engine.tokenize(t) for t in texts]
        for i, tokens in enumerate(sources):
            if not tokens:
                raise InvalidInput(f"inputs[{i}] is empty after tokenization")
        if len(self._queue) + len(sources) > self.cfg.max_queue_size:
            raise Overloaded(f"queue is full ({len(self._queue)} of {self.cfg.max_queue_size} sources waiting)")
        loop = asyncio.get_running_loop()
        items = [_Item(tokens, max_output_len, loop.create_future()) for tokens in sources]
        self._queue.extend(items)
        self.metrics.queue_depth.set(len(self._queue))
        self._arrived.set()
        try:
            return list(await asyncio.gather(*(it.future for it in items)))
        finally:
            for it in items:  # on cancellation, the loop skips these
                it.future.cancel()

    async def _next_batch(self) -> list[_Item]:
        while not self._queue:
            self._arrived.clear()
            await self._arrived.wait()
        deadline = time.perf_counter() + self.cfg.max_wait_ms / 1000
        while len(self._queue) < self.cfg.max_batch_size:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                break
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                break
        batch = []
        while self._queue and len(batch) < self.cfg.max_batch_size:
            item = self._queue.popleft()
            if not item.future.done():  # skip sources whose caller went away
                batch.append(item)
        self.metrics.queue_depth.set(len(self._queue))
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._next_batch()
            if not batch:
                continue
            now = time.perf_counter()
            for it in batch:
                self.metrics.queue_wait_seconds.observe(now - it.enqueued_s)
            self.metrics.batch_size.observe(len(batch))
            try:
                results = await loop.run_in_executor(
                    self._executor, self.engine.decode, [it.tokens for it in batch],
                    [it.max_output_len for it in batch])
            except Exception as e:  # one bad batch fails its own callers, never the loop
                for it in batch:
                    if not it.future.done():
                        it.future.set_exception(e)
                continue
            self.metrics.batch_seconds.observe(time.perf_counter() - now)
            self.metrics.decode_steps.inc(max(r.attn.shape[0] for r in results))
            self.metrics.generated_tokens.inc(sum(len(r.output_ids) for r in results))
            self.metrics.inputs.inc(len(batch))
            for it, r in zip(batch, results):
                if not it.future.done():
                    it.future.set_result(r)
