"""A bundle's prosody memory: a mark the spelling does not show, decided by the trained words a new word begins like.

Korean writes no vowel length, and its IPA marks it (ː) on a word's first vowel only; it is lexical, a
model learns it as a lottery, but words that share their first syllables often share it (a Sino-Korean
morpheme). So where a bundle has a memory (the manifest's `prosody_memory`, written by
training/prosody_memory.py from the pairs the model trained on), the mark of the first segment of an output
that can carry it is what most trained words beginning with the same characters have: as many as `prefixes`
allows, the longest first (Korean: 3, 2, then 1 syllable) where most of those trained words agree; where none
begins so, or as many have it as not, the model's output stands. decoding.py `settle` applies it after
decoding, and the edited output is rescored by teacher forcing: its score and attention are the model's.

Free of onnxruntime, torch and the engine: data and one pure decision, the bundle's rule that the
server applies and training/prosody_memory.py writes.
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from attnserve.bundle.manifest import Manifest

FILE = "prosody_memory.tsv"  # a word's beginning<TAB>1 (most trained words beginning so carry the mark) or 0


@dataclass(frozen=True)
class ProsodyMemory:
    mark: str  # the prosodic mark decided, e.g. "ː"
    prefixes: tuple[int, ...]  # how many first characters (NFC) a trained word shares with the word, longest first
    marked: dict[str, bool]  # beginning -> whether most trained words beginning so carry the mark (ties absent)
    with_mark: dict[str, str]  # output segment -> the same segment with the mark (see markable)
    carrying: frozenset[str]  # every output segment with the mark (some have no bare form: left as they are)

    @cached_property
    def without_mark(self) -> dict[str, str]:
        """marked segment -> its bare form (with_mark turned round): built once, not on every word decided."""
        return {marked: bare for bare, marked in self.with_mark.items()}

    def key(self, src_tokens: list[str]) -> str | None:
        """The longest beginning of the word (NFC: a Hangul syllable, however the model reads it) the memory
        has a vote for, or None."""
        word = unicodedata.normalize("NFC", "".join(src_tokens))
        return next((word[:n] for n in self.prefixes if len(word) >= n and word[:n] in self.marked), None)

    def decide(self, src_tokens: list[str], output_tokens: list[str]) -> list[str] | None:
        """The output with its first markable segment marked as the memory says, or None where it stays."""
        key = self.key(src_tokens)
        if key is None:
            return None
        want = self.marked[key]
        for i, segment in enumerate(output_tokens):
            if segment in self.with_mark or segment in self.carrying:
                if (segment in self.carrying) == want:
                    return None
                edited = self.with_mark[segment] if want else self.without_mark.get(segment)
                return None if edited is None else [*output_tokens[:i], edited, *output_tokens[i + 1:]]
        return None


def markable(tgt_vocab: list[str], mark: str, pairs: dict[str, str] | None = None) -> dict[str, str]:
    """segment -> segment with the mark: the vocabulary's marked segments whose bare form is in it too, and
    `pairs` (a language's own, where the marked vowel's quality differs: Korean ʌ̹ long is ɘː)."""
    vocab = set(tgt_vocab)
    found = {t.replace(mark, ""): t for t in tgt_vocab if mark in t and t.replace(mark, "") in vocab}
    return {**found, **{bare: marked for bare, marked in (pairs or {}).items() if {bare, marked} <= vocab}}


def load(manifest: Manifest, path: Path) -> ProsodyMemory | None:
    """The bundle's memory, or None where its manifest has none."""
    spec = manifest.prosody_memory
    if spec is None:
        return None
    marked = {}
    for line in (Path(path) / FILE).read_text(encoding="utf-8").splitlines():
        beginning, vote = line.split("\t")
        marked[beginning] = vote == "1"
    vocab, mark = list(manifest.tgt_vocab), spec.mark
    return ProsodyMemory(mark, tuple(sorted(spec.prefixes, reverse=True)), marked,
                         markable(vocab, mark, dict(spec.pairs)), frozenset(t for t in vocab if mark in t))
