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


@lru_cache(maxsize=1)
def _normalizer():
    from wetext import Normalizer
    return Normalizer(lang="en", operator="tn")


def measure(m: re.Match) -> str | None:
    """What wetext reads the chunk as, None where it left the unit as written (not a unit it knows)."""
    unit = m.group("unit")
    if unit[0].isdigit() or unit.lower() in ("s", "st", "nd", "rd", "th", "am", "pm", "a", "i", "x"):
        return None
    spoken = _normalizer().normalize(m.group())
    last = spoken.split()[-1] if spoken.split() else ""
    if not spoken or last == unit.lstrip("/") or any(c.isdigit() for c in spoken):
        return None
    # wetext reads a decimal's zeros as "oh" (2.05 kg): the scanner's numbers say "zero"
    return re.sub(r"(?<=point)((?: \w+)*)", lambda d: re.sub(r"\boh\b", "zero", d.group(1)), spoken)
