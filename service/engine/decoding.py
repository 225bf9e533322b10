"""How sources are decoded, given a batch the scheduler formed: the executor's side of batching.

Two ways in, one per batching mode of service/scheduling/batcher.py:

- `decode_whole(engine, work)` decodes a batch to the end: teacher-forced items (a given output:
  the lexicon, Score) through service/engine/forced.py, greedy items in one engine.decode(), beam
  items in one beam_search per option set.
- `StepBatch` holds the rows of a continuous batch: rows join (after one encoder run) and leave
  between steps, and `step()` runs one step of the decoding core (service/engine/strategy.py) for
  all of them: a GreedySearch picks each row's next token (the argmax), adds its log-probability to
  the row's log_prob and retires the rows that emitted </s> or reached their length limit.

Greedy, beam and forced decoding all run through that one core; engine.decode() serves a whole
greedy batch through its accelerator, the ONNX Loop, where the bundle allows.

The scheduler decides which sources go together and when; what happens to them here.
Synchronous, called from the engine thread.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from service.domain import Decoded, DecodeOptions
from service.engine.beam import beam_search
from service.engine.engine import Engine, Running
from service.engine import strategy
from service.engine.forced import force
from service.engine.strategy import GreedySearch


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
    (attnserve/bundle/prosody.py); unchanged where the bundle has none. An output the memory edits is forced
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
        score = None if best.score is None else forced.log_prob / forced.steps ** alpha if alpha else forced.log_prob
        settled.append([replace(forced, token_log_probs=None, score=score),
                        *(h for h in hs[1:] if h.output_ids != ids)])
    return settled


@dataclass
class _Row:
    """A source decoding in a StepBatch: the key of its row in the batch's GreedySearch."""

    key: Any  # the caller's handle for it
    tokens: list[str]
    options: DecodeOptions
    self_attn: np.ndarray | None  # (heads, >=S, >=S) its encoder self-attention, None without


class StepBatch:
    """The rows of a continuous batch, greedy-decoded one step at a time through the decoding core
    (strategy.py): a GreedySearch that retires a row the step it ends. Row i of `running` is the search's row i."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.running: Running | None = None
        self.search = GreedySearch(engine.eos_id, retire=True)  # its keys: _Rows

    def __len__(self) -> int:
        return len(self.search)

    @property
    def keys(self) -> list:
        return [r.key for r in self.search.keys]

    def keep(self, indices: list[int]) -> None:
        """Keep only these rows (their indices, in order): the others leave before the next step."""
        if len(indices) < len(self.search):
            self.running = self.running.select(np.array(indices, dtype=np.int64))
            self.search.keep(indices)

    def join(self, joining: list[tuple[Any, list[str], DecodeOptions]]) -> None:
        """(key, tokens, options) sources join the batch: one encoder run for all of them."""
        if not joining:
            return
        new = self.engine.encode([tokens for _, tokens, _ in joining],
                                 [options.attention_top_k for _, _, options in joining])
        self.running = new if not self.search else Running.concat(self.running, new)
        self.search.join([_Row(key, tokens, options, None if new.self_attn is None else new.self_attn[i])
                          for i, (key, tokens, options) in enumerate(joining)],
                         [self.engine.limit(options.max_output_len) for _, _, options in joining])

    def step(self) -> list[tuple[Any, Decoded]]:
        """One decoder step for every row; returns the (key, result) of each row that ended, which leaves."""
        engine = self.engine
        self.running = strategy.step(engine.step, self.running, self.search)
        finished = []
        for row, hyp in self.search.ended:
            decoded = engine.result(row.tokens, hyp.ids, hyp.attention(len(row.tokens)), hyp.log_prob, row.self_attn)
            finished.append((row.key, settle(engine, [[decoded]], [row.options])[0][0]))
        return finished

    def clear(self) -> None:
        self.running = None
        self.search = GreedySearch(self.engine.eos_id, retire=True)
