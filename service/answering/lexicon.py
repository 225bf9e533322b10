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

from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from service.domain import LEXICON, OVERRIDE, LexiconError

Targets = list[list[int]]  # a source's pronunciations as the model's output ids, the primary one first
_SEP = "\x1f"  # between a source's tokens in a packed key: a token is one character, or a word that
# str.split() cut at whitespace, \x1f included, so no two token sequences give one key


class Packed:
    """A bundle's lexicon as the server keeps it: each source as one string and each pronunciation as
    bytes, instead of a tuple of token strings and lists of ints. A bundle can list over a hundred
    thousand words, held once in every worker process: packed, they take under half the memory."""

    def __init__(self):
        self._entries: dict[str, bytes | array | tuple] = {}  # one pronunciation, or a tuple of several

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, tokens: list[str] | tuple[str, ...]) -> Targets | None:
        found = self._entries.get(_SEP.join(tokens))
        if found is None:
            return None
        return [list(t) for t in found] if isinstance(found, tuple) else [list(found)]

    def add(self, tokens: list[str], ids: list[int]) -> bool:
        """Add a pronunciation of a source (after those it has); False if the source already has it."""
        key, packed = _SEP.join(tokens), bytes(ids) if max(ids, default=0) < 256 else array("H", ids)
        have = self._entries.get(key)
        if have is None:
            self._entries[key] = packed
            return True
        have = have if isinstance(have, tuple) else (have,)
        if packed in have:
            return False
        self._entries[key] = (*have, packed)
        return True


@dataclass(frozen=True)
class Lexicon:
    entries: Packed = field(default_factory=Packed)
    overrides: dict[tuple[str, ...], Targets] = field(default_factory=dict)

    def lookup(self, tokens: list[str]) -> tuple[str, Targets] | None:
        """(origin, target ids of each pronunciation) for a source, an override first; None if absent."""
        if self.overrides:
            key = tuple(tokens)
            if key in self.overrides:
                return OVERRIDE, self.overrides[key]
        found = self.entries.get(tokens)
        return None if found is None else (LEXICON, found)

    def with_overrides(self, overrides: dict[tuple[str, ...], Targets]) -> "Lexicon":
        return Lexicon(self.entries, overrides)


@dataclass(frozen=True)
class KnownWords:
    """The words a lexicon has, as written: `word in known` tokenizes the word as the model does and
    looks it up, the overrides first (what a text reader asks of an acronym)."""

    lexicon: Lexicon
    tokenize: Callable[[str], list[str]]

    def __contains__(self, word: str) -> bool:
        return self.lexicon.lookup(self.tokenize(word)) is not None


def _lines(path: Path, tokenize: Callable[[str], list[str]], tokenize_target: Callable[[str], list[str]],
           target_ids: Callable[[list[str]], list[int]]) -> Iterator[tuple[int, str, list[str], list[int]]]:
    """(line number, source as written, its tokens, its target ids) of each `source<TAB>target` line.
    Blank lines and lines starting with # are skipped."""
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
        try:
            ids = target_ids(tokenize_target(fields[1].strip()))
        except ValueError as e:
            raise LexiconError(f"{path}:{n}: {e}") from None
        yield n, fields[0].strip(), tokenize(fields[0].strip()), ids


def read_tsv(path: Path, tokenize: Callable[[str], list[str]], tokenize_target: Callable[[str], list[str]],
             target_ids: Callable[[list[str]], list[int]]) -> dict[tuple[str, ...], Targets]:
    """An overrides file: `source<TAB>target` lines, each source once."""
    out: dict[tuple[str, ...], Targets] = {}
    for n, source, tokens, ids in _lines(path, tokenize, tokenize_target, target_ids):
        key = tuple(tokens)
        if key in out:
            raise LexiconError(f"{path}:{n}: {source!r} is listed twice")
        out[key] = [ids]
    return out


def read_entries(path: Path, tokenize: Callable[[str], list[str]], tokenize_target: Callable[[str], list[str]],
                 target_ids: Callable[[list[str]], list[int]]) -> Packed:
    """A bundle's lexicon: `source<TAB>target` lines, a source on several lines for its pronunciations
    (the primary one first), never twice with the same target."""
    out = Packed()
    for n, source, tokens, ids in _lines(path, tokenize, tokenize_target, target_ids):
        if not out.add(tokens, ids):
            raise LexiconError(f"{path}:{n}: {source!r} is listed twice with the same target")
    return out
