"""Beam search over the engine's encoder and decoder-step graphs: a strategy of the decoding core
(service/engine/strategy.py), which runs the steps.

Each source keeps `beam_size` rows in the batch. At every step the candidates
(beam log_prob + log p(token), in float64) of all of a source's beams are ranked; those ending
in </s> become finished hypotheses, the best others form the next beams, and
the decoder state and attention history are reordered to follow their parents.

Ranking uses log_prob / length ** alpha (length counts </s>). A source stops
when it has `n_best` finished hypotheses and no live beam can still beat the
worst of them: since log-probabilities only fall as a beam grows, a live beam's
best possible normalised score is log_prob / max_len ** alpha.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from service.domain import Decoded, DecodeOptions
from service.engine import strategy
from service.engine.engine import Engine
from service.engine.strategy import DecodeStrategy, Hypothesis

NEG_INF = -np.inf


@dataclass
class _Source:
    tokens: list[str]
    limit: int
    beams: list[Hypothesis] = field(default_factory=list)
    finished: list[tuple[float, Hypothesis]] = field(default_factory=list)  # (rank score, hypothesis)
    done: bool = False


def _rank(log_prob: float, length: int, alpha: float) -> float:
    return log_prob / (length ** alpha) if alpha else log_prob


class BeamSearch(DecodeStrategy):
    """k rows per source, beam j of source b at row b*k+j; each step reorders the rows to follow their parents
    (rows of a source with fewer live beams, or done, repeat its first row: their outputs are ignored)."""

    def __init__(self, sources: list[list[str]], limit: int, opts: DecodeOptions, eos_id: int):
        self.k, self.alpha, self.n_best, self.eos_id = opts.beam_size, opts.length_penalty_alpha, opts.n_best, eos_id
        self.srcs = [_Source(tokens, limit, [Hypothesis()]) for tokens in sources]
        self.t = 0  # steps taken
        self._rows = self._tokens = None

    def advance(self, log_probs: np.ndarray, attn: np.ndarray | None) -> None:
        """log_probs (B*k, V), attn (B*k, S) or None."""
        k, B = self.k, len(self.srcs)
        rows, tokens = np.arange(B * k) % k, np.full(B * k, self.eos_id, dtype=np.int64)
        for b, src in enumerate(self.srcs):
            if src.done:
                continue
            parents, next_tokens = _advance(src, log_probs[b * k:b * k + len(src.beams)],
                                            None if attn is None else attn[b * k:], self.t, k, self.alpha,
                                            self.n_best, self.eos_id)
            n = len(parents)
            rows[b * k:b * k + n] = b * k + np.asarray(parents, dtype=np.int64)
            tokens[b * k:b * k + n] = next_tokens
            rows[b * k + n:(b + 1) * k] = b * k  # idle rows: any valid row, their output is ignored
        self.t += 1
        self._rows, self._tokens = rows, tokens

    @property
    def done(self) -> bool:
        return all(s.done for s in self.srcs) or self.t >= max(s.limit for s in self.srcs)

    def select_indices(self) -> np.ndarray:
        return self._rows

    def next_inputs(self) -> np.ndarray:
        return self._tokens


def beam_search(engine: Engine, sources: list[list[str]], opts: DecodeOptions) -> list[list[Decoded]]:
    """The n_best hypotheses of each source, best first, each with its own attention matrix."""
    search = BeamSearch(sources, engine.limit(opts.max_output_len), opts, engine.eos_id)
    B = len(sources)
    run = engine.encode(sources, [opts.attention_top_k] * B)
    self_attn = run.self_attn  # (B, heads, S, S) or None
    strategy.decode(engine.step, run.select(np.repeat(np.arange(B), opts.beam_size)), search)
    return [_results(engine, src, opts.n_best, None if self_attn is None else self_attn[b])
            for b, src in enumerate(search.srcs)]


def _advance(src: _Source, log_probs: np.ndarray, attn: np.ndarray | None, step: int, k: int, alpha: float,
             n_best: int, eos: int) -> tuple[list[int], list[int]]:
    """One step for one source: returns the parent beam and token of each new beam."""
    n_live, V = log_probs.shape
    cand = np.array([h.log_prob for h in src.beams])[:, None] + log_probs  # (n_live, V) float64
    flat = cand.ravel()
    order = np.argsort(-flat, kind="stable")[:2 * k]  # k live continuations exist among the top 2k
    last_step = step + 1 >= src.limit
    new_beams, parents, tokens = [], [], []
    for idx in order:
        parent, token = divmod(int(idx), V)
        hyp = src.beams[parent]
        child = Hypothesis(hyp.ids + [token],
                           hyp.attn if attn is None else hyp.attn + [attn[parent, :len(src.tokens)]],
                           float(flat[idx]))
        if token == eos or last_step:
            src.finished.append((_rank(child.log_prob, len(child.ids), alpha), child))
        elif len(new_beams) < k:
            new_beams.append(child)
            parents.append(parent)
            tokens.append(token)
    src.finished.sort(key=lambda f: -f[0])
    del src.finished[n_best:]
    src.beams = new_beams
    if not new_beams:
        src.done = True
    elif len(src.finished) >= n_best:
        best_possible = max(_rank(h.log_prob, src.limit, alpha) for h in new_beams)
        src.done = src.finished[-1][0] >= best_possible
    return parents, tokens


def _results(engine: Engine, src: _Source, n_best: int, self_attn: np.ndarray | None) -> list[Decoded]:
    out = []
    for score, hyp in src.finished[:n_best]:
        d = engine.result(src.tokens, hyp.ids, hyp.attention(len(src.tokens)), hyp.log_prob, self_attn)
        out.append(replace(d, score=score))
    return out
