"""Teacher forcing: what the model says of a given output.

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
from service.engine.engine import Engine


def force(engine: Engine, sources: list[list[str]], targets: list[list[int]],
          top_k: list[int] | None = None) -> list[Decoded]:
    """One Decoded per pair: `targets` are output ids without </s>, which is forced last."""
    B = len(sources)
    lengths = np.array([len(t) + 1 for t in targets])  # (B,) steps, </s> included
    T = int(lengths.max())
    gold = np.full((B, T), engine.eos_id, dtype=np.int64)  # (B, T) each row: its ids, then </s>
    for b, ids in enumerate(targets):
        gold[b, :len(ids)] = ids
    run = engine.encode(sources, top_k)
    token_lp = np.zeros((B, T), dtype=np.float64)  # (B, T)
    attn_steps = []
    for t in range(T):
        log_probs, attn, run = engine.step(run)  # (B, V), (B, S) or None
        token_lp[:, t] = log_probs[np.arange(B), gold[:, t]]
        attn_steps.append(attn)
        run.y_prev = gold[:, t]
    attn = np.stack(attn_steps, axis=1) if engine.has_attention else None  # (B, T, S)
    out = []
    for b in range(B):
        n = int(lengths[b])
        d = engine.result(sources[b], gold[b, :n], None if attn is None else attn[b], float(token_lp[b, :n].sum()),
                          None if run.self_attn is None else run.self_attn[b])
        out.append(replace(d, token_log_probs=token_lp[b, :n].tolist()))
    return out
