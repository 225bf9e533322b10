"""The fakes the scheduling tests drive the batchers with (tests/scheduling/test_batcher.py, test_continuous.py,
test_lengths.py).

The fakes tell a test where the engine thread is (`Calls`: each call counted as it begins, any of
them held until the test releases it), and admission's time comes from a `Clock` the test moves:
these tests wait on events and decide by virtual time, never by sleeping, so a busy machine
changes nothing they check. `FakeEngine` decodes a whole batch at once (request-level batching),
`StepEngine` a step at a time (continuous batching).
"""
import asyncio
import threading
import time

import numpy as np
import pytest

from service.answering.answerer import Answerer
from service.config import AnswerConfig, BatcherConfig, EngineConfig
from service.domain import Decoded, Overloaded
from service.engine.engine import Engine, Running
from service.metrics import Metrics
from service.scheduling.continuous import ContinuousBatcher
from service.scheduling.request import RequestBatcher


HOLD_S = 60  # bounds a hang only: a held call or an awaited one that never comes fails after this


class Calls:
    """The engine calls begun so far, counted as each begins; a test can hold any of them, or all
    of them while `gate` is cleared."""

    def __init__(self):
        self._changed = threading.Condition()
        self.begun = 0
        self._holds: dict[int, threading.Event] = {}
        self.gate = threading.Event()
        self.gate.set()

    def hold(self, index: int) -> threading.Event:
        """Call number `index` (from 0), once begun, waits until the returned event is set."""
        self._holds[index] = threading.Event()
        return self._holds[index]

    def begin(self) -> None:
        """Engine thread: a call begins, and waits while held."""
        with self._changed:
            index, self.begun = self.begun, self.begun + 1
            self._changed.notify_all()
        for event in (self._holds.get(index), self.gate):
            if event is not None and not event.wait(HOLD_S):
                raise TimeoutError(f"engine call {index} was held {HOLD_S} s and never released")

    async def reached(self, n: int) -> None:
        """Until n calls have begun (waited for in a thread: they begin in the engine's)."""
        def wait():
            with self._changed:
                if not self._changed.wait_for(lambda: self.begun >= n, HOLD_S):
                    raise TimeoutError(f"{self.begun} engine calls began in {HOLD_S} s, not {n}")
        await asyncio.to_thread(wait)


class Clock:
    """The batcher's clock in tests of what it decides by time: it moves only when told to."""

    def __init__(self):
        self._lock = threading.Lock()
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now_s += seconds


class FakeEngine:
    """Echoes each source upper-cased (one output id a symbol, then </s>); records every batch it
    is given. With a clock, each call takes `call_s` of it."""

    name = "m"  # the model's name, as logs give it
    tgt_joiner = " "
    tgt_vocab = ()  # answering reads it (an ARPAbet model's text has an IPA form): none here
    precision = "fp32"
    src_tokenization = "words"  # no compound splitting (service/answering/compound.py): one text, one source
    prosody = None  # no prosody memory (attnserve/bundle/prosody.py)
    # What answering reads of a model's script (service/answering/answerer.py script_of): nothing to read here.
    alphabet, pad_id, bos_id, eos_id, unk_id = frozenset(), 0, 1, 2, 3
    normalize = staticmethod(str)

    def __init__(self, clock: Clock | None = None, call_s: float = 0.0, fail_on: str | None = None):
        self.batches: list[list[str]] = []
        self.calls = Calls()
        self.clock, self.call_s = clock, call_s
        self.fail_on = fail_on

    def tokenize(self, text):
        return list(text.strip())

    def unknown_symbols(self, tokens):
        return []

    def decode(self, sources, max_output_lens=None, top_k=None):
        self.calls.begin()
        words = ["".join(s) for s in sources]
        self.batches.append(words)
        if self.clock is not None:
            self.clock.advance(self.call_s)
        if self.fail_on in words:
            raise RuntimeError(f"engine failed on {self.fail_on}")
        return [Decoded(src_tokens=s, output_ids=list(range(len(s))), output_tokens=[t.upper() for t in s],
                        log_prob=-1.0, attn=np.eye(len(s), dtype=np.float32), finished=True) for s in sources]


