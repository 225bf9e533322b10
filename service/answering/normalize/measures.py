"""Measures read by WeTextProcessing's English grammars (the `wetext` package: its FSTs ship in the
wheel, read by kaldifst; nothing is downloaded): a number and the unit after it (`12kg`, `5 km/h`,
`2°C`, `41,459.00 km³`). wetext knows far more units than a table here would; it is given only the
chunk a pattern found, never the sentence, so its cost is paid only where a number meets a unit,
and the chunk is taken only where wetext read the unit (`12 apples` is left to the scanner)."""
from __future__ import annotations

import re
from functools import lru_cache

NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:[ \t]\d+/\d+)?"
UNIT = r"(?:[A-Za-zµμ°º]+[23²³]?|/[A-Za-z]+)(?:/[A-Za-z]+[23²³]?)?"
MEASURE = re.compile(rf"(?:(?<![\w.,/-])-|(?<![\w.,/-]))(?:{NUMBER})(?:[ \t]?[-–][ \t]?(?:{NUMBER}))?(?:[ \t](?:thousand|million|billion))?"
                     rf"(?:[ \t]?-?[ \t]?)(?P<unit>{UNIT})(?![\w%/])")


# after a space, a word that is no unit: wetext is not asked (a unit written as a word, "metres", reads as written)
WORDS = frozenset("a an and are as at be by do for from go he if in into is it me my no of on or our per so than "
                  "that the then to up us was we with".split())
ABBREVIATIONS = frozenset(("mbps", "kbps", "gbps", "kmph", "sqft", "msec", "usec"))


def _unit_like(unit: str, spaced: bool) -> bool:
    """Whether wetext may know `unit`: attached to its number (12kg), short and no common word, or signs."""
    if not spaced or not unit.isalpha() or unit.lower() in ABBREVIATIONS:
        return True
    return len(unit) <= 3 and unit.lower() not in WORDS


@lru_cache(maxsize=1)
def _normalizer():
    from wetext import Normalizer
    return Normalizer(lang="en", operator="tn")


def load() -> None:
    """Read wetext's English grammars (once a process; a fraction of a second)."""
    _normalizer().normalize("1 kg")


@lru_cache(maxsize=4096)
def _read(chunk: str) -> str:
    """wetext's reading, "" where its grammars find no path (kaldifst asserts on some odd input): the
    chunk is then left to the scanner, as one whose unit wetext does not know."""
    try:
        return _normalizer().normalize(chunk)
    except (AssertionError, RuntimeError):
        return ""


def measure(m: re.Match) -> str | None:
    """What wetext reads the chunk as, None where it left the unit as written (not a unit it knows)."""
    unit = m.group("unit")
    if unit.lower() in ("s", "st", "nd", "rd", "th", "am", "pm", "a", "i", "x") or \
            not _unit_like(unit, m.string[m.start("unit") - 1].isspace()):
        return None
    spoken = _read(m.group())
    if unit == "m" or unit.startswith("m/"):  # wetext reads a lone m as minutes; a number's m is metres
        spoken = re.sub(r"\bminute(s?)\b", r"meter\1", spoken, count=1)
    last = spoken.split()[-1] if spoken.split() else ""
    if not spoken or last == unit.lstrip("/") or any(c.isdigit() for c in spoken):
        return None
    # wetext reads a decimal's zeros as "oh" (2.05 kg): the scanner's numbers say "zero"
    return re.sub(r"(?<=point)((?: \w+)*)", lambda d: re.sub(r"\boh\b", "zero", d.group(1)), spoken)
