"""Homographs read by context: what training and serving share of the context model and its table.

A context model is an ordinary seq2seq bundle whose source is the words of a sentence around one
homograph, the homograph itself replaced by its marker (`[read]`), and whose target is one wordid
(`read_past`). `context_source` makes that source from a text and the homograph's span, the same in
training (data/wikipedia-homographs) and in serving (service/answering/context.py), so the two cannot
read a sentence apart. A G2P bundle that reads homographs by context names the context model and its
table (manifest `homographs`): each wordid of a homograph -> that bundle's pronunciation of it.

Torch-free and server-free.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from attnserve.bundle.normalization import normalizer

NORMALIZATION = "context-words"  # the context model's source_normalization (normalization.py)
# A word (letters or digits, inner apostrophes and hyphens kept) or one other non-space character.
_TOKEN = re.compile(r"\w+(?:['\u2019-]\w+)*|[^\w\s]")


def marker(homograph: str) -> str:
    """The token that stands for the homograph in its context: one symbol per homograph."""
    return f"[{homograph.lower()}]"


CAPITAL = "^"  # after the marker where the homograph is written with a capital (August, Polish, Job)


def context_source(text: str, start: int, end: int, window: int) -> str:
    """The context model's source for the homograph at text[start:end]: up to `window` tokens on each side
    (words and punctuation, in the context-words normalization, which folds case), the homograph as its
    marker, followed by CAPITAL where it begins with a capital letter."""
    word = text[start:end]
    left = _TOKEN.findall(text[:start])[-window:] if window else []
    right = _TOKEN.findall(text[end:])[:window]
    mark = [marker(word), CAPITAL] if word[:1].isupper() else [marker(word)]
    return normalizer(NORMALIZATION)(" ".join([*left, *mark, *right]))


@dataclass(frozen=True)
class ContextSpec:
    """`context` of a context model's manifest: how many tokens on each side of the homograph it reads."""
    window: int
    extra: Mapping[str, Any] = field(default_factory=dict)  # trained_on, held_out


@dataclass(frozen=True)
class HomographsSpec:
    """`homographs` of a G2P bundle's manifest: the context model (a served model's name) and the table
    file (`homograph<TAB>wordid<TAB>pronunciation`, the pronunciation in the bundle's output symbols and
    one of the lexicon's pronunciations of the homograph)."""
    model: str
    file: str
    extra: Mapping[str, Any] = field(default_factory=dict)  # made_by, checked


Table = dict[str, dict[str, str]]  # homograph (lower case) -> wordid -> pronunciation


def read_table(path: Path) -> Table:
    """A homographs table; ValueError naming file:line for a bad line or a wordid listed twice."""
    out: Table = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 3 or not all(f.strip() for f in fields):
            raise ValueError(f"{path}:{n}: expected homograph<TAB>wordid<TAB>pronunciation, got {line!r}")
        word, wordid, pron = (f.strip() for f in fields)
        readings = out.setdefault(word.lower(), {})
        if wordid in readings:
            raise ValueError(f"{path}:{n}: wordid {wordid!r} is listed twice")
        readings[wordid] = pron
    return out
