"""Encoding a batch in groups of like lengths (service/engine/length_groups.py) changes no answer.

On shipped bundles in the precision they are served in (g2p-en, and g2p-ady, a stacked ensemble
with a monotonic alignment state), a batch of words of mixed lengths encoded in groups gives every
row the same encoder outputs over its own source positions, and the same decoded ids, log_prob
and attention, to the last bit, as the batch encoded in one call.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from service.config import EngineConfig
from service.engine import length_groups
from service.engine.bundle import load_bundle
from service.engine.engine import Engine
from tests.conftest import REPO


def test_the_fitted_costs_are_the_timed_ones(monkeypatch):
    """measure() recovers call, step and row_step from timings that follow the model exactly."""
    truth = length_groups.Costs(call=0.004, step=0.0005, row_step=0.0002)
    now = [0.0]

    def run(rows, length):
        now[0] += truth.call + length * (truth.step + rows * truth.row_step)

    monkeypatch.setattr(length_groups.time, "perf_counter", lambda: now[0])
    fitted = length_groups.measure(run)
    assert dataclasses.astuple(fitted) == pytest.approx(dataclasses.astuple(truth))


def test_groups_cover_every_row_once_in_runs_of_lengths():
    lengths = [3, 14, 3, 9, 15, 4, 14, 3, 8, 2] * 8
    groups = length_groups.groups(lengths)
    rows = np.concatenate([np.asarray(g) for g in groups])
    assert sorted(rows.tolist()) == list(range(len(lengths)))
    assert len(groups) > 1
    spans = [(min(lengths[r] for r in g), max(lengths[r] for r in g)) for g in groups]
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))  # consecutive lengths, each in one group
    assert len(length_groups.groups([7] * 64)) == 1
    assert len(length_groups.groups([3, 14])) == 1  # two rows: a second call costs more than the padding


@pytest.fixture(scope="module", params=["g2p-en", "g2p-ady"])
def engine(request) -> Engine:
    return Engine(load_bundle(REPO / "models" / request.param), EngineConfig(intra_op_threads=1))


def words(engine: Engine, n: int = 96) -> list[list[str]]:
    lines = (load_bundle(REPO / "models" / engine.name).path / "lexicon.tsv").read_text(encoding="utf-8").splitlines()
    vocab = sorted({line.split("\t")[0] for line in lines if line})
    rng = np.random.default_rng(3)
    return [engine.tokenize(vocab[i]) for i in rng.choice(len(vocab), n, replace=False)]


def test_grouped_encoding_answers_as_one_call(engine, monkeypatch):
    sources = words(engine)
    lengths = [len(engine.source_ids(s)) for s in sources]
    assert len(length_groups.groups(lengths, engine.encode_costs)) > 1
    grouped = engine.encode(sources)
    decoded = engine.decode(sources)
    monkeypatch.setattr(engine, "encode_costs", length_groups.Costs(call=1e9, step=1, row_step=1))  # one call
    assert len(length_groups.groups(lengths, engine.encode_costs)) == 1
    single = engine.encode(sources)
    assert np.array_equal(grouped.pad_mask, single.pad_mask)
    for b, n in enumerate(lengths):
        for a, s in ((grouped.enc_out, single.enc_out), (grouped.keys, single.keys)):
            assert a is None or np.array_equal(a[b, :n], s[b, :n])
        for name, value in single.state.items():
            mine = grouped.state[name]
            if name in ("h", "c"):
                assert np.array_equal(mine[:, b], value[:, b])
            elif name in length_groups.TIME_AXES:  # align (B, S, 1 + V) over the row's own positions
                assert np.array_equal(mine[b, :n], value[b, :n])
            else:  # feed (B, H)
                assert np.array_equal(mine[b], value[b])
    for a, s in zip(decoded, engine.decode(sources), strict=True):
        assert a.output_ids == s.output_ids and np.float64(a.log_prob).tobytes() == np.float64(s.log_prob).tobytes()
        assert np.array_equal(a.attn, s.attn)
