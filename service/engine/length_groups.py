"""Encoding a batch in groups of like source lengths, put back together as one batch.

An encoder call runs every row over the batch's longest source, so a batch of mixed lengths spends
most of its recurrent steps on padding. Engine.encode splits the rows, by length, into the groups
that cost least (groups()), runs the encoder on each with its own padding, and puts the outputs
back in the rows' order, padded to the source length the decoder is given (assemble(); whole
blocks, engine.py padded_source_len), as one call would have given them: the decoder then steps the
whole batch together.

A row's encoding is its own, whichever rows share its call: the per-row int8 encoder computes each
row by itself (training/rowwise_int8.py), and the padding a row sees does not enter its values
(pad_mask hides it from attention). tests/engine/test_length_groups.py holds the grouped encoding
to the single call's answers, bit for bit.

The cost of a call is modelled as
    call + longest source x (step + rows x row_step):
a call's own fixed work, then per step of the longest source a fixed part (the step's nodes) and
a part per row. Engine.warm_up times its encoder at three shapes and fits the three (measure());
until then, and where the fit makes no sense, DEFAULT holds, in units of one row_step.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Costs:
    call: float  # a call's fixed work
    step: float  # a recurrent step's fixed work
    row_step: float  # one row through one step


CALL_ROW_STEPS = 8  # DEFAULT's call, in row-steps
STEP_ROWS = 3  # DEFAULT's step, in rows
DEFAULT = Costs(CALL_ROW_STEPS, STEP_ROWS, 1.0)
SHAPES = ((1, 4), (1, 16), (16, 16))  # (rows, source length) timed by measure()


def measure(run: Callable[[int, int], None], repeats: int = 3) -> Costs:
    """The cost model fitted to the best of `repeats` timed calls run(rows, length) at SHAPES; DEFAULT
    where a fitted part comes out negative (a noisy timing)."""
    best = []
    for rows, length in SHAPES:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            run(rows, length)
            times.append(time.perf_counter() - started)
        best.append(min(times))
    (_, s1), (_, s2), (b3, s3) = SHAPES
    lone_step = (best[1] - best[0]) / (s2 - s1)  # step + row_step
    call = best[0] - s1 * lone_step
    row_step = ((best[2] - call) / s3 - lone_step) / (b3 - 1)
    step = lone_step - row_step
    return Costs(call, step, row_step) if min(call, step, row_step) > 0 else DEFAULT
# The axes along which each encoder output runs over the source positions, and what pads them.
TIME_AXES = {"enc_out": (1,), "keys": (1,), "pad_mask": (1,), "align": (1,), "self_attn": (2, 3)}
FILL = {"pad_mask": True}  # the rest pad with zeros
ROW_AXIS = {"h": 1, "c": 1}  # (L, B, H); every other output has its rows on axis 0


def cheapest_split(lengths: list[int], cost: Callable[[int, int, int], float],
                   steps: list[int] | None = None) -> list[list[int]]:
    """The indices of lengths in length-sorted groups, shortest first, of least total cost(rows, longest
    length, most steps) over the groups (steps: each index's, default its length). Indices of one length
    always share a group. Exact, over the distinct lengths: a dynamic programme over where groups end,
    n(n+1)/2 evaluations for n of them. Shared by the engine's encoding (groups()) and the scheduler's
    batches (service/scheduling/lengths.py), each with its own cost."""
    if not lengths:
        return []
    steps = steps or list(lengths)
    by_len: dict[int, list[int]] = {}
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        by_len.setdefault(lengths[i], []).append(i)
    keys = sorted(by_len)
    top = [max(steps[i] for i in by_len[k]) for k in keys]  # each length's most steps
    # best[j]: the least cost of the first j lengths; cut[j]: where its last group starts.
    best, cut = [0.0] + [float("inf")] * len(keys), [0] * (len(keys) + 1)
    for j in range(1, len(keys) + 1):
        rows, most = 0, 0
        for i in range(j - 1, -1, -1):  # the last group is lengths i..j-1
            rows += len(by_len[keys[i]])
            most = max(most, top[i])
            c = best[i] + cost(rows, keys[j - 1], most)
            if c < best[j]:
                best[j], cut[j] = c, i
    out, j = [], len(keys)
    while j > 0:
        out.append([i for k in keys[cut[j]:j] for i in by_len[k]])
        j = cut[j]
    return out[::-1]


def groups(lengths: list[int], costs: Costs = DEFAULT) -> list[list[int]]:
    """The rows (indices into lengths) in the encoder's cheapest groups by the cost model (cheapest_split);
    one group when splitting saves nothing."""
    if len(lengths) < 2:
        return [list(range(len(lengths)))]
    return cheapest_split(lengths, lambda rows, length, _: costs.call + length * (costs.step + rows * costs.row_step))


def assemble(parts: list[tuple[np.ndarray, dict[str, np.ndarray]]], batch: int, S: int) -> dict[str, np.ndarray]:
    """One batch's encoder outputs from each group's (rows, outputs): every row in its place, the
    source-time axes padded to S, at least the longest (pad_mask True there, zeros elsewhere). One
    group of every row in order, already S long, is returned as it is."""
    if len(parts) == 1:
        rows, out = parts[0]
        if out["pad_mask"].shape[1] == S and list(rows) == list(range(batch)):
            return out
    merged = {}
    for name, first in parts[0][1].items():
        axis = ROW_AXIS.get(name, 0)
        shape = list(first.shape)
        shape[axis] = batch
        for a in TIME_AXES.get(name, ()):
            shape[a] = S
        value = (np.ones if FILL.get(name) else np.zeros)(shape, dtype=first.dtype)
        for rows, out in parts:
            part = out[name]
            index = [slice(None)] * part.ndim
            index[axis] = rows
            for a in TIME_AXES.get(name, ()):
                index[a] = slice(0, part.shape[a])
            value[tuple(index)] = part
        merged[name] = value
    return merged
