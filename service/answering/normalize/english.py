"""English normalization: rules for the classes whose reading is a matter of convention (dates in
the order written, amounts with their cents and scale, telephone numbers, clock times with zones,
fractions, addresses, URLs, roman numerals, serials) and WeTextProcessing's grammars (wetext.py) for
measures, whose units it knows. Numbers are num2words's (numbers.py).

Each rule's words point at the characters they read where the class splits cleanly (a date's
month, day and year; a telephone number's groups), else at the whole chunk.
"""
from __future__ import annotations

import re

from service.answering import numbers
from service.answering.normalize.base import Normalizer, Said, said
import service.answering.normalize.en_data as D
import service.answering.normalize.measures as measures

MONTH = "|".join(sorted((re.escape(m) for m in D.MONTH_FORMS), key=len, reverse=True))
SIGN = "|".join(re.escape(s) for s in sorted(D.SIGNS, key=len, reverse=True))
AMOUNT = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"
SCALE = "|".join(sorted(D.SCALES, key=len, reverse=True))
ROMAN = r"(?=[MDCLXVI]+\b)M{0,3}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})"
ROMAN_VALUES = {"M": 1000, "D": 500, "C": 100, "L": 50, "X": 10, "V": 5, "I": 1}
AMOUNT_RE = re.compile(rf"(?P<sign>{SIGN})[ \t]?(?P<amount>{AMOUNT})(?:[ \t]?(?P<scale>{SCALE}))?", re.I)
NUM = r"\d+(?:\.\d+)?"
OPERATORS = {"-": "minus", "+": "plus", "×": "times", "*": "times", "/": "divided by", "=": "equals"}
COUNTED = "chapter|part|volume|vol|book|act|scene|section|war|phase|level|round|episode|season|article|appendix"


def _cased(word: str, written: str) -> str:
    """A month's name capitalized where the text capitalizes it (Jan. -> January, jan -> january)."""
    return word.capitalize() if written[:1].isupper() else word


def _strip_and(spoken: str) -> str:
    return re.sub(r"\band\s+", "", spoken)


