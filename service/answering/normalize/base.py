"""The normalizers' common parts: a chunk of text and the words it is said as, each pointing at the
characters it reads, and the loop that finds chunks by a language's rules (__init__.py says more)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

from service.answering.textrules import TextRules


@dataclass(frozen=True)
class Said:
    """One word as said, and the characters [start, end) of the text it reads."""

    text: str
    start: int
    end: int
    hyphen: bool = False  # shown joined to the next word by a hyphen (twenty-five), said as two words


@dataclass(frozen=True)
class Chunk:
    """A span of the text [start, end) read by one class's rule as `words` (in order)."""

    start: int
    end: int
    cls: str  # the class that read it: date, money, measure, telephone, electronic, ...
    words: tuple[Said, ...]


def said(text: str, start: int, end: int) -> list[Said]:
    """Every word of `text` (spaces and hyphens between words) as reading [start, end)."""
    return [Said(w.group(1), start, end, w.group(2).startswith("-")) for w in re.finditer(r"([^\s\-]+)([\s\-]*)", text)]


def shown(words) -> str:
    """Words as shown: by spaces, or by a hyphen where the number's words have one."""
    return "".join(w.text + ("-" if w.hyphen else " ") for w in words).rstrip(" -")


WORDS_REMEMBERED = 20000  # numbers' words a normalizer keeps (num2words is the costliest part of a chunk)

# A rule: a pattern, and what a match is said as (None: the rule does not hold here after all).
Rule = tuple[re.Pattern, Callable[[re.Match], "list[Said] | None"], str]


class Normalizer:
    """Chunks found by rules in order: a match overlapping an earlier chunk is not taken. A text
    without one of `trigger`'s characters has none (no rule is tried)."""

    trigger: re.Pattern = re.compile(r"\d")
    needs: dict[str, re.Pattern] = {}  # class -> what a text must hold for its rules to be tried

    def __init__(self, rules: TextRules):
        self.rules = rules
        self._words: dict[tuple[str, str], str] = {}  # (how, digits) -> the words num2words said

    def remember(self, how: str, digits: str, say: Callable[[str], str]) -> str:
        """`say(digits)`, each (how, digits) asked of num2words once (emptied whole when full)."""
        key = (how, digits)
        spoken = self._words.get(key)
        if spoken is None:
            if len(self._words) >= WORDS_REMEMBERED:
                self._words.clear()
            spoken = self._words[key] = say(digits)
        return spoken

    def patterns(self) -> Iterable[Rule]:
        return ()

    def chunks(self, text: str) -> list[Chunk]:
        if not self.trigger.search(text):
            return []
        taken: list[Chunk] = []
        needs = self.needs
        for pattern, read, cls in self.patterns():
            if cls in needs and not needs[cls].search(text):  # a class's cheap look first
                continue
            for m in pattern.finditer(text):
                if any(m.start() < c.end and c.start < m.end() for c in taken):
                    continue
                words = read(m)
                if words:
                    taken.append(Chunk(m.start(), m.end(), cls, tuple(words)))
        taken += self.fallback(text, taken)
        return sorted(taken, key=lambda c: c.start)

    def fallback(self, text: str, taken: list[Chunk]) -> list[Chunk]:
        """Chunks found after the rules, outside what they took (English: wetext's)."""
        return []
