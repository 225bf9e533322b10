"""A language's own reading of its text, where it has one (text.OwnReading), and the reader of its
rules with it: the one place the answerer gets a TextReader from."""
from __future__ import annotations

from service.answering.languages.dates import Dates
from service.answering.languages.ja import Japanese
from service.answering.languages.ko import Korean
from service.answering.text import OwnReading, TextReader
from service.answering.textrules import TextRules, base_language

SHARED = ("en", "fr")  # languages whose dates the shared reader reads (text.py)


def own_reading(rules: TextRules) -> OwnReading | None:
    base = base_language(rules.language)
    if base in ("ja", "jpn"):
        return Japanese()
    if base in ("ko", "kor"):
        return Korean(rules)
    if rules.num2words in SHARED:
        return None
    return Dates.of(rules)


def reader(rules: TextRules) -> TextReader:
    return TextReader(rules, own_reading(rules))
