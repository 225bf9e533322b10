"""A response cache: a model version's answers by input, least recently used out first.

Running text repeats its words (the, of, and, ... are a third of English tokens), and a word's
answer is the same every time for one model version, overrides and options. An answerer holds one
cache, so a new version starts empty; the overrides changing empties it (Answerer.set_overrides).
Only the event loop touches it: no lock.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

from service.answering.lexicon import Targets
from service.domain import Decoded, DecodeOptions

Key = tuple[tuple[str, ...], DecodeOptions]


class Answer(NamedTuple):
    """A source's answer as the answerer made it: its hypotheses, best first, and what the one
    lexicon lookup found for it: the pronunciations it was answered from (the lexicon's or the
    overrides', hyps[0].origin says which), None when the model decoded it."""

    hyps: list[Decoded]
    pronunciations: Targets | None = None


class ResponseCache:
    def __init__(self, max_entries: int, metrics):
        self.max_entries = max_entries
        self.metrics = metrics  # ModelMetrics: cache_lookups{result}, cache_evictions, cache_entries
        self._entries: OrderedDict[Key, Answer] = OrderedDict()

    def get_many(self, keys: list[Key]) -> list[Answer | None]:
        """Each key's answer, or None; the lookups counted once per call, not once per word (a text's
        words are many, and a labelled counter's increment is not free)."""
        if not self.max_entries:
            return [None] * len(keys)
        entries = self._entries
        found = [entries.get(key) for key in keys]
        hits = 0
        for key, hit in zip(keys, found):
            if hit is not None:
                entries.move_to_end(key)
                hits += 1
        if hits:
            self.metrics.cache_lookups.labels("hit").inc(hits)
        if hits < len(keys):
            self.metrics.cache_lookups.labels("miss").inc(len(keys) - hits)
        return found

    def put(self, key: Key, value: Answer) -> None:
        if not self.max_entries:
            return
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
            self.metrics.cache_evictions.inc()
        self.metrics.cache_entries.set(len(self._entries))
