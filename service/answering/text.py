"""Running text -> tokens, each with its characters in the text and the words it is read as.

    "In 1066, 3 kings met on the 14th."
    -> In (word) | 1066 (number: ten sixty-six) | , (punctuation) | 3 (number: three) | ... |
       14th (number: fourteenth) | . (punctuation)

Every character of the text but whitespace is in exactly one token, with its span [start, end): a
character that cannot be read is a token too, flagged (`unread`), never dropped. Numbers (cardinals,
ordinals, years, decades, decimals with the language's mark, negatives, currency, clock times),
abbreviations and titles (the language's data file, textrules.py), initials, acronyms (spelled or
read: the lexicon, then a rule), inner apostrophes (don't, Smith's) and hyphens (well-known: two
words and the hyphen) are read in the model's language. An elided clitic the language's rules list (French j'ai, qu'il) is a
token of its own, the letters and the apostrophe, read by the rule's pronunciation; the word it
leans on is read as any word. In English and French the language's normalizer (normalize/) first
finds the chunks one class reads whole (a date, an amount, a telephone number, a URL): each is a
token whose words point at the characters they read, and the scanner reads only between them, so a
text with nothing to normalize reads as without it. Pure: no model, no I/O; what the model can
read comes in as values (Script), and the words its lexicon has as a container of words.
"""
from __future__ import annotations

import re
import sys
import unicodedata
from dataclasses import replace
from typing import Container, Protocol

from service.answering import normalize, numbers
from service.answering.textrules import TextRules
from service.answering.tokens import Script, Spoken, Token, checked, respelled, ruled

WORD, NUMBER, ABBREVIATION, PUNCTUATION, SYMBOL = "word", "number", "abbreviation", "punctuation", "symbol"
KINDS = (WORD, NUMBER, ABBREVIATION, PUNCTUATION, SYMBOL)
CLOSING = set("\"')]}\u201d\u2019\u00bb")  # what may follow a sentence's last full stop
SHOUTING = 0.7  # a text whose words are mostly capitals is shouted, not made of acronyms
# English syllable onsets an acronym may start with and still be read as a word (NATO, SCUBA)
ONSETS = {"bl", "br", "ch", "cl", "cr", "dr", "fl", "fr", "gl", "gr", "kn", "ph", "pl", "pr", "qu", "sc", "sh", "sk",
          "sl", "sm", "sn", "sp", "st", "sw", "th", "tr", "tw", "wh", "wr"}


def _mark_class() -> str:
    """Every combining mark (Unicode M*) as a character class: a letter's accent is part of its word."""
    ranges, start, prev = [], None, None
    for cp in range(0x300, sys.maxunicode + 1):
        if unicodedata.category(chr(cp)).startswith("M"):
            if start is None or cp != prev + 1:
                if start is not None:
                    ranges.append((start, prev))
                start = cp
            prev = cp
    ranges.append((start, prev))
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)


MARKS = _mark_class()
LETTER = rf"(?:[^\W\d_][{MARKS}]*)"


NUMBER_GROUPS = frozenset(("camount", "cur", "camount2", "cur2", "hours", "minutes", "meridiem", "decade", "ordinal",
                           "negative", "number"))  # the scanner's groups a number's match may end in


def _scanner(rules: TextRules, own: str | None = None) -> re.Pattern:
    dec, thou = re.escape(rules.decimal), "[" + re.escape(rules.thousands) + "]"
    num = rf"\d{{1,3}}(?:{thou}\d{{3}})+(?!\d)(?:{dec}\d+)?|\d+(?:{dec}\d+)?"
    alternatives = []
    if rules.currencies:
        signs = "|".join(re.escape(s) for s in sorted(rules.currencies, key=len, reverse=True))
        alternatives += [rf"(?P<cur>{signs})\s?(?P<camount>{num})", rf"(?P<camount2>{num})\s?(?P<cur2>{signs})"]
    alternatives.append(r"(?P<hours>[01]?\d|2[0-4]):(?P<minutes>[0-5]\d)(?!\d)"
                        r"(?:\s?(?P<meridiem>(?i:[ap]\.m\.|[ap]m))(?!\w))?")
    if rules.english:
        alternatives.append(r"(?P<decade>['\u2019]\d{2}|\d{2}|\d{4})s(?!\w)")
    if rules.ordinals:
        suffixes = "|".join(re.escape(s) for s in rules.ordinals)
        alternatives.append(rf"(?P<ordinal>\d+)(?i:{suffixes})(?!\w)")
    alternatives.append(rf"(?P<negative>(?<![\w.,])[-\u2212])?(?P<number>{num})")
    # Every number's reading starts with a digit, a currency sign, an apostrophe ('90s) or a minus: one
    # look at the character first, so that at a letter (most positions) none of them is tried.
    starts = re.escape("".join(sorted({sign[0] for sign in rules.currencies})) + "'\u2019-\u2212")
    alternatives = [rf"(?=[\d{starts}])(?:" + "|".join(alternatives) + ")"]
    if own is not None:  # a language's own reading (OwnReading) comes before every shared one
        alternatives.insert(0, rf"(?P<own>{own})")
    if rules.abbreviations:
        forms = sorted(rules.abbreviations, key=len, reverse=True)
        # one lookbehind before the forms, not one per form: each form then fails on its first letter
        alternatives.append(r"(?<!\w)(?P<abbreviation>" + "|".join(
            re.escape(f) + (r"(?!\w)" if f[-1].isalnum() else "") for f in forms) + ")")
    alternatives += [rf"(?P<initial>{LETTER})\.(?!\w)",
                     rf"(?P<word>{LETTER}+(?:['\u2019]{LETTER}+)*)",
                     r"(?P<ellipsis>\.{2,}|\u2026)", r"(?P<other>\S)"]
    return re.compile("|".join(alternatives))


