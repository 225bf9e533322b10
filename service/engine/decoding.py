"""How sources are decoded, given a batch the scheduler formed: the executor's side of batching.

Two ways in, one per batching mode of service/scheduling/batcher.py:

- `decode_whole(engine, work)` decodes a batch to the end: teacher-forced items (a given output:
  the lexicon, Score) through service/engine/forced.py, greedy items in one engine.decode(), beam
  items in one beam_search per option set.
- `StepBatch` holds the rows of a continuous batch: rows join (after one encoder run) and leave
  between steps, and `step()` runs one decoder step for all of them, picks each row's next token
  (greedy: the argmax), adds its log-probability to the row's score and retires the rows that
  emitted </s> or reached their length limit.

The scheduler decides which sources go together and when; what happens to them here.
Synchronous, called from the engine thread.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from service.domain import Decoded, DecodeOptions
from service.engine.beam import beam_search
from service.engine.engine import Engine, Running
from service.engine.forced import force


@dataclass(frozen=True)
class Work:
    """One source to decode: its tokens, its options, and a given output (ids without </s>) to
    force through the model instead of decoding, or None."""

    tokens: list[str]
    options: DecodeOptions
    target: list[int] | None = None


@dataclass(frozen=True)
class Counts:
    """What a whole-batch decode spent, for the scheduler's metrics."""

    steps: int = 0  # decoder steps of the greedy batch (its longest row's)
    row_steps: int = 0  # rows x steps: every greedy row stays in the batch until its last step
    useful_row_steps: int = 0  # the steps of rows not yet ended
    generated_tokens: int = 0  # output tokens of every item's best hypothesis


def decode_whole(engine: Engine, work: list[Work]) -> tuple[list[list[Decoded]], Counts]:
    """Each item's hypotheses (best first), in order, and what the decode spent."""
    results: list[list[Decoded] | None] = [None] * len(work)
    forced = [i for i, w in enumerate(work) if w.target is not None]
    if forced:
        scored = force(engine, [work[i].tokens for i in forced], [work[i].target for i in forced],
                       [work[i].options.attention_top_k for i in forced])
        for i, d in zip(forced, scored):
            results[i] = [d]
    greedy = [i for i, w in enumerate(work) if w.target is None and w.options.beam_size == 1]
    steps = useful = 0
    if greedy:
        decoded = engine.decode([work[i].tokens for i in greedy], [work[i].options.max_output_len for i in greedy],
                                [work[i].options.attention_top_k for i in greedy])
        steps = max(d.steps for d in decoded)
        useful = sum(d.steps for d in decoded)  # each row's own steps end at its </s> (or its limit)
        for i, d in zip(greedy, decoded):
            results[i] = [d]
    beams: dict[DecodeOptions, list[int]] = {}
    for i, w in enumerate(work):
        if w.target is None and w.options.beam_size > 1:
            beams.setdefault(w.options, []).append(i)
    for opts, members in beams.items():
        for i, hyps in zip(members, beam_search(engine, [work[i].tokens for i in members], opts)):
            results[i] = hyps
    decoded = [i for i, w in enumerate(work) if w.target is None]
    for i, hyps in zip(decoded, settle(engine, [results[i] for i in decoded], [work[i].options for i in decoded])):
        results[i] = hyps
    return results, Counts(steps, steps * len(greedy), useful, sum(len(h[0].output_ids) for h in results))


def settle(engine: Engine, hyps: list[list[Decoded]], options: list[DecodeOptions]) -> list[list[Decoded]]:
    """Each source's hypotheses (best first) with the bundle's prosody memory applied to the best
    (service/engine/prosody.py); unchanged where the bundle has none. An output the memory edits is forced
    through the model alone, so its score and attention are the model's whatever it was batched with; it
    goes first, and the same output lower in the list is dropped."""
    memory = engine.prosody
    if memory is None:
        return hyps
    settled = []
    for hs, opts in zip(hyps, options):
        best = hs[0]
        edited = memory.decide(best.src_tokens, best.output_tokens) if best.finished else None
        if edited is None:
            settled.append(hs)
            continue
        ids = engine.target_ids(edited)
        (forced,) = force(engine, [best.src_tokens], [ids], [opts.attention_top_k])
        alpha = opts.length_penalty_alpha  # ranked as beam.py ranks: log_prob / length ** alpha
        rank = None if best.rank_score is None else forced.score / forced.steps ** alpha if alpha else forced.score
        settled.append([replace(forced, token_log_probs=None, rank_score=rank),
                        *(h for h in hs[1:] if h.output_ids != ids)])
    return settled


@dataclass
class _Row:
    """A source decoding in a StepBatch."""

    key: Any  # the caller's handle for it
    tokens: list[str]
    limit: int
    options: DecodeOptions
    ids: list[int] = field(default_factory=list)
    attn: list[np.ndarray] = field(default_factory=list)  # one (S,) row per step; none without attention
    score: float = 0.0


class StepBatch:
    """The rows of a continuous batch, greedy-decoded one step at a time. Row i of `running` is rows[i]."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.running: Running | None = None
        self.rows: list[_Row] = []

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def keys(self) -> list:
        return [r.key for r in self.rows]

    def keep(self, indices: list[int]) -> None:
        """Keep only these rows (their indices, in order): the others leave before the next step."""
        if len(indices) < len(self.rows):
            self.running = self.running.select(np.array(indices, dtype=np.int64))
            self.rows = [self.rows[i] for i in indices]

    def join(self, joining: list[tuple[Any, list[str], DecodeOptions]]) -> None:
        """(key, tokens, options) sources join the batch: one encoder run for all of them."""
        if not joining:
            return
        new = self.engine.encode([tokens for _, tokens, _ in joining],
                                 [options.attention_top_k for _, _, options in joining])
        self.running = new if not self.rows else Running.concat(self.running, new)
        self.rows += [_Row(key, tokens, self.engine.limit(options.max_output_len), options)
                      for key, tokens, options in joining]

    def step(self) -> list[tuple[Any, Decoded]]:
        """One decoder step for every row; returns the (key, result) of each row that ended, which leaves."""
        engine = self.engine
        log_probs, attn, self.running = engine.step(self.running)  # (B, V), (B, S) or None without attention
        y = log_probs.argmax(axis=-1)  # (B,)
        self.running.y_prev = y
        finished, keep = [], []
        for i, row in enumerate(self.rows):
            token = int(y[i])
            row.ids.append(token)
            if attn is not None:
                row.attn.append(attn[i])
            row.score += float(log_probs[i, token])
            if token == engine.eos_id or len(row.ids) >= row.limit:
                S = len(row.tokens)
                rows_attn = np.stack([a[:S] for a in row.attn]) if row.attn else None
                self_attn = None if self.running.self_attn is None else self.running.self_attn[i]
                decoded = engine.result(row.tokens, row.ids, rows_attn, row.score, self_attn)
                finished.append((row.key, settle(engine, [[decoded]], [row.options])[0][0]))
            else:
                keep.append(i)
        if finished:
            self.keep(keep)
        return finished

    def clear(self) -> None:
        self.running, self.rows = None, []
