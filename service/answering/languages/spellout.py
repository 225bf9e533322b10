"""Number words for languages num2words lacks, from the Unicode CLDR's rule-based number formats
(the unicode-rbnf package, a base dependency): Bulgarian, Greek, Armenian, Georgian, Khmer, Maltese,
and Korean's native numbers (세 개, 스무 마리) beside num2words's Sino-Korean ones.

Each such language is registered in num2words's own table of converters under its ISO 639-1 code,
never over a converter num2words has, so that numbers.py reads it as any num2words language. What
CLDR has no rules for (Adyghe) stays unread, flagged, as before.
"""
from __future__ import annotations

from functools import lru_cache

from num2words import CONVERTER_CLASSES

from unicode_rbnf import FormatPurpose, RbnfEngine

# Languages whose numbers only CLDR reads here (num2words has none of them)
CLDR_ONLY = ("bg", "el", "hy", "ka", "km", "mt")
# What a CLDR word may hold that is no letter of the language: Khmer writes its number words joined by
# zero-width spaces (each is a word here); Maltese writes a final glottal stop as a modifier apostrophe
# (disaʼ), which no served model reads and which the letters before it carry.
CLEAN = str.maketrans({"\u200b": " ", "\u00ad": None, "\u02bc": None})


@lru_cache(maxsize=None)
def _engine(language: str):
    return RbnfEngine.for_language(language)


def spell(language: str, number: int, ruleset: str | None = None, purpose=None) -> str:
    """CLDR's words for an integer: a named ruleset's, else the purpose's (cardinal by default)."""
    result = _engine(language).format_number(number, purpose=purpose or FormatPurpose.CARDINAL)
    text = result.text_by_ruleset[ruleset] if ruleset is not None else result.text
    return " ".join(text.translate(CLEAN).split())


def native_korean(number: int) -> str:
    """A count before a native Korean counter: 세 (3개), 스무 (20마리), 백스물세 (123개)."""
    return spell("ko", number, "spellout-cardinal-native-attributive")


class Converter:
    """The part of a num2words converter numbers.py calls, answered by CLDR's rules."""

    CURRENCY_FORMS: dict = {}  # no currency names: numbers.money() takes them from the language's data file

    def __init__(self, language: str):
        self.language = language

    def str_to_number(self, value: str) -> int:
        return int(value)

    def to_cardinal(self, number: int) -> str:
        return spell(self.language, int(number))

    def to_ordinal(self, number: int) -> str:
        return spell(self.language, int(number), purpose=FormatPurpose.ORDINAL)

    def to_year(self, number: int) -> str:
        return spell(self.language, int(number), purpose=FormatPurpose.YEAR)

    def pluralize(self, number: int, forms) -> str:
        return forms[0]


def register() -> tuple[str, ...]:
    """Adds the CLDR-only languages to num2words's converters (once; never over one of its own):
    the languages now read."""
    for language in CLDR_ONLY:
        CONVERTER_CLASSES.setdefault(language, Converter(language))
    return CLDR_ONLY


REGISTERED = register()