class OwnReading(Protocol):
    """What a language reads its own way (service/answering/languages/): a pattern tried before the
    shared ones at every position, and the tokens of a match of it, each traced to its characters."""

    pattern: str  # a regular expression with no named groups

    def tokens(self, text: str, match: re.Match) -> list[Token]: ...


class TextReader:
    """Reads texts by one language's rules into tokens: read() is a function of the rules, the text,
    what the model reads (a Script; None: every character) and the words the lexicon has (an
    acronym it has is read as a word). The scanner is the rules' own, compiled once; a language's
    own reading, if it has one, is tried first."""

    def __init__(self, rules: TextRules, own: OwnReading | None = None):
        self.rules = rules
        self.own = own
        self._script: Script | None = None  # the last Script read with, and whether ruled() is needed for it
        self._unreadable = False
        self.scanner = _scanner(rules, own.pattern if own is not None else None)
        self.normalizer = normalize.for_rules(rules)

    def read(self, text: str, script: Script | None = None, known: Container[str] = frozenset()) -> list[Token]:
        chunks = self.normalizer.chunks(text) if self.normalizer is not None else []
        if chunks:  # the scanner reads between the chunks (normalize/), each chunk a token of its own
            shouting = self._shouting(list(self.scanner.finditer(text)))  # the whole text's, as without chunks
            tokens, at = [], 0
            for chunk in chunks:
                tokens += self._read(text, at, chunk.start, known, shouting)
                tokens += self._chunk(text, chunk)
                at = chunk.end
            tokens += self._read(text, at, len(text), known, shouting)
        else:
            tokens = self._read(text, 0, len(text), known)
        if script is None:
            return tokens
        if self.rules.words and self._unreadable_rules(script):  # before the spellings: è, not e
            tokens = [ruled(t, script, self.rules.words) for t in tokens]
        if self.rules.spellings:
            tokens = [respelled(t, script, self.rules.spellings) for t in tokens]
        return [checked(t, script, known) for t in tokens]

    @staticmethod
    def _shouting(matches: list[re.Match]) -> bool:
        words = [m.group() for m in matches if m.lastgroup == "word"]
        if len(words) < 3:
            return False
        letters = "".join(words)
        return sum(map(str.isupper, letters)) >= SHOUTING * sum(map(str.isalpha, letters))

    def _read(self, text: str, start: int, end: int, known: Container[str], shouting: bool | None = None) -> list[Token]:
        matches = list(self.scanner.finditer(text, start, end))
        if shouting is None:
            shouting = self._shouting(matches)
        tokens: list[Token] = []
        last = len(matches) - 1
        for i, m in enumerate(matches):
            if m.lastgroup == "word":  # most tokens: no neighbours needed
                tokens += self._elided(m.group(), m.start(), shouting, known)
            elif m.lastgroup == "own":
                tokens += self.own.tokens(text, m)
            else:
                tokens += self._token(text, m, matches[i - 1] if i else None, matches[i + 1] if i < last else None,
                                      shouting, known)
        return tokens

    def _chunk(self, text: str, chunk: normalize.Chunk) -> list[Token]:
        written = text[chunk.start:chunk.end]
        words: list[Spoken] = []
        for w in chunk.words:
            if w.text.isalpha() and w.text.isupper():  # PM, EST, WWW: shown as written, said letter by letter
                words += [Spoken(s.text, w.start, w.end, None, s.said) for s in self._spelled(w.text, w.start)[1]]
            else:  # a word read as written (Elm, Chapter) keeps its letters' places, for its attention
                same = w.text == text[w.start:w.end]
                words.append(Spoken(w.text, w.start, w.end, tuple(range(w.start, w.end)) if same else None))
        kind = NUMBER if any(c.isdigit() for c in written) else ABBREVIATION
        token = Token(written, kind, chunk.start, chunk.end, normalize.shown(chunk.words), tuple(words))
        return self._sentence_end(text, token)

    def _token(self, text: str, m: re.Match, before, after, shouting: bool, known: Container[str]) -> list[Token]:
        kind, start, end, written = m.lastgroup, m.start(), m.end(), m.group()
        if kind in NUMBER_GROUPS:
            return self._number(text, m)
        if kind == "abbreviation":
            return self._abbreviation(text, m, before, after, known)
        if kind == "initial":
            letter = m.group("initial")
            if not letter.isupper():
                return [self._word(letter, start, shouting, known), Token(".", PUNCTUATION, end - 1, end)]
            return self._sentence_end(text, Token(written, ABBREVIATION, start, end, *self._spelled(letter, start)))
        if kind == "word":
            return self._elided(written, start, shouting, known)
        if kind == "ellipsis":
            return [Token(written, PUNCTUATION, start, end)]
        if written in self.rules.symbols:  # `other`: one character
            spoken = self.rules.symbols[written]
            return [Token(written, SYMBOL, start, end, spoken, tuple(Spoken(w, start, end) for w in spoken.split()))]
        if unicodedata.category(written).startswith("P"):
            return [Token(written, PUNCTUATION, start, end)]
        return [Token(written, SYMBOL, start, end, unread=(start,))]

    def _number(self, text: str, m: re.Match) -> list[Token]:
        rules, g = self.rules, m.groupdict()
        start, end, written = m.start(), m.end(), m.group()
        if rules.num2words is None:  # no number words in this language: flagged, not guessed
            return [Token(written, NUMBER, start, end, unread=tuple(i for i in range(start, end) if not text[i].isspace()))]
        if g["hours"] is not None:
            spoken = numbers.clock(rules, g["hours"], g["minutes"], g["meridiem"])
        elif g.get("decade") is not None:
            spoken = numbers.decade(rules, g["decade"].lstrip("'\u2019"))
        elif g.get("ordinal") is not None:
            spoken = numbers.ordinal(rules, g["ordinal"])
        else:
            amount = g["number"] or g.get("camount") or g.get("camount2")
            integer, _, fraction = amount.partition(rules.decimal) if rules.decimal in amount else (amount, "", None)
            integer = re.sub("[" + re.escape(rules.thousands) + "]", "", integer)
            code = rules.currencies.get(g.get("cur") or g.get("cur2") or "")
            spoken = (numbers.money(rules, code, integer, fraction) if code
                      else numbers.number(rules, integer, fraction, bool(g["negative"])))
        said = rules.words  # a number word read by a rule of the language (Romanian și)
        token = Token(written, NUMBER, start, end, spoken,
                      tuple(Spoken(w, start, end, said=said.get(w)) for w in re.split(r"[\s\-]+", spoken) if w))
        return self._sentence_end(text, token) if written.endswith(".") else [token]

    def _abbreviation(self, text: str, m: re.Match, before, after, known: Container[str]) -> list[Token]:
        start, end, written = m.start(), m.end(), m.group()
        context = {"": True,
                   "before_capital": after is not None and after.lastgroup == "word" and after.group()[0].isupper(),
                   "after_capital": before is not None and before.lastgroup == "word" and before.group()[0].isupper(),
                   "before_number": after is not None and after.group()[:1].isdigit(),
                   "after_number": before is not None and before.group()[-1:].isdigit()}
        for spoken, when in self.rules.abbreviations[written]:
            if context[when]:
                words = tuple(Spoken(w, start, end) for w in spoken.split())
                return self._sentence_end(text, Token(written, ABBREVIATION, start, end, spoken, words))
        if written.endswith("."):  # no reading fits here: a word and its full stop
            return [self._word(written[:-1], start, False, known), Token(".", PUNCTUATION, end - 1, end)]
        return [self._word(written, start, False, known)]

    def _sentence_end(self, text: str, token: Token) -> list[Token]:
        """An abbreviation's full stop that also ends the text is the text's full stop as well: it
        is kept as punctuation (a reader of the output must see the sentence end)."""
        if not token.text.endswith(".") or any(not c.isspace() and c not in CLOSING for c in text[token.end:]):
            return [token]
        cut = Token(token.text[:-1], token.kind, token.start, token.end - 1, token.spoken,
                    tuple(Spoken(w.text, w.start, min(w.end, token.end - 1), w.letters) for w in token.words))
        return [cut, Token(".", PUNCTUATION, token.end - 1, token.end)]

    def _elided(self, written: str, start: int, shouting: bool, known: Container[str]) -> list[Token]:
        """A word, after the elided clitics it starts with (French qu'aujourd'hui: qu', then the rest):
        each clitic a token of its letters and apostrophe, read by the rule's pronunciation."""
        elisions, out = self.rules.elisions, []
        while elisions:
            cut = min((i for i in (written.find("'"), written.find("\u2019")) if i > 0), default=-1)
            said = elisions.get(written[:cut].lower() + "'") if 0 < cut < len(written) - 1 else None
            if said is None:
                break
            clitic = written[:cut + 1]
            out.append(Token(clitic, WORD, start, start + cut + 1, clitic,
                             (Spoken(clitic.lower(), start, start + cut + 1, tuple(range(start, start + cut + 1)), said),)))
            written, start = written[cut + 1:], start + cut + 1
        out.append(self._word(written, start, shouting, known))
        return out

    def _word(self, written: str, start: int, shouting: bool, known: Container[str]) -> Token:
        end = start + len(written)
        plain = written.replace("\u2019", "'")
        if not shouting and len(plain) >= 2 and plain.isalpha() and plain.isupper():  # an acronym
            if len(plain) == 2 or not (plain in known or self._pronounceable(plain)):
                return Token(written, ABBREVIATION, start, end, *self._spelled(plain, start))
            return Token(written, ABBREVIATION, start, end, plain.lower(),
                         (Spoken(plain.lower(), start, end, tuple(range(start, end))),))
        said = self.rules.words.get(plain.lower()) if self.rules.words else None
        if said is not None and plain.lower() in known:  # the lexicon's reading comes first
            said = None
        return Token(written, WORD, start, end, plain, (Spoken(plain, start, end, tuple(range(start, end)), said),))

    def _spelled(self, letters: str, start: int) -> tuple[str, tuple[Spoken, ...]]:
        words = []
        for i, c in enumerate(letters):
            name = self.rules.letters.get(c.lower(), c.lower())
            # a letter's name the language reads by rule (French `a`, which the model answers with nothing)
            words += [Spoken(w, start + i, start + i + 1, tuple([start + i] * len(w)) if w == c.lower() else None,
                             self.rules.words.get(w) if self.rules.words else None) for w in name.split()]
        return letters, tuple(words)  # shown as written (USA), said letter by letter

    def _pronounceable(self, word: str) -> bool:
        """Whether an acronym the lexicon lacks reads as a word: four letters or more with a vowel,
        and in English no three consonants in a row and a syllable's onset first (NATO, not NTSB)."""
        w = word.lower()
        if len(w) < 4 or not any(c in "aeiou" for c in w):
            return False
        if not self.rules.english:
            return True
        runs = re.findall(r"[^aeiouy]+", w)
        onset = re.match(r"[^aeiou]*", w).group()
        return all(len(r) < 3 for r in runs) and (len(onset) <= 1 or onset in ONSETS)

    def _unreadable_rules(self, script: Script) -> bool:
        """Whether a word a `word` line says has letters this model cannot read (remembered for the
        last Script: an answerer reads with one)."""
        if script is not self._script:
            self._script = script
            self._unreadable = any(script.unreadable(w) for w in self.rules.words)
        return self._unreadable

def spoken_text(text: str, tokens: list[Token]) -> str:
    """The text as it is read: each token's spoken form, punctuation in place, the text's own spacing."""
    return joined(text, tokens, [t.spoken if t.words else t.text for t in tokens], " ")


def joined(text: str, tokens: list[Token], parts: list[str], separator: str) -> str:
    """Tokens' parts in order: `separator` where the text has whitespace between two tokens or two
    words meet, nothing where punctuation touches its neighbour in the text."""
    out = []
    for i, (token, part) in enumerate(zip(tokens, parts)):
        if i:
            prev = tokens[i - 1]
            gap = text[prev.end:token.start]
            touching = not gap and (prev.kind == PUNCTUATION or token.kind == PUNCTUATION or not prev.words or not token.words)
            out.append("" if touching else separator)
        out.append(part)
    return "".join(out)
