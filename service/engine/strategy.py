"""One decoding core: the step loop that greedy search, beam search and teacher forcing share.

OpenNMT-py's translate/ shape: the loop is the same for every way of decoding, and a strategy says
what to do with each step's outputs. One step (`step`): run the decoder step for the rows in the
batch, let the strategy pick each row's next token and add that token's log-probability to the
row's `log_prob` (`advance`), retire the rows that emitted </s> or reached their length limit, and
reorder or drop rows as the strategy says (`select_indices`) before feeding the picked tokens back.
`decode` steps until the strategy is done; a continuous batch calls `step` once per scheduler step,
with rows joining and leaving between calls.

The strategies: `GreedySearch` here (the argmax of each row), `BeamSearch` (service/engine/beam.py)
and `TeacherForcing` (service/engine/forced.py). Greedy decoding of a whole batch has an accelerator,
the ONNX Loop graph (service/engine/loop_graph.py): the same steps in one onnxruntime call, held to
GreedySearch by tests/engine/test_decoding_parity.py, bit for bit.

How each row's log_prob is added up is part of what a served answer is, to the last bit:
- GreedySearch and BeamSearch add each step's float32 log-probability to a float64 running sum, in
  step order (`log_prob_dtype=float`); the ONNX Loop adds them in float32 (`np.float32`), so the
  parity test runs GreedySearch in float32.
- TeacherForcing keeps every token's log-probability (its results return them) and sums them with
  numpy (a pairwise sum), as a Score answer always has.

The core reads the engine through two things only: a step function (Engine.step) and the rows it
runs (Engine's Running: `select` and `y_prev`), so it imports no onnxruntime.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


class Rows(Protocol):
    """The decoder inputs of the rows in flight (service/engine/engine.py Running)."""

    y_prev: np.ndarray  # (B,) each row's previous output token

    def select(self, rows: np.ndarray) -> "Rows": ...


# One decoder step for every row: log_probs (B, V), attn (B, S) or None, and the rows' next inputs.
Step = Callable[[Rows], tuple[np.ndarray, "np.ndarray | None", Rows]]


@dataclass
class Hypothesis:
    """A row's output so far: the ids it emitted (</s> last once finished), one attention row per step
    (none for a model without attention) and its log_prob, the sum of those tokens' log-probabilities."""

    ids: list[int] = field(default_factory=list)
    attn: list[np.ndarray] = field(default_factory=list)  # (>=S,) each
    log_prob: float = 0.0

    def attention(self, S: int) -> np.ndarray | None:
        """(steps, S): the attention rows over the source's S tokens; None without attention."""
        return np.stack([a[:S] for a in self.attn]) if self.attn else None


class DecodeStrategy:
    """What a way of decoding does with a decoder step's outputs. Row i of the batch is the strategy's row i."""

    def advance(self, log_probs: np.ndarray, attn: np.ndarray | None) -> None:
        """Read one step's log_probs (B, V) and attn (B, S) or None: pick, add up, retire."""
        raise NotImplementedError

    @property
    def done(self) -> bool:
        """Whether no further step is needed."""
        raise NotImplementedError

    def select_indices(self) -> np.ndarray | None:
        """The batch rows the next step runs, in order (a row may repeat: beam search); None: the same rows."""
        return None

    def next_inputs(self) -> np.ndarray:
        """(rows after select_indices,) the token each row reads at the next step."""
        raise NotImplementedError


def step(decoder_step: Step, run: Rows, strategy: DecodeStrategy) -> Rows:
    """One step of the core: the decoder over `run`, the strategy's choice, the rows it keeps fed their tokens."""
    log_probs, attn, run = decoder_step(run)
    strategy.advance(log_probs, attn)
    rows = strategy.select_indices()
    if rows is not None:
        run = run.select(rows)
    run.y_prev = strategy.next_inputs()
    return run


def decode(decoder_step: Step, run: Rows, strategy: DecodeStrategy) -> Rows:
    """Step until the strategy is done; returns the rows as the last step left them."""
    while not strategy.done:
        run = step(decoder_step, run, strategy)
    return run


@dataclass
class _Live:
    """A row of a GreedySearch: the caller's key for it, its length limit, its hypothesis."""

    key: Any
    limit: int
    hyp: Hypothesis
    done: bool = False


class GreedySearch(DecodeStrategy):
    """Each row's next token is its argmax; a row ends at </s> or at its own length limit.

    retire=True (continuous batching): a row that ended leaves the batch at once, and rows `join` between
    steps. retire=False (a whole batch): a row that ended keeps stepping with the batch, adding nothing, and
    every row reads its own argmax, as in the ONNX Loop, whose batch cannot shrink; the batch the decoder
    sees is then the Loop's, step by step, which is what lets the two agree bit for bit.

    log_prob_dtype: the precision each row's log_prob is added up in (see the module's docstring).
    """

    def __init__(self, eos_id: int, retire: bool, log_prob_dtype: Callable = float):
        self.eos_id, self.retire, self.dtype = eos_id, retire, log_prob_dtype
        self.rows: list[_Live] = []
        self.ended: list[tuple[Any, Hypothesis]] = []  # (key, hypothesis) of the rows that ended at the last step
        self._y = np.zeros(0, dtype=np.int64)
        self._keep: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def keys(self) -> list:
        return [r.key for r in self.rows]

    def join(self, keys: list, limits: list[int]) -> None:
        """Rows join after the batch's, starting empty."""
        self.rows += [_Live(key, int(limit), Hypothesis(log_prob=self.dtype(0))) for key, limit in zip(keys, limits)]

    def keep(self, indices: list[int] | np.ndarray) -> None:
        """Keep only these rows (their indices, in order)."""
        self.rows = [self.rows[i] for i in indices]

    def advance(self, log_probs: np.ndarray, attn: np.ndarray | None) -> None:
        y = log_probs.argmax(axis=-1)  # (B,)
        self.ended = []
        for i, row in enumerate(self.rows):
            if row.done:  # a whole batch's row that ended: it steps on with the batch, emits nothing
                continue
            token, hyp = int(y[i]), row.hyp
            hyp.ids.append(token)
            if attn is not None:
                hyp.attn.append(attn[i])
            hyp.log_prob += self.dtype(log_probs[i, token])
            if token == self.eos_id or len(hyp.ids) >= row.limit:
                row.done = True
                self.ended.append((row.key, hyp))
        self._y, self._keep = y, None
        if self.retire and self.ended:
            self._keep = np.array([i for i, r in enumerate(self.rows) if not r.done], dtype=np.int64)
            self.keep(self._keep)

    @property
    def done(self) -> bool:
        return all(r.done for r in self.rows)

    def select_indices(self) -> np.ndarray | None:
        return self._keep

    def next_inputs(self) -> np.ndarray:
        return self._y if self._keep is None else self._y[self._keep]


def greedy(decoder_step: Step, run: Rows, limits: np.ndarray, eos_id: int,
           log_prob_dtype: Callable = float) -> list[Hypothesis]:
    """Greedy-decode a whole batch (each row until </s> or limits[row]): each row's hypothesis, in order."""
    search = GreedySearch(eos_id, retire=False, log_prob_dtype=log_prob_dtype)
    search.join(list(range(len(limits))), limits)
    decode(decoder_step, run, search)
    return [r.hyp for r in search.rows]
