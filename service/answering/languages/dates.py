"""Numeric dates read in the language's order with its month names, from CLDR through babel (the
`languages` extra): 05.03.2024 in Romanian is cinci martie două mii douăzeci și patru, 2024. 03. 05.
in Hungarian kétezer-huszonnégy március öt, 5/3/2024 in Greek πέντε Μαρτίου δύο χιλιάδες είκοσι τέσσερα.

The order is that of the language's short date pattern (CLDR: dd.MM.y, y. MM. dd., d/M/yy), the
month its name as a date writes it (Greek's genitive Μαρτίου), the day and year its number words. A
date is only taken with a four-digit year and a day and month that exist, so that a decimal or a
version number is never read as one; ISO dates (2024-03-05) in every language. Without babel, or for
a language CLDR lacks, the parts are read as numbers, as before. English and French dates are the
shared reader's (text.py).
"""
from __future__ import annotations

import re

from service.answering import numbers
from service.answering.text import NUMBER, Spoken, Token
from service.answering.textrules import TextRules

try:
    from babel.core import UnknownLocaleError
    from babel.dates import get_date_format, get_month_names
except ImportError:  # pragma: no cover - exercised where the languages extra is not installed
    get_date_format = None

PARTS = {"d": r"0?[1-9]|[12]\d|3[01]", "M": r"0?[1-9]|1[0-2]", "y": r"\d{4}"}  # a day and month that exist
SEPARATOR = r"[./\-]\s?"
LOCALES = {"sr": "sr_Latn"}  # num2words's language -> babel's locale, where the served models' script differs


class Dates:
    """A language's own reading (text.OwnReading) of its numeric dates."""

    def __init__(self, rules: TextRules, order: str, months: list[str]):
        self.rules, self.order, self.months = rules, order, months
        self.forms = [re.compile(_form("yMd", "-", True)), re.compile(_form(order, SEPARATOR, True))]
        self.pattern = _form("yMd", "-", False) + "|" + _form(order, SEPARATOR, False)

    @classmethod
    def of(cls, rules: TextRules) -> Dates | None:
        """The dates of the rules' language; None without babel, number words or a CLDR locale."""
        if get_date_format is None or rules.num2words is None:
            return None
        locale = LOCALES.get(rules.num2words, rules.num2words)
        try:
            pattern = get_date_format("short", locale=locale).pattern
            months = get_month_names("wide", "format", locale=locale)
        except (UnknownLocaleError, ValueError):
            return None
        order = "".join(dict.fromkeys(c for c in re.sub(r"'[^']*'", "", pattern) if c in "dMy"))
        return cls(rules, order, [months[m] for m in range(1, 13)]) if sorted(order) == ["M", "d", "y"] else None

    def tokens(self, text: str, match: re.Match) -> list[Token]:
        written, start, end = match.group(), match.start(), match.end()
        iso = self.forms[0].fullmatch(written)
        if iso is not None:
            year, month, day = iso.groups()
            order = "ymd" if self.order[0] == "y" else "dmy"
        else:
            values = dict(zip(self.order, self.forms[1].fullmatch(written).groups()))
            year, month, day, order = values["y"], values["M"], values["d"], self.order.lower()
        said = {"y": numbers.cardinal(self.rules, year), "d": numbers.cardinal(self.rules, str(int(day))),
                "m": re.sub(r"\d+", lambda n: numbers.cardinal(self.rules, n.group()), self.months[int(month) - 1])}
        spoken = " ".join(said[c] for c in order)
        rule = self.rules.words  # a word said by a rule of the language (Romanian și in a year)
        return [Token(written, NUMBER, start, end, spoken,
                      tuple(Spoken(w, start, end, said=rule.get(w)) for w in re.split(r"[\s\-]+", spoken) if w))]


def _form(order: str, separator: str, groups: bool) -> str:
    """A date's pattern in an order (its parts captured, or not: the scanner's own takes no groups).
    A final full stop (2024. 03. 05.) is left as punctuation: it may end the sentence too."""
    return separator.join(f"({PARTS[c]})" if groups else f"(?:{PARTS[c]})" for c in order) + r"(?!\d)"
