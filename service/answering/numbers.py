"""Numbers read aloud in a language: num2words says the words; what it does not do is here.

num2words reads cardinals, ordinals, years and currencies in many languages. By hand: decimals
keep every digit written (num2words reads 3.10 as "three point one"), an amount without cents is
not read with "zero cents", a currency num2words lacks takes its name from the data file, English
decades (1990s, '90s), clock times, and digit strings too long or zero-led to be one number.
"""
from __future__ import annotations

import re
from decimal import Decimal

from num2words import CONVERTER_CLASSES, num2words

from service.answering.textrules import TextRules

SCALED_AND = re.compile(r"\band (?=(?:\S+ )*?(?:thousand|million|billion|trillion|quadrillion|quintillion)\b)")
MAX_CARDINAL_DIGITS = 15  # longer digit strings (phone numbers, ids) are read digit by digit


def words(text: str) -> str:
    """num2words's text as words to say: its commas go ("one hundred, two" is one number)."""
    return " ".join(text.replace(",", " ").split())


def cardinal(rules: TextRules, digits: str) -> str:
    if len(digits) > 1 and digits.startswith("0") or len(digits) > MAX_CARDINAL_DIGITS:
        return digit_by_digit(rules, digits)
    spoken = words(num2words(int(digits), lang=rules.num2words))
    # English: "and" only in the last group (one hundred twenty-three thousand, four hundred and six)
    return re.sub(SCALED_AND, "", spoken) if rules.english else spoken


def digit_by_digit(rules: TextRules, digits: str) -> str:
    return " ".join(words(num2words(int(d), lang=rules.num2words)) for d in digits)


def ordinal(rules: TextRules, digits: str) -> str:
    return words(num2words(int(digits), lang=rules.num2words, to="ordinal"))


def year(rules: TextRules, digits: str) -> str:
    spoken = words(num2words(int(digits), lang=rules.num2words, to="year"))
    return spoken.replace(" and ", " ") if rules.english else spoken  # 2002: two thousand two


def is_year(digits: str) -> bool:
    """An English four-digit number read as a year (1066, 1835, 2019): no separator, 1000-2099."""
    return len(digits) == 4 and not digits.startswith("0") and 1000 <= int(digits) <= 2099


def number(rules: TextRules, integer: str, fraction: str | None, negative: bool) -> str:
    """A written number: the integer part (thousands marks removed), its fraction's digits."""
    if rules.english and fraction is None and not negative and is_year(integer):
        spoken = year(rules, integer)
    else:
        spoken = cardinal(rules, integer)
    if fraction is not None:
        spoken += f" {rules.point} " + digit_by_digit(rules, fraction)
    if negative:
        spoken = words(num2words(-1, lang=rules.num2words)).split()[0] + " " + spoken  # "minus", "moins"
    return spoken


def decade(rules: TextRules, digits: str) -> str:
    """1990s -> nineteen nineties, '90s / 90s -> nineties (English)."""
    spoken = (year(rules, digits) if len(digits) == 4 else cardinal(rules, digits)).split()
    last = spoken[-1]
    spoken[-1] = last[:-1] + "ies" if last.endswith("y") else last + "s"
    return " ".join(spoken)


def money(rules: TextRules, code: str, integer: str, fraction: str | None) -> str:
    """An amount in a currency: num2words's words where it knows the currency, else the data file's."""
    cents = int((fraction or "0")[:2].ljust(2, "0"))
    converter = CONVERTER_CLASSES[rules.num2words]
    forms = getattr(converter, "CURRENCY_FORMS", {}).get(code)
    if forms is not None and cents:
        return words(num2words(Decimal(f"{int(integer)}.{cents:02d}"), lang=rules.num2words, to="currency",
                               currency=code))
    whole = cardinal(rules, str(int(integer)))
    if forms is not None:
        return f"{whole} {converter.pluralize(int(integer), forms[0])}"
    singular, plural = rules.units.get(code, (code, code))
    spoken = f"{whole} {singular if int(integer) == 1 else plural}"
    return spoken + (f" {cardinal(rules, str(cents))}" if cents else "")


def clock(rules: TextRules, hours: str, minutes: str, meridiem: str | None) -> str:
    """10:30 -> ten thirty, 10:05 -> ten oh five, 10:00 -> ten o'clock; am/pm spelled (a m)."""
    spoken = cardinal(rules, str(int(hours)))
    m = int(minutes)
    if m == 0:
        spoken += f" {rules.times['oclock']}" if "oclock" in rules.times and not meridiem else ""
    elif m < 10 and "oh" in rules.times:
        spoken += f" {rules.times['oh']} {cardinal(rules, str(m))}"
    else:
        spoken += f" {cardinal(rules, str(m))}"
    if meridiem:
        spoken += " " + " ".join(rules.letters.get(c, c) for c in meridiem.lower() if c.isalpha())
    return spoken
