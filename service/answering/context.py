"""Homographs chosen by their sentence: a G2P model's bundle names a context model and a table
(attnserve/bundle/homographs.py); this is what its answerer asks of that model.

The context model is served like any model (its own engine and batcher). For each homograph of a
text it reads the homograph's sentence around it (context_source, as in training) and scores each
wordid of the homograph by forced decoding; the likeliest is the reading, and the attention of that
one step over the source's tokens names the words that decided it. What the model answers depends
only on the source (a sentence's words): never on what shares its batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from attnserve.bundle.homographs import Table, context_source
from service.domain import GREEDY, Source

CHOICES_ENTRIES = 20000  # sources' choices kept (emptied whole when full): running text repeats sentences
REASONS = 2  # the context words a choice names


@dataclass(frozen=True)
class Chosen:
    wordid: str
    ids: tuple[int, ...]  # the G2P model's pronunciation of that reading, its output ids
    choice: str  # why: the words the context model attended to most, and the reading


class ContextChooser:
    """What a G2P answerer holds: its table (homograph -> wordid -> output ids, its own model's) and how
    to reach the context model now (`peer()`: its answerer and window, None while it is not served)."""

    def __init__(self, model: str, table: dict[str, dict[str, tuple[int, ...]]], peer: Callable[[], tuple | None]):
        self.model, self.table, self._peer = model, table, peer
        self._chosen: dict[tuple[str, ...], tuple[str, tuple[tuple[str, float], ...], float]] = {}
        self._of = None  # the context model's answerer the choices kept are its

    @classmethod
    def of(cls, model: str, table: Table, target_ids: Callable[[str], list[int]],
           peer: Callable[[], tuple | None]) -> "ContextChooser":
        """From a table of pronunciations as written; ValueError naming one the model cannot emit."""
        ids = {}
        for word, readings in table.items():
            ids[word] = {}
            for wordid, pron in readings.items():
                try:
                    ids[word][wordid] = tuple(target_ids(pron))
                except ValueError as e:
                    raise ValueError(f"homograph {word!r} reading {wordid!r}: {e}") from None
        return cls(model, ids, peer)

    def covers(self, word: str) -> bool:
        return word.lower() in self.table

    def not_served(self) -> str:
        return f"lexicon: the primary pronunciation (the context model {self.model!r} is not served)"

    async def choose(self, asks: list[tuple[str, int, int]], deadline_s: float | None = None) -> list[Chosen | None]:
        """The reading of the homograph text[start:end] of each ask; None for all while the context
        model is not served, or for a homograph none of whose readings the context model knows."""
        peer = self._peer()
        if peer is None or not asks:
            return [None] * len(asks)
        answerer, window = peer
        if answerer is not self._of:  # another version of the context model: its own choices
            self._chosen, self._of = {}, answerer
        engine = answerer.engine
        keys = [tuple(engine.tokenize(context_source(text, start, end, window))) for text, start, end in asks]
        work: list[tuple[tuple[str, ...], str, list[int]]] = []
        first: dict[tuple[str, ...], tuple[str, int, int]] = {}
        for key, ask in zip(keys, asks):
            first.setdefault(key, ask)
        for key, (text, start, end) in first.items():
            if key in self._chosen:
                continue
            for wordid in self.table[text[start:end].lower()]:
                try:
                    work.append((key, wordid, engine.target_ids([wordid])))
                except ValueError:
                    continue  # a reading the context model was not trained on: never chosen
        if work:
            results = await answerer.batcher.submit([Source(list(k), ids) for k, _, ids in work], GREEDY, deadline_s)
            scored: dict[tuple[str, ...], list] = {}
            for (key, wordid, _), hyps in zip(work, results):
                scored.setdefault(key, []).append((hyps[0].log_prob, wordid, hyps[0]))
            if len(self._chosen) + len(scored) > CHOICES_ENTRIES:
                self._chosen.clear()
            for key, cands in scored.items():
                self._chosen[key] = _decided(key, cands)
        out = []
        for key, (text, start, end) in zip(keys, asks):
            decided = self._chosen.get(key)
            if decided is None:
                out.append(None)
                continue
            wordid, reasons, p = decided
            shown = ", ".join(f'"{w}" ({a:.2f})' for w, a in reasons)
            out.append(Chosen(wordid, self.table[text[start:end].lower()][wordid],
                              f"context: {shown} -> {wordid} ({p:.2f}, {self.model})"))
        return out


def _decided(key: tuple[str, ...], cands: list) -> tuple[str, tuple[tuple[str, float], ...], float]:
    """The likeliest reading, the context words its step attended to most (not the marker, punctuation or
    the capital mark), each with its share of the attention those words got, and the reading's
    probability among the readings scored."""
    top = max(l for l, _, _ in cands)
    total = sum(math.exp(l - top) for l, _, _ in cands)
    log_prob, wordid, hyp = max(cands, key=lambda c: (c[0], c[1]))
    reasons: tuple[tuple[str, float], ...] = ()
    if hyp.attn is not None and len(hyp.attn):
        row = hyp.attn[0]
        words = [i for i, t in enumerate(key) if i < len(row) and any(c.isalnum() for c in t)
                 and not (t.startswith("[") and t.endswith("]"))]
        mass = sum(float(row[i]) for i in words) or 1.0
        ranked = sorted(words, key=lambda i: -float(row[i]))
        reasons = tuple((key[i], float(row[i]) / mass) for i in ranked[:REASONS])
    return wordid, reasons, math.exp(log_prob - top) / total
