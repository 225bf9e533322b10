"""One answer per input, over a real server in its default precision: a word decoded alone (many
single-word calls at once, so each is batched with whatever else is in flight) and the same word
among 63 others in one call give the same output and scores within 1e-4, in request and
continuous batching and under --mode auto (whichever mode it serves), greedy and beam, across the
server's worker processes. The shipped model is served int8 by default (`--precision auto`), so this
holds its int8 graphs to it; `python -m bench.one_answer` counts the same over 1,000 words.
"""
from __future__ import annotations

import pytest

from bench.harness import Server
from bench.one_answer import compare, server_argv, shuffled_test_words
from tests.conftest import SHIPPED_MODEL

WORDS = 256
BATCH = 64


@pytest.fixture(scope="module")
def words() -> list[str]:
    return shuffled_test_words(str(SHIPPED_MODEL), WORDS)


@pytest.mark.parametrize("mode", ["request", "continuous", "auto"])
async def test_a_word_has_one_answer_alone_or_in_any_batch(mode, words):
    with Server(server_argv(str(SHIPPED_MODEL), mode, "auto")) as server:
        for beam_size in (1, 4):
            r = await compare(server.addr, words, beam_size, BATCH)
            assert (r["outputs_changed"], r["scores_moved"]) == (0, 0), (mode, beam_size, r)
