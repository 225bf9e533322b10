"""Request-level batches decoded with source length in mind (BatcherConfig.length_grouping).

A greedy batch runs until its longest row ends; rows that ended keep costing steps (the
difference of attnserve_decode_row_steps_total and attnserve_decode_row_steps_useful_total).
CTranslate2 sorts its inputs by length before it batches them. Here a popped batch is decoded
as length-sorted groups, one after the other, shortest first, where the cost model below says
the smaller batches cost less than the steps of rows that ended; the short group's callers are
answered before the long group runs. All the sources popped together are decoded before the
next pop, so no source is passed over.

Choosing which queued sources go together when more are queued than a batch takes (the oldest
and those nearest its length) was measured too, and left out: no better than splitting alone
(docs/performance.md, Length grouping).

Source length stands for output length (a G2P model emits about one symbol per letter).
"""
from __future__ import annotations

from service.engine.length_groups import cheapest_split

# The cost of decoding a batch, in row-steps (one row through one decoder step):
#     cost = CALL_ROW_STEPS + steps * (STEP_ROWS + rows * (1 + S / PAD_SYMBOLS))
# STEP_ROWS: a decoder step's fixed part, whatever its rows, in rows.
# PAD_SYMBOLS: a row-step costs more the longer its sources are padded (attention over S symbols);
#   S symbols of padding add S / PAD_SYMBOLS row-steps to each row's step.
# CALL_ROW_STEPS: each group is one more encoder and Loop call and one more hand-off between threads.
# Fitted to timings of the shipped model split as this model says (docs/performance.md, Length
# grouping). The timings are noisy, so the constants are the cautious end of the fit: they make a
# split look cheaper than whole only when it saves more than it seems to, never the other way round.
STEP_ROWS = 6.0
PAD_SYMBOLS = 20.0
CALL_ROW_STEPS = 16.0


def expected_steps(source_len: int, max_output_len: int = 0) -> int:
    """Decoder steps a source is expected to take: an output symbol a source symbol, then </s>."""
    return min(source_len + 1, max_output_len) if max_output_len else source_len + 1


def batch_cost(rows: int, steps: int, source_len: int) -> float:
    """The cost model above, for `rows` sources padded to `source_len` running `steps` steps."""
    return CALL_ROW_STEPS + steps * (STEP_ROWS + rows * (1 + source_len / PAD_SYMBOLS))


def split(lengths: list[int], steps: list[int] | None = None) -> list[list[int]]:
    """The batch's indices in length-sorted groups, shortest first, of least total batch_cost.

    lengths: each source's length; steps: each one's expected_steps (default length + 1).
    Sources of one length always share a group (the engine's cheapest_split, exact)."""
    return cheapest_split(lengths, lambda rows, length, most: batch_cost(rows, most, length),
                          steps or [n + 1 for n in lengths])
