"""Korean numbers as they are said: native numbers before a native counter (3개 세 개, 2명 두 명,
20마리 스무 마리, 1살 한 살, 3시 세 시), Sino-Korean elsewhere (3분 삼 분, 2024년 이천이십사 년),
as num2words reads them; clock times with native hours and Sino-Korean minutes (10:30 열 시 삼십 분);
money (₩5,000 오천 원, $5.50 오 달러 오십 센트); the months whose number is said short (6월 유월, 10월
시월).

Native numbers come from CLDR's rules (spellout.native_korean, unicode-rbnf); past NATIVE_UP_TO a
number is read Sino-Korean, as Korean says large counts.
"""
from __future__ import annotations

import re

from num2words import num2words

from service.answering.languages import spellout
from service.answering.text import NUMBER, Spoken, Token
from service.answering.textrules import TextRules

# Counters that take a native number: things (개), people (명, 사람), age (살), animals (마리), hours of
# the clock (시) and hours counted (시간), times (번), cups (잔), bottles (병), books (권), sheets (장),
# machines (대), trees (그루), pairs (켤레), clothes (벌), flowers (송이), ships (척), houses (채),
# months counted (달), kinds (가지), places (곳, 군데). Minutes (분), days (일), months (월), years (년),
# money (원) and numbers read as labels (번지, 층, 호) take Sino-Korean ones: not here.
NATIVE_COUNTERS = ("개", "명", "사람", "살", "마리", "시간", "시", "번", "잔", "병", "권", "장", "대", "그루", "켤레", "벌",
                   "송이", "척", "채", "달", "가지", "곳", "군데")
NATIVE_UP_TO = 99  # past 99 a count is said Sino-Korean (123개 백이십삼 개), as most speakers say it
COUNTED = r"\d+(?=\s?(?:" + "|".join(NATIVE_COUNTERS) + "))"
CLOCK = re.compile(r"([01]?\d|2[0-4]):([0-5]\d)(?!\d)")
AMOUNT = r"\d{1,3}(?:,\d{3})+(?!\d)|\d+(?:\.\d+)?"
MONEY = re.compile(rf"([₩$])\s?({AMOUNT})")
CURRENCIES = {"₩": ("원", None), "$": ("달러", "센트")}  # sign -> (unit, hundredth)
MONTHS = {6: "유", 10: "시"}  # 유월 and 시월 drop the last consonant of 육 and 십


class Korean:
    """A number before a native counter, and a clock time; every other number is the shared reader's."""

    pattern = (COUNTED + r"|(?:[01]?\d|2[0-4]):[0-5]\d(?!\d)"  # CLOCK's, without its groups
               + rf"|[₩$]\s?(?:{AMOUNT})|(?<!\d)(?:6|10)(?=월)")

    def __init__(self, rules: TextRules):
        self.rules = rules

    def tokens(self, text: str, match: re.Match) -> list[Token]:
        written, start, end = match.group(), match.start(), match.end()
        clock = CLOCK.fullmatch(written)
        money = MONEY.fullmatch(written)
        if clock is not None:
            hours, minutes = int(clock.group(1)), int(clock.group(2))
            spoken = f"{self.native(hours)} 시" + (f" {self.sino(minutes)} 분" if minutes else "")
        elif money is not None:
            unit, hundredth = CURRENCIES[money.group(1)]
            whole, _, cents = money.group(2).replace(",", "").partition(".")
            hundredths = int(cents[:2].ljust(2, "0")) if cents else 0
            if hundredths and hundredth is None:  # a currency without hundredths: the decimal, then the unit
                spoken = f"{self.sino(int(whole))} 점 {' '.join(self.sino(int(d)) for d in cents)} {unit}"
            else:
                spoken = f"{self.sino(int(whole))} {unit}"
                spoken += f" {self.sino(hundredths)} {hundredth}" if hundredths else ""
        elif written.isdigit() and int(written) in MONTHS and text.startswith("월", end):
            spoken = MONTHS[int(written)]
        else:
            spoken = self.native(int(written))
        return [Token(written, NUMBER, start, end, spoken, tuple(Spoken(w, start, end) for w in spoken.split()))]

    def native(self, number: int) -> str:
        return spellout.native_korean(number) if 0 < number <= NATIVE_UP_TO else self.sino(number)

    def sino(self, number: int) -> str:
        return " ".join(num2words(number, lang=self.rules.num2words or "ko").split())
