"""The reader's data and what a model can read of it: a token of running text and the words it is read
as (each traced to its characters), a model's Script (what it reads, as values), and the passes that
fit a text's tokens to a model once text.py has read them: a `word` line's pronunciation where the
model cannot read the word, a letter the model lacks respelled, and what is still unreadable flagged
(never dropped). Pure functions of their inputs.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Container, Mapping

UNREADABLE_ENTRIES = 50000  # words whose readability a Script remembers (emptied whole when full)


@dataclass(frozen=True)
class Spoken:
    """One word to pronounce, and the characters of the text it reads."""

    text: str  # as read: "eighteen", "smith's"
    start: int
    end: int
    letters: tuple[int, ...] | None = None  # per character of `text` its index in the text; None: it reads [start, end) whole
    said: tuple[str, ...] | None = None  # its pronunciation in the model's symbols, given by a rule; None: answered


@dataclass(frozen=True)
class Token:
    text: str  # the characters of the text, as written
    kind: str  # one of text.KINDS (word, number, abbreviation, punctuation, symbol)
    start: int
    end: int
    spoken: str = ""  # what it is read as ("eighteen thirty-five"); "" for punctuation and what is unread
    words: tuple[Spoken, ...] = ()
    unread: tuple[int, ...] = ()  # positions in the text of characters that cannot be read (flagged)


@dataclass(frozen=True)
class Script:
    """What a model reads, as values: whether it reads characters (else whitespace-separated words),
    the symbols it has, and its own normalization and tokenization (pure functions of a word)."""

    chars: bool
    alphabet: frozenset[str]
    normalize: Callable[[str], str]
    tokenize: Callable[[str], list[str]]
    says: frozenset[str] | None = None  # the model's output symbols: a rule's pronunciation must be made of them
    # unreadable()'s answers by word: a pure function's, so equal Scripts may hold different ones
    _seen: dict[str, list[int]] = field(default_factory=dict, compare=False, repr=False)

    def unreadable(self, word: str) -> list[int]:
        """Positions in `word` of its characters the model cannot read (after its normalization)."""
        if not self.chars:
            tokens = self.tokenize(word)
            return [] if tokens and all(t in self.alphabet for t in tokens) else list(range(len(word)))
        seen = self._seen.get(word)
        if seen is None:
            alphabet = self.alphabet
            seen = [] if alphabet.issuperset(self.normalize(word)) else \
                [i for i, c in enumerate(word) if any(n not in alphabet for n in self.normalize(c))]
            if len(self._seen) >= UNREADABLE_ENTRIES:
                self._seen.clear()
            self._seen[word] = seen
        return seen


def ruled(token: Token, script: Script, words: Mapping[str, tuple[str, ...]]) -> Token:
    """A word a `word` line says that was left to the lexicon (which has it) is said by the line after
    all where the model cannot read its letters (Romanian și): unread, no answer would be given."""
    if not any(w.said is None and w.text.lower() in words for w in token.words):
        return token
    return replace(token, words=tuple(
        replace(w, said=words[w.text.lower()]) if w.said is None and w.text.lower() in words and
        script.unreadable(w.text) else w for w in token.words))

def respelled(token: Token, script: Script, spellings: Mapping[str, str]) -> Token:
    """Each letter the model lacks that the language's spelling lines map (Greek ς, which the task's
    words write σ) read as the letters they give, each traced to the letter it stands for; the
    upper-case letter too, which lower-casing would turn back into the letter the model lacks."""
    table = {k: v for c, v in spellings.items() if c not in script.alphabet for k in {c, c.upper()}}
    if not table or not any(c in table for w in token.words if w.said is None for c in w.text):
        return token
    words = []
    for w in token.words:
        if w.said is not None or not any(c in table for c in w.text):
            words.append(w)
            continue
        text = "".join(table.get(c, c) for c in w.text)
        letters = None if w.letters is None else tuple(
            i for c, i in zip(w.text, w.letters) for _ in range(len(table.get(c, c))))
        words.append(replace(w, text=text, letters=letters))
    return replace(token, words=tuple(words))


def checked(token: Token, script: Script, known: Container[str] = frozenset()) -> Token:
    """Flag what the model cannot read: a word's own characters where they are outside its
    alphabet, a derived word's (a number's, an abbreviation's) whole token. A word the lexicon
    has is read whatever its letters: the lexicon gives its pronunciation, the model only
    scores it (a letter it lacks is its unknown symbol there)."""
    if token.unread or not token.words:
        return token
    if script.says is not None and any(w.said is not None and not script.says.issuperset(w.said) for w in token.words):
        # a rule's pronunciation in symbols this model lacks: the word is read as written, as without the rule
        token = replace(token, words=tuple(replace(w, said=None) if w.said is not None and not
                                           script.says.issuperset(w.said) else w for w in token.words))
    unread: set[int] = set()
    for w in token.words:
        if w.said is not None:  # given by a rule, in the model's symbols
            continue
        bad = script.unreadable(w.text)
        if bad and w.text in known:
            continue
        if bad and w.letters is not None:
            unread.update(w.letters[i] for i in bad)
        elif bad:
            unread.update(i for i in range(token.start, token.end) if not token.text[i - token.start].isspace())
    if not unread:
        return token
    return replace(token, unread=tuple(sorted(unread)))