class English(Normalizer):
    trigger = re.compile(rf"[\d@/{''.join(s[-1] for s in D.SIGNS)}]|www\.|\w\.(?:{'|'.join(D.TLDS)})\b|\b[IVXLC]{{2,}}\b|(?i:\b(?:{COUNTED})\s+[IVXLC]+\b)")

    needs = {"electronic": re.compile(rf"[@/]|www\.|\w\.(?:{'|'.join(D.TLDS)})\b"),
             # every month's name starts with one of these (a cheaper look than the names themselves)
             "money": re.compile("|".join(re.escape(s) for s in D.SIGNS)),
             "date": re.compile(r"(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)|\d[-/.]\d|\dQ\d|\d ?(?:A\.?D|B\.?C|C\.?E)"),
             "time": re.compile(r"\d[:.]\d|\d ?[aApP]\.?[mM]"),
             "roman": re.compile(rf"\b[IVXLC]{{2,}}\b|(?i:\b(?:{COUNTED})\b)"),
             "range": re.compile(r"\d{4}s? ?[-–]"), "math": re.compile("="), "fraction": re.compile("/")}

    def __init__(self, rules):
        super().__init__(rules)
        self._patterns = self._compile()
        measures.load()  # wetext's FSTs read now, when the model loads, not on a text's first measure

    def patterns(self):
        return self._patterns

    # -- numbers -----------------------------------------------------------------------------------
    def card(self, digits: str) -> str:
        return self.remember("cardinal", digits.replace(",", ""), lambda d: numbers.cardinal(self.rules, d))

    def digits(self, digits: str) -> str:
        return self.remember("digits", digits, lambda d: numbers.digit_by_digit(self.rules, d))

    def ordinal(self, digits: str) -> str:
        return self.remember("ordinal", digits, lambda d: numbers.ordinal(self.rules, d))

    def year(self, digits: str) -> str:
        if len(digits) == 2:  # '98, /05: the year's last two digits
            return self.digits(digits) if digits.startswith("0") else self.card(digits)
        return self.remember("year", digits, lambda d: numbers.year(self.rules, d)) if numbers.is_year(digits) else self.card(digits)

    def decimal(self, amount: str) -> str:
        integer, _, fraction = amount.replace(",", "").partition(".")
        spoken = self.card(integer) if integer else ""
        return f"{spoken} point {self.digits(fraction)}".strip() if fraction else spoken

    # -- the rules ---------------------------------------------------------------------------------
    def _compile(self):
        i = re.IGNORECASE
        sep = r"[ \t]"
        return [
            (re.compile(r"(?<![\w@.])(?:(?:https?|ftp|file)://|www\.)[^\s<>\"']*[\w/]"
                        r"|(?<![\w.@])[\w.+&-]*\w@[\w-]+(?:\.[\w-]+)+(?:/[^\s<>\"']*[\w/])?"
                        rf"|(?<![\w.@/])[a-z][\w-]*(?:\.[\w-]+)*\.(?:{'|'.join(D.TLDS)})\b(?:/[^\s<>\"']*[\w/])?"
                        r"|(?<![\w/])(?!and/or\b)[A-Za-z]{2,}(?:[ \t]?/[ \t]?[A-Za-z]{2,})+(?![\w/])"), self.url, "electronic"),
            (re.compile(r"(?<![\w+.-])(?:(?P<cc>\+\d{1,3})[ \t-]?)?(?:\((?P<a1>\d{3})\)|(?P<a2>\d{3}))[ \t.-]?"
                        r"(?<=[\s.)-])(?P<b>\d{3})(?P<s>[ \t.-])(?P<c>\d{4})(?:-(?P<d>\d{1,4}))?(?![\w.-]\d)"
                        r"|(?<![\w.-])(?P<ss1>\d{3})-(?P<ss2>\d{2})-(?P<ss3>\d{4})(?![\w-])"
                        r"|(?<![\w.])(?P<ip>\d{1,3}(?:\.\d{1,3}){3})(?![\w.])"), self.telephone, "telephone"),
            (re.compile(rf"(?<![\w$.:])(?P<t1>{self._time_re('1')})(?:{sep}?[-–]{sep}?|{sep}to{sep})"
                        rf"(?P<t2>{self._time_re('2')})(?!\w)|(?<![\w$.:])(?P<t>{self._time_re('')})(?!\w)", i),
             self.time, "time"),
            (re.compile(rf"(?P<m1>(?:{SIGN}){sep}?(?:{AMOUNT})(?:{sep}?(?:{SCALE})\b)?){sep}?[-–]{sep}?"
                        rf"(?P<m2>(?:{SIGN}){sep}?(?:{AMOUNT})(?:{sep}?(?:{SCALE})\b)?)"
                        rf"|(?P<m>(?:{SIGN}){sep}?(?:{AMOUNT})(?:{sep}?(?:{SCALE})\b)?)"
                        rf"(?:{sep}?/{sep}?(?P<per>[A-Za-z]+)\b)?", i), self.money, "money"),
            (re.compile(rf"\b(?P<month>{MONTH})\.?(?:{sep}|-)(?P<day>[0-3]?\d)(?:st|nd|rd|th)?\b"
                        rf"(?:(?:{sep}|-)(?P<year>\d{{4}}|(?:twenty|nineteen)(?:{sep}\w+)?)(?!\d))?"
                        rf"|\b(?P<day2>[0-3]?\d)(?:st|nd|rd|th)?{sep}(?:of{sep})?(?P<month2>{MONTH})\.?\b"
                        rf"(?:{sep}(?P<year2>\d{{4}})(?!\d))?"
                        rf"|\b(?P<month3>{MONTH})\.?{sep}(?P<year3>\d{{4}})\b"
                        r"|(?<![\w./-])(?P<y>\d{4})(?P<ys>[-/.])(?P<ym>[01]?\d)(?P=ys)(?P<yd>[0-3]?\d)(?![\w/.-]?\d)"
                        r"|(?<![\w./-])(?P<a>[0-3]?\d)(?P<as>[/.])(?P<b>[0-3]?\d)(?P=as)(?P<c>\d{4}|\d{2})(?![\w/.-]?\d)"
                        r"|(?<![\w./-])(?P<a2>[0-3]?\d)-(?P<b2>[0-3]?\d)-(?P<c2>\d{4})(?![\w/.-]?\d)", i),
             self.date, "date"),
            (re.compile(r"(?<![\w.,-])(?P<y1>\d{4})(?P<s1>s?)[ \t]?[-–][ \t]?(?P<y2>\d{4}|\d{2})(?P<s2>s?)(?![\w.,-]?\d)"),
             self.years, "range"),
            (re.compile(rf"(?<![\w.,])(?P<n>\d{{1,5}}){sep}(?:(?P<dir>[NSEW]|North|South|East|West)\.?{sep})?"
                        rf"(?P<name>(?:\d+(?:st|nd|rd|th)|[A-Z][a-z]+)(?:{sep}[A-Z][a-z]+)*){sep}"
                        rf"(?P<type>(?i:{'|'.join(D.STREETS)}))\b\.?(?!\w)"), self.address, "address"),
            # a state after a place and a comma (Boise, ID), its ZIP code after it: each a chunk, the commas kept
            (re.compile(rf"(?<=[a-z],{sep})(?P<state>{'|'.join(D.STATES)})\b(?=,?{sep}\d{{5}}\b|{sep}*(?:$|[.;!?]))"
                        rf"|(?:(?<=[A-Z]{{2}}{sep})|(?<=[A-Z]{{2}},{sep}))(?P<zip>\d{{5}}(?:-\d{{4}})?)(?![\w-])"),
             self.state, "address"),
            (re.compile(rf"(?<![\w.])-?(?:{NUM})(?:[ \t]?[-+×*/][ \t]?-?(?:{NUM}))*[ \t]?=[ \t]?-?(?:{NUM})(?![\w.])"),
             self.math, "math"),
            (re.compile(rf"(?<![\w.])\.(?P<frac>\d+)(?:[ \t](?P<scale>thousand|million|billion|trillion)\b)?"),
             self.point, "decimal"),
            (re.compile(r"#(?=\d)"), lambda m: [Said("number", m.start(), m.end())], "serial"),
            (re.compile(r"(?<![\w.])(?P<q>[1-4])Q(?P<y>\d{2}|\d{4})\b"), self.quarter, "date"),
            (re.compile(r"(?<![\w.,])(?P<y>\d{1,4})[ \t]?(?P<era>A\.?D\.?|B\.?C\.?(?:E\.?)?|C\.?E\.?)(?!\w)"), self.era, "date"),
            (re.compile(r"(?<![\w.])(?P<a>\d+(?:\.\d+)?)[ \t]?[x×][ \t]?(?P<b>\d+(?:\.\d+)?[ \t]?[A-Za-zµ°][\w°²³/]*)"), self.by, "measure"),
            (measures.MEASURE, self.measure, "measure"),
            (re.compile(r"(?<![\w.,/])(?P<n>\d{1,3}(?:,\d{3})+|\d+)(?P<suffix>st|nd|rd|th|ST|ND|RD|TH)(?!\w)"),
             self.ordinal_rule, "ordinal"),
            (re.compile(r"(?<![\w/.,-])(?:(?P<whole>\d+)[ \t])?(?P<num>\d+)[ \t]?/[ \t]?(?P<den>\d+)(?i:st|nd|rd|th)?(?![\w/]|[.,]\d)"),
             self.fraction, "fraction"),
            (re.compile(rf"\b(?P<counted>(?i:{COUNTED})\.?){sep}(?P<r1>{ROMAN})\b|(?<=[a-z]{sep})(?P<r2>{ROMAN})\b"
                        rf"|\b(?P<name>[A-Z][a-z]+){sep}(?P<r3>(?=[IVX]{{2}})[IVX]+)\b"), self.roman, "roman"),
            (re.compile(r"(?<![\w.-])(?=[A-Za-z]*\d)(?=\d*[A-Za-z])(?![\d,.]+(?:st|nd|rd|th|s)\b)[A-Za-z0-9]{2,}(?![\w-])"),
             self.serial, "serial"),
        ]

    @staticmethod
    def _time_re(n: str) -> str:
        return (rf"(?P<h{n}>[012]?\d)(?:(?::(?P<mi{n}>[0-5]\d)(?::(?P<se{n}>[0-5]\d))?)|\.(?P<md{n}>[0-5]\d)(?=[ \t]?[ap]\.?m))?"
                rf"(?:[ \t]?(?P<ap{n}>[ap]\.?m\b\.?))?(?:[ \t]?(?P<z{n}>(?:{'|'.join(D.ZONES)})\b|e\.s\.t\.?))?")

    def url(self, m: re.Match) -> list[Said]:
        out, text, base = [], m.group(), m.start()
        last_dot = text.rfind(".") if "@" in text or "." in text else -1
        for p in re.finditer(r"[A-Za-z]+|\d+|[^\sA-Za-z\d]|\s+", text):
            piece, s, e = p.group(), base + p.start(), base + p.end()
            low = piece.lower()
            if piece.isspace():
                continue
            if piece.isdigit():  # digit by digit, but a round thousand (rtx-6000) as a number
                out += said(self.card(piece) if re.fullmatch(r"[1-9]0{3,}", piece) else self.digits(piece), s, e)
            elif piece.isalpha():
                after_last_dot = p.start() > last_dot >= 0 and "/" not in text[last_dot:p.start()]
                if low in D.URL_SPELLED or after_last_dot and low not in D.URL_WORDS and len(piece) <= 3:
                    out.append(Said(piece.upper(), s, e))
                else:
                    out.append(Said(D.URL_WORDS.get(low, piece), s, e))
            elif piece in D.URL_SIGNS:
                out += said(D.URL_SIGNS[piece], s, e)
            else:
                return None
        return out

    def telephone(self, m: re.Match) -> list[Said]:
        g, out = m.groupdict(), []
        if g["ip"]:
            for p in re.finditer(r"\d+|\.", g["ip"]):
                out += said("dot" if p.group() == "." else self.digits(p.group()), m.start() + p.start(), m.start() + p.end())
            return out
        for name in ("cc", "a1", "a2", "b", "c", "d", "ss1", "ss2", "ss3"):
            if g[name]:
                spoken = self.digits(g[name].lstrip("+"))
                out += said(("plus " if name == "cc" else "") + spoken, m.start(name), m.end(name))
        return out

    def time(self, m: re.Match) -> list[Said] | None:
        if m.group("t") is not None:
            return self._clock(m, "")
        first, second = self._clock(m, "1"), self._clock(m, "2")
        if not first or not second:
            return None
        return first + [Said("to", m.end("t1"), m.start("t2"))] + second

    def _clock(self, m: re.Match, n: str) -> list[Said] | None:
        h, mi, se, md, ap, z = (m.group(k + n) for k in ("h", "mi", "se", "md", "ap", "z"))
        mi = mi or md
        if not (mi or ap) or int(h) > (12 if ap else 24):
            return None
        hours = self.card(str(int(h)))
        if se is not None:  # 14:10:30: hours, minutes and seconds
            parts = [(int(h), "hour"), (int(mi), "minute"), (int(se), "second")]
            words = [f"{self.card(str(v))} {unit}{'' if v == 1 else 's'}" for v, unit in parts]
            spoken = f"{words[0]} {words[1]} and {words[2]}"
        elif not mi or int(mi) == 0:
            spoken = hours if ap else f"{hours} o'clock"
        else:
            spoken = f"{hours} {'oh ' if int(mi) < 10 else ''}{self.card(str(int(mi)))}"
        if ap:
            spoken += " " + ap.replace(".", "").upper()
        if z:
            spoken += " " + z.replace(".", "").upper()
        return said(spoken, m.start("h" + n), m.end("h" + n) if not (mi or ap or z) else
                    max(m.end(k + n) for k in ("h", "mi", "se", "md", "ap", "z") if m.group(k + n)))

    def money(self, m: re.Match) -> list[Said] | None:
        if m.group("m") is not None:
            out = self._amount(m.group("m"), m.start("m"))
            if out and m.group("per"):
                period = D.PERIODS.get(m.group("per").lower())
                if period is None:
                    return None
                out += said(f"per {period}", m.end("m"), m.end())
            return out
        first, second = self._amount(m.group("m1"), m.start("m1")), self._amount(m.group("m2"), m.start("m2"))
        return first + [Said("to", m.end("m1"), m.start("m2"))] + second if first and second else None

    def _amount(self, written: str, start: int) -> list[Said] | None:
        m = AMOUNT_RE.fullmatch(written)
        sign = next(k for k in D.SIGNS if k.upper() == m.group("sign").upper())
        scale = D.SCALES[m.group("scale").lower()] if m.group("scale") else ""
        one, many, minor, minors = self._names(D.SIGNS[sign])
        integer, _, fraction = m.group("amount").replace(",", "").partition(".")
        fraction = fraction.rstrip("0")
        if scale or len(fraction) > 2:  # 2.5 million dollars, twenty point five zero six dollars
            number = self.decimal(integer + ('.' + fraction if fraction else ''))
            spoken = f"{_strip_and(number) if scale else number} {scale} {'US ' if sign.upper() == 'US$' else ''}{many}"
        else:
            units, cents = int(integer or 0), int(fraction.ljust(2, "0")) if fraction else 0
            parts = [f"{self.card(str(units))} {one if units == 1 else many}"] if units or not cents else []
            parts += [f"{self.card(str(cents))} {minor if cents == 1 else minors}"] if cents else []
            spoken = " ".join(parts)
        return said(" ".join(spoken.split()), start, start + len(written))

    def _names(self, code: str) -> tuple[str, str, str, str]:
        if code in D.CURRENCIES:
            return D.CURRENCIES[code]
        from num2words import CONVERTER_CLASSES
        forms = CONVERTER_CLASSES["en"].CURRENCY_FORMS.get(code)
        if forms is None:
            return code, code, "cent", "cents"
        (one, many), (minor, minors) = forms
        return one, many, minor, minors

    def date(self, m: re.Match) -> list[Said] | None:
        g = m.groupdict()
        if g["month"] or g["month2"]:
            mk, dk, yk = ("month", "day", "year") if g["month"] else ("month2", "day2", "year2")
            month, day = D.MONTH_FORMS[g[mk].lower()], int(g[dk])
            if not 1 <= day <= 31 or g[mk] in ("may", "march", "mar") and not g[yk]:
                return None  # "you may 5", "march 3 miles": a lower-case verb is a month only before a year
            day_words = said(self.ordinal(str(day)), m.start(dk), m.end(dk))
            month_words = [Said(_cased(D.MONTHS[month - 1], g[mk]), m.start(mk), m.end(mk))]
            if g["month"]:
                out = month_words + day_words
            else:
                the = re.search(r"\bthe\s+$", m.string[:m.start()], re.I)
                out = ([] if the else [Said("the", m.start(dk), m.end(dk))]) + day_words + \
                    [Said("of", m.end(dk), m.start(mk))] + month_words
            if g[yk]:
                out += said(self.year(g[yk]) if g[yk].isdigit() else g[yk], m.start(yk), m.end(yk))
            return out
        if g["month3"]:
            return [Said(_cased(D.MONTHS[D.MONTH_FORMS[g["month3"].lower()] - 1], g["month3"]), m.start("month3"), m.end("month3"))] + \
                said(self.year(g["year3"]), m.start("year3"), m.end("year3"))
        if g["y"]:
            order = (("ym", "yd", "y"))
        else:
            a, b = ("a", "b", "c") if g["a"] else ("a2", "b2", "c2"), None
            a = a
            first, second = int(g[a[0]]), int(g[a[1]])
            order = (a[0], a[1], a[2]) if first <= 12 else (a[1], a[0], a[2])  # US order, else day first
        mk, dk, yk = order
        month, day = int(g[mk]), int(g[dk])
        if not (1 <= month <= 12 and 1 <= day <= 31):
            return None
        if m.start(dk) < m.start(mk):  # day first: read in the order written
            return [Said("the", m.start(dk), m.end(dk))] + said(self.ordinal(str(day)), m.start(dk), m.end(dk)) + \
                [Said("of", m.end(dk), m.start(mk)), Said(D.MONTHS[month - 1], m.start(mk), m.end(mk))] + \
                said(self.year(g[yk]), m.start(yk), m.end(yk))
        return [Said(D.MONTHS[month - 1], m.start(mk), m.end(mk))] + said(self.ordinal(str(day)), m.start(dk), m.end(dk)) + \
            said(self.year(g[yk]), m.start(yk), m.end(yk))

    def years(self, m: re.Match) -> list[Said] | None:
        unit = measures.MEASURE.match(m.string, m.start())
        if unit is not None and measures.measure(unit):  # 1980-1970 kg: a range of a measure, not of years
            return None
        y1, y2 = m.group("y1"), m.group("y2")
        if not numbers.is_year(y1) or len(y2) == 4 and not numbers.is_year(y2) or bool(m.group("s1")) != bool(m.group("s2")):
            return None

        def read(digits, plural):
            spoken = self.year(digits)
            return numbers.decade(self.rules, digits) if plural else spoken
        return said(read(y1, m.group("s1")), m.start("y1"), m.end("s1")) + [Said("to", m.end("s1"), m.start("y2"))] + \
            said(read(y2, m.group("s2")), m.start("y2"), m.end())

    def address(self, m: re.Match) -> list[Said] | None:
        n = m.group("n")
        number = _strip_and(numbers.year(self.rules, n)) if len(n) == 4 else (self.digits(n[0]) + " " + self.card(n[1:]) if len(n) == 3 and n[1] != "0"
                                                   else self.digits(n) if len(n) > 2 else self.card(n))
        out = said(number, m.start("n"), m.end("n"))
        if m.group("dir"):
            out.append(Said(D.DIRECTIONS[m.group("dir").lower()], m.start("dir"), m.end("dir")))
        for w in re.finditer(r"\S+", m.group("name")):
            s = m.start("name") + w.start()
            word = w.group()
            out += said(self.ordinal(word[:-2]) if word[0].isdigit() else word, s, s + len(word))
        out.append(Said(D.STREETS[m.group("type").lower()], m.start("type"), m.end("type")))
        return out

    def state(self, m: re.Match) -> list[Said] | None:
        if m.group("state"):
            return said(D.STATES[m.group("state")], m.start(), m.end())
        before = re.search(r"([A-Z]{2}),?[ \t]$", m.string[:m.start()])
        if before is None or before.group(1) not in D.STATES:
            return None
        return said(self.digits(m.group("zip").replace("-", "")), m.start(), m.end())

    def ordinal_rule(self, m: re.Match) -> list[Said] | None:
        n = int(m.group("n").replace(",", ""))
        right = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
        if m.group("suffix").lower() != right:  # 4rd is not an ordinal: the number, then its letters
            return said(self.card(m.group("n")), m.start("n"), m.end("n")) + \
                [Said(m.group("suffix"), m.start("suffix"), m.end())]
        return said(_strip_and(self.ordinal(str(n))), m.start(), m.end())

    def fraction(self, m: re.Match) -> list[Said] | None:
        whole, num, den = m.group("whole"), m.group("num"), m.group("den")
        if int(den) == 0:
            return None
        n, d = int(num), int(den)
        if d == 1:
            spoken = f"{self.card(num)} over one"
        elif d == 2:
            spoken = ("a half" if whole and n == 1 else "one half") if n == 1 else f"{self.card(num)} halves"
        elif d == 4:
            spoken = ("a quarter" if whole else "one quarter") if n == 1 else f"{self.card(num)} quarters"
        else:
            ordinal = self.ordinal(den)
            spoken = f"{'a' if whole and n == 1 else self.card(num)} {ordinal if n == 1 else ordinal + 's'}"
        spoken = _strip_and(spoken)
        if whole:
            return said(_strip_and(self.card(whole)), m.start("whole"), m.end("whole")) + said(f"and {spoken}", m.start("num"), m.end())
        return said(spoken, m.start(), m.end())

    def roman(self, m: re.Match) -> list[Said] | None:
        key = "r1" if m.group("r1") else "r2" if m.group("r2") else "r3"
        if key == "r2" and not re.search(rf"\b(?:{COUNTED})\.?[ \t]+$", m.string[:m.start()], re.I):
            return None
        value = 0
        letters = m.group(key)
        if not letters:
            return None
        for a, b in zip(letters, letters[1:] + " "):
            v = ROMAN_VALUES[a]
            value += -v if b != " " and ROMAN_VALUES[b] > v else v
        if key == "r3":
            return [Said(m.group("name"), m.start("name"), m.end("name"))] + \
                said("the " + self.ordinal(str(value)), m.start(key), m.end(key))
        out = [Said(m.group("counted"), m.start("counted"), m.end("counted"))] if key == "r1" else []
        return out + said(self.card(str(value)), m.start(key), m.end(key))

    def math(self, m: re.Match) -> list[Said]:
        out = []
        for p in re.finditer(rf"(?P<neg>(?<![\d ])-|(?<=[-+×*/=] )-)?(?P<n>{NUM})|[-+×*/=]", m.group()):
            s, e = m.start() + p.start(), m.start() + p.end()
            if p.group("n"):
                out += said(("minus " if p.group("neg") else "") + self.decimal(p.group("n")), s, e)
            else:
                out += said(OPERATORS[p.group()], s, e)
        return out

    def quarter(self, m: re.Match) -> list[Said]:
        return said(f"the {self.ordinal(m.group('q'))} quarter", m.start("q"), m.end("q") + 1) + \
            [Said("of", m.end("q"), m.end("q") + 1)] + said(self.year(m.group("y")), m.start("y"), m.end("y"))

    def era(self, m: re.Match) -> list[Said]:
        """44 BC, 340 A.D: the year as a year (three forty), the era spelled."""
        year = self.remember("year", m.group("y"), lambda d: numbers.year(self.rules, d))
        return said(year, m.start("y"), m.end("y")) + [Said(m.group("era").replace(".", ""), m.start("era"), m.end("era"))]

    def point(self, m: re.Match) -> list[Said]:
        return said(f"point {self.digits(m.group('frac'))} {m.group('scale') or ''}", m.start(), m.end())

    def by(self, m: re.Match) -> list[Said] | None:
        """2x8 m2: the first side, "by", then the second side with its unit as a measure."""
        unit = measures.MEASURE.fullmatch(m.group("b"))
        spoken = measures.measure(unit) if unit is not None else None
        if not spoken:
            return None
        return said(self.decimal(m.group("a")), m.start("a"), m.end("a")) + [Said("by", m.end("a"), m.start("b"))] + \
            said(spoken, m.start("b"), m.end("b"))

    def measure(self, m: re.Match) -> list[Said] | None:
        spoken = measures.measure(m)
        return said(spoken, m.start(), m.end()) if spoken else None

    def serial(self, m: re.Match) -> list[Said]:
        out = []
        for p in re.finditer(r"\d+|[A-Za-z]+", m.group()):
            s, e, piece = m.start() + p.start(), m.start() + p.end(), p.group()
            if piece.isdigit():
                out += said(self.card(piece) if len(piece) <= 2 and not piece.startswith("0") or
                            len(piece) == 4 and piece.endswith("000") else self.digits(piece), s, e)
            else:  # a letter alone or capitals: spelled
                out.append(Said(piece.upper() if len(piece) == 1 or piece.isupper() else piece, s, e))
        return out
