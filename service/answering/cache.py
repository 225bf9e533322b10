"""A response cache: a model version's answers by input, least recently used out first.

Running text repeats its words (the, of, and, ... are a third of English tokens), and a word's
answer is the same every time for one model version, overrides and options. An answerer holds one
cache, so a new version starts empty; the overrides changing empties it (Answerer.set_overrides).
Only the event loop touches it: no lock.
"""
from __future__ import annotations

from collections import OrderedDict

from service.domain import Decoded, DecodeOptions

Key = tuple[tuple[str, ...], DecodeOptions]


class ResponseCache:
    def __init__(self, max_entries: int, metrics):
        self.max_entries = max_entries
        self.metrics = metrics  # ModelMetrics: cache_lookups{result}, cache_evictions, cache_entries
        self._entries: OrderedDict[Key, list[Decoded]] = OrderedDict()

    def get(self, key: Key) -> list[Decoded] | None:
        if not self.max_entries:
            return None
        hit = self._entries.get(key)
        if hit is None:
            self.metrics.cache_lookups.labels("miss").inc()
            return None
        self._entries.move_to_end(key)
        self.metrics.cache_lookups.labels("hit").inc()
        return hit

    def put(self, key: Key, value: list[Decoded]) -> None:
        if not self.max_entries:
            return
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
            self.metrics.cache_evictions.inc()
        self.metrics.cache_entries.set(len(self._entries))
