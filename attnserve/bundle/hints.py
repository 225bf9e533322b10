"""A bundle's source hints: what an outside dictionary says of a word, read by the model after its spelling.

eng_us (the high subtask, whose rules allow any outside resource but Wiktionary) has models that read, after a
word's letters, a separator and CMUdict's transcription of the word in the task's IPA, where CMUdict has the word:
`knight` is read as `k n i g h t | n a ɪ t`. The model learns how Wiktionary's conventions differ from CMUdict's;
a word CMUdict lacks is read by its letters alone. The hints travel in the bundle (the manifest's `source_hints`,
written by training/export.py from the file the model trained with), so the server reads a word exactly as
training did: Engine.encode extends each source here, after the answering layer has checked the word's own
symbols, and the attention returned covers the word's characters (the rest of each row went to the hint).

The same function extends sources in training (training/train.py --source-hints) and in the export's parity
check, so a hint is spelled one way everywhere: it is the bundle's rule, not the server's. Free of onnxruntime
and torch: data and one pure function.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from attnserve.bundle.manifest import Manifest

FILE = "source_hints.tsv"  # word<TAB>hint, one word a line; the hint's characters are its tokens
SEPARATOR = "|"  # between a word's letters and its hint; in no source of a model that has hints


@dataclass(frozen=True)
class SourceHints:
    by_word: dict[str, str]  # word (its tokens joined) -> hint
    separator: str = SEPARATOR

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


def read(path: Path) -> dict[str, str]:
    """word -> hint from a FILE-format file; ValueError naming a line that is not word<TAB>hint."""
    by_word = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        word, tab, hint = line.partition("\t")
        if not tab or not word or not hint or "\t" in hint or " " in hint or SEPARATOR in word + hint:
            raise ValueError(f"{path}:{n}: want word<TAB>hint (no space, no {SEPARATOR!r}), got {line!r}")
        by_word[word] = hint
    return by_word


def load(manifest: Manifest, path: Path) -> SourceHints | None:
    """The bundle's hints, or None where its manifest has none."""
    spec = manifest.source_hints
    if spec is None:
        return None
    return SourceHints(read(Path(path) / spec.file), spec.separator)
