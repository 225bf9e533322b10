"""A word's answer does not depend on how far its batch pads its source (engine.py, SOURCE_BLOCK).

The case this holds: on the shipped g2p-en in its served int8, `neighboring` (11 letters) decoded
with beam 4 scored -0.52688 alone and -0.52676 beside any word of 12 letters or more, before the
decoder's source time was padded to whole blocks: attention's sums over the source added in another
order at another length, and an int8 rounding boundary grew the last bit into the score. Now every
length a batch pads it to gives the same hypotheses and scores, to the last bit, as alone.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from service.config import EngineConfig
from service.domain import DecodeOptions
from service.engine.beam import beam_search
from service.engine.bundle import load_bundle
from service.engine.engine import SOURCE_BLOCK, Engine, Running, padded_source_len
from tests.conftest import REPO

LETTERS = "abcdefghijklmnopqrstuvwxyz" * 2


def test_padded_source_lengths_are_whole_blocks():
    assert [padded_source_len(S) for S in (1, SOURCE_BLOCK, SOURCE_BLOCK + 1)] == [
        SOURCE_BLOCK, SOURCE_BLOCK, 2 * SOURCE_BLOCK]


@pytest.fixture(scope="module")
def engine() -> Engine:
    bundle = load_bundle(REPO / "models" / "g2p-en" / "1")
    return Engine(bundle, EngineConfig(precision="int8", intra_op_threads=1))


def answers(decoded) -> list[tuple]:
    return [(tuple(d.output_ids), d.log_prob, d.score) for d in decoded]


@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_word_alone_and_beside_every_longer_word(engine, beam_size):
    word = list("neighboring")
    opts = DecodeOptions(beam_size=beam_size, n_best=beam_size)
    alone = answers(beam_search(engine, [word], opts)[0])
    for length in range(len(word) + 1, 41):  # padded to 16, 24, 32 and 40 source steps
        beside = beam_search(engine, [word, list(LETTERS[:length])], opts)[0]
        assert answers(beside) == alone, f"beside a word of {length} letters"


def test_rows_joined_mid_decode_step_as_alone(engine):
    """Continuous batching joins rows of other lengths to a running row (Running.concat): its
    steps give the same log_probs, to the last bit, as the row stepped alone."""
    alone = engine.encode([list("neighboring")])
    joined = Running.concat(alone, engine.encode([list(LETTERS[:length]) for length in (17, 30)]))
    for _ in range(12):
        log_probs, _, alone = engine.step(alone)
        joined_log_probs, _, joined = engine.step(joined)
        assert np.array_equal(joined_log_probs[0], log_probs[0])
        y = np.argmax(log_probs, axis=1)
        alone = dataclasses.replace(alone, y_prev=y)
        joined = dataclasses.replace(joined, y_prev=np.concatenate([y, np.argmax(joined_log_probs[1:], axis=1)]))
