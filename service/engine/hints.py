"""A bundle's source hints: what an outside dictionary says of a word, read by the model after its spelling.

eng_us (the high subtask, whose rules allow any outside resource but Wiktionary) has models that read, after a
word's letters, a separator and CMUdict's transcription of the word in the task's IPA, where CMUdict has the word:
`knight` is read as `k n i g h t | n a ɪ t`. The model learns how Wiktionary's conventions differ from CMUdict's;
a word CMUdict lacks is read by its letters alone. The hints travel in the bundle (the manifest's `source_hints`,
written by training/export.py from the file the model trained with), so the server reads a word exactly as
training did: Engine.encode extends each source here, after the answering layer has checked the word's own
symbols, and the attention returned covers the word's characters (the rest of each row went to the hint).

The same function extends sources in training (training/train.py --source-hints) and in the export's parity
check, so a hint is spelled one way everywhere.

A bundle may also prefer its hints as answers (the manifest's `source_hints.prefer_within_nats`): where a word's
hint, spelled in the model's output symbols, scores within that many nats of the model's own best output (both
teacher-forced by the model, decoding.py `settle`), the hint is the answer. The model reads the hint and mostly
follows it; where it strays, often it strays from a right transcription only a little less likely than its own.
Free of onnxruntime: data and pure functions.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FILE = "source_hints.tsv"  # word<TAB>hint, one word a line; the hint's characters are its tokens
SEPARATOR = "|"  # between a word's letters and its hint; in no source of a model that has hints


@dataclass(frozen=True)
class SourceHints:
    by_word: dict[str, str]  # word (its tokens joined) -> hint
    separator: str = SEPARATOR
    prefer_within_nats: float | None = None  # a hint the model scores this close to its best is the answer

    def after(self, tokens: list[str] | tuple[str, ...]) -> list[str]:
        """What the model reads after a word's own tokens: the separator and its hint, or nothing."""
        hint = self.by_word.get("".join(tokens))
        return [] if hint is None else [self.separator, *hint]

    def extend(self, tokens: list[str] | tuple[str, ...]) -> list[str]:
        """The tokens the model reads for a word's: its own, then after() them."""
        return [*tokens, *self.after(tokens)]

    def symbols(self) -> set[str]:
        """Every symbol a hint adds (the separator among them)."""
        return {self.separator, *(c for hint in self.by_word.values() for c in hint)}


def segments(hint: str, symbols: set[str], longest: int) -> list[str] | None:
    """The hint as output symbols, the longest that fits first at each place (`longest`: the longest symbol's
    length), or None where a character starts no symbol."""
    out, i = [], 0
    while i < len(hint):
        symbol = next((hint[i:i + n] for n in range(min(longest, len(hint) - i), 0, -1) if hint[i:i + n] in symbols),
                      None)
        if symbol is None:
            return None
        out.append(symbol)
        i += len(symbol)
    return out


def read(path: Path) -> dict[str, str]:
    """word -> hint from a FILE-format file; ValueError naming a line that is not word<TAB>hint."""
    by_word = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        word, tab, hint = line.partition("\t")
        if not tab or not word or not hint or "\t" in hint or " " in hint or SEPARATOR in word + hint:
            raise ValueError(f"{path}:{n}: want word<TAB>hint (no space, no {SEPARATOR!r}), got {line!r}")
        by_word[word] = hint
    return by_word


def load(manifest: dict, path: Path) -> SourceHints | None:
    """The bundle's hints, or None where its manifest has none."""
    spec = manifest.get("source_hints")
    if not spec:
        return None
    margin = spec.get("prefer_within_nats")
    if margin is not None and not (isinstance(margin, (int, float)) and margin >= 0):
        raise ValueError(f"source_hints.prefer_within_nats must be a number >= 0, got {margin!r}")
    return SourceHints(read(Path(path) / spec["file"]), spec["separator"], None if margin is None else float(margin))
