"""Teacher forcing: what the model says of a given output; a strategy of the decoding core
(service/engine/strategy.py).

For each (source, target) pair the decoder is fed the target's tokens instead of its own choices,
through the same decoder-step graph that decodes: per step the log-probability of the given token
and the attention row. Their sum is the output's log-probability under the model, and the
attention matrix is the model's alignment of that output to the source (a letter <-> phoneme
alignment for G2P). Scoring candidates, ranking a dictionary's pronunciations and the lexicon's
attention all come from here.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from service.domain import Decoded
from service.engine import strategy
from service.engine.engine import Engine
from service.engine.strategy import DecodeStrategy


class TeacherForcing(DecodeStrategy):
    """Each row reads its given output, then </s>; every row steps until the longest is through (one batch,
    as one decode of all of them). Keeps each token's log-probability, (B, T) float64."""

    def __init__(self, targets: list[list[int]], eos_id: int):
        B = len(targets)
        self.lengths = np.array([len(t) + 1 for t in targets])  # (B,) steps, </s> included
        self.gold = np.full((B, int(self.lengths.max())), eos_id, dtype=np.int64)  # (B, T) its ids, then </s>
        for b, ids in enumerate(targets):
            self.gold[b, :len(ids)] = ids
        self.token_lp = np.zeros(self.gold.shape, dtype=np.float64)  # (B, T)
        self.attn: list[np.ndarray | None] = []  # one (B, S) per step, None without attention
        self.t = 0

    def advance(self, log_probs: np.ndarray, attn: np.ndarray | None) -> None:
        B = len(self.gold)
        self.token_lp[:, self.t] = log_probs[np.arange(B), self.gold[:, self.t]]
        self.attn.append(attn)
        self.t += 1

    @property
    def done(self) -> bool:
        return self.t >= self.gold.shape[1]

    def next_inputs(self) -> np.ndarray:
        return self.gold[:, self.t - 1]

    def log_prob(self, b: int) -> float:
        """Row b's log_prob: numpy's (pairwise) sum of its token log-probabilities, </s> included."""
        return float(self.token_lp[b, :self.lengths[b]].sum())


def force(engine: Engine, sources: list[list[str]], targets: list[list[int]],
          top_k: list[int] | None = None) -> list[Decoded]:
    """One Decoded per pair: `targets` are output ids without </s>, which is forced last."""
    forcing = TeacherForcing(targets, engine.eos_id)
    run = strategy.decode(engine.step, engine.encode(sources, top_k), forcing)
    attn = np.stack(forcing.attn, axis=1) if engine.has_attention else None  # (B, T, S)
    out = []
    for b in range(len(sources)):
        n = int(forcing.lengths[b])
        d = engine.result(sources[b], forcing.gold[b, :n], None if attn is None else attn[b], forcing.log_prob(b),
                          None if run.self_attn is None else run.self_attn[b])
        out.append(replace(d, token_log_probs=forcing.token_lp[b, :n].tolist()))
    return out