def answering(engine, batcher_cls=None, metrics=None, cache_entries=0, clock=time.perf_counter, **cfg) -> Answerer:
    """A batcher (not started) and the answerer that holds it, as the repository builds them.
    No response cache unless a test asks: these tests count what reaches the engine."""
    metrics = metrics or Metrics().for_model("m")
    batcher = (batcher_cls or RequestBatcher)(engine, BatcherConfig(**cfg), metrics, clock)
    return Answerer(engine, batcher, AnswerConfig(cache_entries=cache_entries), metrics)


async def started(engine, **cfg) -> Answerer:
    b = answering(engine, **cfg)
    b.batcher.start()
    return b


async def one_pass() -> None:
    """One pass of the event loop: calls just created queue their sources or are refused in it, since
    transduce awaits nothing before the queue (each test checks the queue it expects after it)."""
    await asyncio.sleep(0)


def refused_at_once(call, match: str) -> None:
    """The call (a coroutine not yet started) is refused in its first step, before it awaits
    anything, the queue included: what "at once" means, whatever the machine's speed."""
    try:
        with pytest.raises(Overloaded, match=match):
            call.send(None)
    finally:
        call.close()


EOS = 2


class StepEngine:
    """A deterministic step-level engine: each source is copied out symbol by symbol, then </s>.

    The 'decoder state' is the position in the source, so rows joining and leaving
    between steps must keep their own positions for the outputs to come out right.
    Its `calls` are its decoder steps; with a clock, each step takes `step_s` of it.
    """

    name = "m"  # as FakeEngine
    eos_id = EOS
    tgt_joiner = ""
    precision = "fp32"
    src_tokenization = "words"  # as FakeEngine: no compound splitting
    prosody = None
    alphabet, pad_id, bos_id, unk_id = frozenset(), 0, 1, 3  # as FakeEngine
    normalize = staticmethod(str)
    tgt_vocab = [chr(i) for i in range(200)]  # output id i is the symbol chr(i)
    # The real engine's length limit and results, not copies that could drift from them.
    limit = Engine.limit
    result = Engine.result

    def __init__(self, max_output_len=40, clock: Clock | None = None, step_s: float = 0.0):
        self.cfg = EngineConfig(max_output_len=max_output_len)
        self.calls = Calls()
        self.clock, self.step_s = clock, step_s
        self.step_batches: list[list[str]] = []  # the sources in each step, in row order
        self.encode_batches: list[list[str]] = []  # the sources of each encoder run
        self.fail_when = None

    def tokenize(self, text):
        return list(text)

    def unknown_symbols(self, tokens):
        return []

    def encode(self, sources, top_k=None):
        self.encode_batches.append(["".join(s) for s in sources])
        B, S = len(sources), max(len(s) for s in sources)
        enc = np.zeros((B, S, 1), dtype=np.float32)
        pad = np.ones((B, S), dtype=bool)
        for b, s in enumerate(sources):
            enc[b, :len(s), 0] = [ord(ch) for ch in s]
            pad[b, :len(s)] = False
        return Running(np.ones(B, dtype=np.int64), {"feed": np.zeros((B, 1), dtype=np.float32)}, enc, enc.copy(), pad)

    def step(self, run):
        B, S = run.pad_mask.shape
        pos = run.state["feed"][:, 0].astype(int)
        lengths = (~run.pad_mask).sum(axis=1)
        self.step_batches.append(["".join(chr(int(c)) for c in run.enc_out[b, :lengths[b], 0]) for b in range(B)])
        self.calls.begin()
        if self.clock is not None:
            self.clock.advance(self.step_s)
        if self.fail_when and any(self.fail_when in w for w in self.step_batches[-1]):
            raise RuntimeError("injected engine fault")
        log_probs = np.full((B, len(self.tgt_vocab)), -10.0, dtype=np.float32)
        for b in range(B):
            log_probs[b, int(run.enc_out[b, pos[b], 0]) if pos[b] < lengths[b] else EOS] = -0.1
        attn = np.where(run.pad_mask, 0.0, 1.0 / lengths[:, None]).astype(np.float32)
        return log_probs, attn, Running(run.y_prev, {"feed": run.state["feed"] + 1}, run.enc_out, run.keys, run.pad_mask)

    def first_step(self, word: str) -> int:
        """The index of the first step `word` was decoded in."""
        return next(i for i, batch in enumerate(self.step_batches) if word in batch)


async def continuous(engine, **cfg):
    b = answering(engine, ContinuousBatcher, **cfg)
    b.batcher.start()
    return b
