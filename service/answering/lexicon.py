"""The dictionary first: a bundle's lexicon and a model's overrides, looked up before the model.

A lexicon maps a source (tokenized as the model tokenizes it) to one or more targets in the
model's own output ids. The answerer (answerer.py) looks every input up: a hit becomes teacher-forced work
(service/engine/forced.py) whose results carry the model's score and attention of the given
output, so a dictionary word still comes back with its letter <-> phoneme alignment.

Both come from tab-separated `source<TAB>target` files: the bundle's lexicon may list a source on
several lines (its pronunciations, first the primary one); an overrides file lists a source once.
A bad line is refused with its file and line number, and nothing of the file is taken.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from service.domain import LEXICON, OVERRIDE, LexiconError


@dataclass(frozen=True)
class Lexicon:
    entries: dict[tuple[str, ...], list[list[int]]] = field(default_factory=dict)
    overrides: dict[tuple[str, ...], list[list[int]]] = field(default_factory=dict)

    def lookup(self, tokens: list[str]) -> tuple[str, list[list[int]]] | None:
        """(origin, target ids of each pronunciation) for a source, an override first; None if absent."""
        key = tuple(tokens)
        if key in self.overrides:
            return OVERRIDE, self.overrides[key]
        if key in self.entries:
            return LEXICON, self.entries[key]
        return None

    def with_overrides(self, overrides: dict[tuple[str, ...], list[list[int]]]) -> "Lexicon":
        return Lexicon(self.entries, overrides)


def read_tsv(path: Path, tokenize: Callable[[str], list[str]], tokenize_target: Callable[[str], list[str]],
             target_ids: Callable[[list[str]], list[int]], *, unique: bool) -> dict[tuple[str, ...], list[list[int]]]:
    """Parse `source<TAB>target` lines; unique: a source may appear only once (an overrides file).
    Blank lines and lines starting with # are skipped."""
    out: dict[tuple[str, ...], list[list[int]]] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise LexiconError(f"{path}: cannot be read as UTF-8 text: {e}") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
            raise LexiconError(f"{path}:{n}: expected source<TAB>target with neither empty, got {line!r}")
        source, target = tokenize(fields[0].strip()), tokenize_target(fields[1].strip())
        try:
            ids = target_ids(target)
        except ValueError as e:
            raise LexiconError(f"{path}:{n}: {e}") from None
        key = tuple(source)
        if key in out and (unique or ids in out[key]):
            raise LexiconError(f"{path}:{n}: {fields[0].strip()!r} is listed twice"
                               + ("" if unique else " with the same target"))
        out.setdefault(key, []).append(ids)
    return out
