"""service/repository/heap.py: what is alive once the models load is frozen out of the collector's
walks, and a version let go is still collected (its cycles); the answering stages make no cycle."""
import asyncio
import gc
import weakref

import numpy as np

from service.answering.answerer import Answerer
from service.answering.lexicon import Lexicon
from service.answering.textrules import read_rules
from service.config import AnswerConfig
from service.domain import Decoded
from service.metrics import Metrics
from service.repository import heap


class Node:
    pass


def test_what_is_alive_at_load_is_frozen_and_a_released_cycle_is_still_collected():
    version = Node()
    version.reading = Node()
    version.reading.answerer = version  # a cycle, as a version's objects may make
    gone = weakref.ref(version)
    try:
        heap.freeze_loaded()
        assert gc.get_freeze_count() > 0
        del version
        gc.collect()
        assert gone() is not None  # frozen: the collector does not walk it, so its cycle stays
        heap.released()
        assert gone() is None
        assert gc.get_freeze_count() > 0  # the rest frozen again
    finally:
        heap.stop()
    assert gc.get_freeze_count() == 0


def test_off_until_the_server_turns_it_on():
    version = Node()
    version.self = version
    gone = weakref.ref(version)
    heap.released()  # not on: nothing frozen, nothing collected here
    assert gc.get_freeze_count() == 0
    del version
    gc.collect()
    assert gone() is None


class Engine:
    """What the answering stage reads of an engine: a character model of ARPAbet output."""

    name, src_tokenization, tgt_joiner, precision = "fake", "chars", " ", "fp32"
    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3
    tgt_vocab = ["<pad>", "<s>", "</s>", "<unk>", "AH0", "B", "N"]
    alphabet = set("abcdefghijklmnopqrstuvwxyz'")
    attention_modes = ("soft",)

    def normalize(self, text):
        return text.lower()

    def tokenize(self, text):
        return list(self.normalize(text).strip())

    def unknown_symbols(self, tokens):
        return [(i, t) for i, t in enumerate(tokens) if t not in self.alphabet]


class Batcher:
    """Answers every source with one symbol, its attention spread over the source."""

    running = True

    async def submit(self, work, options, deadline_s):
        return [[Decoded(list(src), [4], ["AH0"], -0.5, np.full((2, len(src)), 1 / len(src), np.float32), True)]
                for src in (s.src_tokens for s in work)]


def test_an_answerer_let_go_after_text_is_freed_without_the_collector():
    lexicon = Lexicon().with_overrides({tuple("nasa"): [[6, 4], [5, 4]]})  # an acronym the lexicon has
    answerer = Answerer(Engine(), Batcher(), AnswerConfig(cache_entries=100), Metrics().for_model("fake"), lexicon,
                        read_rules("en"))
    texts = ["Dr. Smith read 3 books, NASA said.", "Dr. Smith read 3 books, NASA said."]
    answers = asyncio.run(answerer.transduce_text(texts))
    assert answers[0].pronunciation == answers[1].pronunciation
    answerer.set_text_rules(read_rules("en"))
    gone = weakref.ref(answerer)
    gc.disable()
    try:
        del answerer
        assert gone() is None  # freed by its references alone: no stage refers back to it
    finally:
        gc.enable()
