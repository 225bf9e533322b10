"""Encoding a batch in groups of like source lengths, put back together as one batch.

An encoder call runs every row over the batch's longest source, so a batch of mixed lengths spends
most of its recurrent steps on padding. Engine.encode splits the rows, by length, into the groups
that cost least (groups()), runs the encoder on each with its own padding, and puts the outputs
back in the rows' order, padded to the longest source (assemble()), as one call would have given
them: the decoder then steps the whole batch together.

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


def groups(lengths: list[int], costs: Costs = DEFAULT) -> list[np.ndarray]:
    """The rows (indices into lengths) in groups of consecutive lengths, the cheapest split by the cost
    model; one group when splitting saves nothing. Rows of one length stay in one group."""
    if len(lengths) < 2:
        return [np.arange(len(lengths))]
    order = np.argsort(lengths, kind="stable")
    values, counts = np.unique(np.asarray(lengths)[order], return_counts=True)
    ends = np.cumsum(counts)  # rows up to and including each distinct length
    # best[j]: the cheapest cost of the rows of the first j distinct lengths; cut[j] where its last group starts
    best, cut = [0.0] + [np.inf] * len(values), [0] * (len(values) + 1)
    for j in range(1, len(values) + 1):
        for i in range(j):
            rows = ends[j - 1] - (ends[i - 1] if i else 0)
            cost = best[i] + costs.call + values[j - 1] * (costs.step + rows * costs.row_step)
            if cost < best[j]:
                best[j], cut[j] = cost, i
    bounds, j = [], len(values)
    while j:
        bounds.append((cut[j], j))
        j = cut[j]
    return [order[(ends[i - 1] if i else 0):ends[j - 1]] for i, j in reversed(bounds)]


def assemble(parts: list[tuple[np.ndarray, dict[str, np.ndarray]]], batch: int) -> dict[str, np.ndarray]:
    """One batch's encoder outputs from each group's (rows, outputs): every row in its place, the
    source-time axes padded to the longest (pad_mask True there, zeros elsewhere)."""
    S = max(out["pad_mask"].shape[1] for _, out in parts)
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
