"""French normalization: rules for numeric dates (day first), decimals (the part after the comma
read as a number: 24,1313 -> vingt-quatre virgule treize treize), fractions (un demi, deux tiers,
trois quarts, cinq huitièmes), ordinals (1re, 1er, 21e, 1 000e), clock times (14h30), telephone
numbers (in pairs), ranges (10-20 -> dix à vingt), measures with their units, e-mail addresses and
URLs, roman numerals (le XIXe siècle, Louis XIV), postcodes (75002 Paris), serials (A380). Numbers
are num2words's (numbers.py); abbreviations and elisions are the scanner's (text.py, textdata/fr.tsv).
"""
from __future__ import annotations

import re

from service.answering import numbers
from service.answering.normalize.base import Normalizer, Said, said

MONTHS = ["janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre", "octobre",
          "novembre", "décembre"]
SPACE = "[ \u00a0\u202f]"  # French thousands marks
INTEGER = rf"\d{{1,3}}(?:{SPACE}\d{{3}})+(?!\d)|\d+"
# unit -> (singular, plural); a unit after a number and a slash is read "par" and its singular
UNITS = {"km": ("kilomètre", "kilomètres"), "m": ("mètre", "mètres"), "cm": ("centimètre", "centimètres"),
         "mm": ("millimètre", "millimètres"), "kg": ("kilogramme", "kilogrammes"), "g": ("gramme", "grammes"),
         "mg": ("milligramme", "milligrammes"), "t": ("tonne", "tonnes"), "l": ("litre", "litres"),
         "L": ("litre", "litres"), "cl": ("centilitre", "centilitres"), "ml": ("millilitre", "millilitres"),
         "h": ("heure", "heures"), "min": ("minute", "minutes"), "s": ("seconde", "secondes"),
         "ms": ("milliseconde", "millisecondes"), "°C": ("degré Celsius", "degrés Celsius"),
         "km²": ("kilomètre carré", "kilomètres carrés"), "m²": ("mètre carré", "mètres carrés"),
         "m³": ("mètre cube", "mètres cubes"), "ha": ("hectare", "hectares"), "Go": ("gigaoctet", "gigaoctets"),
         "Mo": ("mégaoctet", "mégaoctets"), "ko": ("kilooctet", "kilooctets"), "W": ("watt", "watts"),
         "kW": ("kilowatt", "kilowatts"), "V": ("volt", "volts"), "Hz": ("hertz", "hertz")}
UNIT = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
URL_SIGNS = {".": "point", "@": "arobase", "/": "barre oblique", "-": "tiret", "_": "tiret bas", ":": "deux-points"}
TLDS = ("com", "fr", "org", "net", "eu", "be", "ch", "ca", "io", "gouv")
ROMAN_VALUES = {"M": 1000, "D": 500, "C": 100, "L": 50, "X": 10, "V": 5, "I": 1}
ROMAN = r"(?=[IVX]|[MDCLXVI]{2})(?=[MDCLXVI]+(?:e|er|re|ème)?\b)M{0,3}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})"


def _feminine(spoken: str) -> str:
    """un -> une before a feminine noun (une heure, vingt et une heures)."""
    return re.sub(r"\bun$", "une", spoken)


class French(Normalizer):
    trigger = re.compile(r"\d|@|www\.|\b[IVXLC]+(?:e|er|ème)\b|\b[A-Z][a-z]+ [IVXLC]{2,}\b")

    def __init__(self, rules):
        super().__init__(rules)
        s = "[ \t]"
        signs = "|".join(re.escape(c) for c in sorted(rules.currencies, key=len, reverse=True)) or "€"
        self._patterns = [
            (re.compile(rf"(?<![\w,.])(?P<int>{INTEGER})(?:,(?P<frac>\d{{1,2}}))?{s}?(?P<sign>{signs})"
                        rf"|(?P<sign2>{signs}){s}?(?P<int2>{INTEGER})(?:,(?P<frac2>\d{{1,2}}))?(?![\w,]\d)"), self.money, "money"),
            (re.compile(r"(?<![\w.@])(?:(?:https?|ftp)://|www\.)[^\s<>\"']*[\w/]|(?<![\w.@])[\w.+-]*\w@[\w-]+(?:\.[\w-]+)+"
                        rf"|(?<![\w.@/])[a-z][\w-]*(?:\.[\w-]+)*\.(?:{'|'.join(TLDS)})\b"), self.url, "electronic"),
            (re.compile(r"(?<![\w+])(?:(?P<cc>\+33)[ .]?(?P<first>\d)|(?P<zero>0\d))(?P<rest>(?:[ .]?\d{2}){4})(?![\w.]?\d)"),
             self.telephone, "telephone"),
            (re.compile(rf"(?<![\w.,/-])[0-3]?\d(?:(?:[/-]|{s}et{s})[0-3]?\d)+(?={s}(?:{'|'.join(MONTHS)})\b)", re.I),
             self.days, "date"),
            (re.compile(r"(?<![\w.,/-])(?P<d>[0-3]?\d)(?P<sep>[./-])(?P<m>[01]?\d)(?:(?P=sep)(?P<y>\d{4}|\d{2}))?(?![\w./,-]?\d)"),
             self.date, "date"),
            (re.compile(r"(?<![\w:,.])(?P<h>[012]?\d)(?:h|:)(?P<mi>[0-5]\d)?(?![\w:])|(?<![\w:,.])(?P<h2>[012]?\d)h(?!\w)"),
             self.time, "time"),
            (re.compile(rf"(?<![\w,])(?P<neg>-)?(?:(?P<whole>\d+){s})?(?P<num>\d+)/(?P<den>\d+)(?![\w/]|,\d)"),
             self.fraction, "fraction"),
            (re.compile(rf"(?<![\w,])(?P<n>{INTEGER})(?P<suffix>ères?|ers?|res?|èmes?|es?)(?!\w)"), self.ordinal, "ordinal"),
            (re.compile(rf"(?<![\w,.])(?P<a>{INTEGER}(?:,\d+)?){s}?[-–]{s}?(?P<b>{INTEGER}(?:,\d+)?)(?:{s}?(?P<unit>{UNIT}))?(?!\w|,\d)"),
             self.range, "range"),
            (re.compile(rf"(?<![\w,.])(?P<neg>-)?(?P<n>{INTEGER}(?:,\d+)?){s}?(?!s\b)(?P<unit>{UNIT})(?:/(?P<per>{UNIT}))?(?![\w²³])"),
             self.measure, "measure"),
            (re.compile(rf"(?<![\w,.])(?P<neg>-)?(?P<int>{INTEGER}),(?P<frac>\d+)(?![\w,])"), self.decimal, "decimal"),
            (re.compile(rf"(?<=,{s})(?P<cp>\d{{5}})(?={s}[A-Z])"), self.postcode, "address"),
            (re.compile(rf"\b(?P<r>{ROMAN})(?P<suffix>e|er|re|ème)\b|\b(?P<name>[A-Z][a-z]+){s}(?P<r2>(?=[IVX]{{2}})[IVX]+)\b"),
             self.roman, "roman"),
            (re.compile(r"(?<![\w-])(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z0-9]{2,}(?![\w-])"), self.serial, "serial"),
        ]

    def patterns(self):
        return self._patterns

    def card(self, digits: str) -> str:
        return self.remember("cardinal", re.sub(SPACE, "", digits), lambda d: numbers.cardinal(self.rules, d))

    def digits(self, digits: str) -> str:
        return self.remember("digits", digits, lambda d: numbers.digit_by_digit(self.rules, d))

    def number(self, written: str) -> str:
        """A written number: its integer, and the part after the comma read as numbers (zeros first)."""
        integer, _, fraction = written.partition(",")
        spoken = self.card(integer)
        if fraction:
            zeros = len(fraction) - len(fraction.lstrip("0"))
            rest = fraction[zeros:]
            groups = [rest] if len(rest) <= 3 else [rest[i:i + 2] for i in range(0, len(rest), 2)]
            spoken += " virgule " + " ".join(["zéro"] * zeros + [self.card(g) if not g.startswith("0") else self.digits(g)
                                                                 for g in groups if g])
        return spoken

    def money(self, m: re.Match) -> list[Said]:
        integer, fraction, sign = (m.group("int"), m.group("frac"), m.group("sign")) if m.group("sign") else \
            (m.group("int2"), m.group("frac2"), m.group("sign2"))
        spoken = numbers.money(self.rules, self.rules.currencies[sign], re.sub(SPACE, "", integer), fraction)
        return said(spoken, m.start(), m.end())

    def url(self, m: re.Match) -> list[Said]:
        out = []
        for p in re.finditer(r"[^\W\d_]+|\d+|[^\s\w]|_", m.group()):
            s, e, piece = m.start() + p.start(), m.start() + p.end(), p.group()
            if piece.isdigit():
                out += said(self.digits(piece), s, e)
            elif piece in URL_SIGNS:
                out += said(URL_SIGNS[piece], s, e)
            elif piece.isalpha():
                out.append(Said(piece.upper() if piece.lower() in ("www", "http", "https") else piece, s, e))
            else:
                return None
        return out

    def telephone(self, m: re.Match) -> list[Said]:
        out = []
        if m.group("cc"):
            out += said("plus trente-trois", m.start("cc"), m.end("cc")) + said(self.card(m.group("first")), m.start("first"), m.end("first"))
        else:
            out += said(self.digits(m.group("zero")), m.start("zero"), m.end("zero"))
        for p in re.finditer(r"\d{2}", m.group("rest")):
            s = m.start("rest") + p.start()
            pair = p.group()
            out += said(self.digits(pair) if pair.startswith("0") else self.card(pair), s, s + 2)
        return out

    def date(self, m: re.Match) -> list[Said] | None:
        day, month, year = int(m.group("d")), int(m.group("m")), m.group("y")
        if not (1 <= day <= 31 and 1 <= month <= 12) or year is None and m.group("sep") != ".":
            return None
        out = said("premier" if day == 1 else self.card(str(day)), m.start("d"), m.end("d"))
        out.append(Said(MONTHS[month - 1], m.start("m"), m.end("m")))
        if year:
            out += said(self.card(year if len(year) == 4 else year), m.start("y"), m.end("y"))
        return out

    def days(self, m: re.Match) -> list[Said] | None:
        """les 17/18 juin, les 1er-3 mars: each day before the month, as a date's day is read."""
        out = []
        for d in re.finditer(r"\d+", m.group()):
            if not 1 <= int(d.group()) <= 31:
                return None
            out += said("premier" if d.group() in ("1", "01") else self.card(d.group()), m.start() + d.start(), m.start() + d.end())
        return out

    def time(self, m: re.Match) -> list[Said] | None:
        h = m.group("h") or m.group("h2")
        if int(h) > 24:
            return None
        hours = int(h)
        out = said(f"{_feminine(self.card(str(hours)))} {'heure' if hours <= 1 else 'heures'}", m.start(), m.start() + len(h) + 1)
        if m.group("mi") and int(m.group("mi")):
            out += said(_feminine(self.card(str(int(m.group("mi"))))), m.start("mi"), m.end("mi"))
        return out

    def fraction(self, m: re.Match) -> list[Said] | None:
        num, den = int(m.group("num")), int(m.group("den"))
        if den < 2:
            return None
        names = {2: ("demi", "demis"), 3: ("tiers", "tiers"), 4: ("quart", "quarts")}
        one, many = names.get(den) or (numbers.ordinal(self.rules, str(den)),) * 2
        many = many if den in names else many + "s"
        spoken = f"{self.card(str(num))} {one if num == 1 else many}"
        if m.group("whole"):
            spoken = f"{self.card(m.group('whole'))} et {'demi' if (num, den) == (1, 2) else spoken}"
        if m.group("neg"):
            spoken = "moins " + spoken
        return said(spoken, m.start(), m.end())

    def ordinal(self, m: re.Match) -> list[Said] | None:
        n, suffix = int(re.sub(SPACE, "", m.group("n"))), m.group("suffix")
        plural = "s" if suffix.endswith("s") and suffix not in ("es",) or suffix in ("es", "èmes") and n > 1 else ""
        if n == 1:
            if suffix.startswith("e") and suffix not in ("er", "ers"):
                return None  # 1e: not written for an ordinal
            spoken = "première" if suffix.startswith(("è", "r")) else "premier"
        elif suffix.startswith(("er", "r")):
            return None  # 2er: not an ordinal
        else:
            spoken = numbers.ordinal(self.rules, str(n))
        return said(spoken + plural, m.start(), m.end())

    def range(self, m: re.Match) -> list[Said]:
        out = said(self.number(m.group("a")), m.start("a"), m.end("a")) + [Said("à", m.end("a"), m.start("b"))] + \
            said(self.number(m.group("b")), m.start("b"), m.end("b"))
        if m.group("unit"):
            out += said(UNITS[m.group("unit")][1], m.start("unit"), m.end("unit"))
        return out

    def measure(self, m: re.Match) -> list[Said]:
        n = m.group("n")
        value = float(re.sub(SPACE, "", n).replace(",", "."))
        one, many = UNITS[m.group("unit")]
        spoken = self.number(n)
        if one.split()[0] in ("heure", "minute", "seconde", "tonne", "milliseconde"):
            spoken = _feminine(spoken)
        spoken = f"{'moins ' if m.group('neg') else ''}{spoken} {one if abs(value) < 2 else many}"
        if m.group("per"):
            spoken += f" par {UNITS[m.group('per')][0]}"
        return said(spoken, m.start(), m.end())

    def decimal(self, m: re.Match) -> list[Said]:
        spoken = self.number(m.group("int") + "," + m.group("frac"))
        return said(("moins " if m.group("neg") else "") + spoken, m.start(), m.end())

    def postcode(self, m: re.Match) -> list[Said]:
        """75002 Paris: the département's number, then the rest (soixante-quinze zéro zéro deux)."""
        code = m.group("cp")
        rest = code[2:]
        return said(self.card(code[:2]) if code[0] != "0" else self.digits(code[:2]), m.start(), m.start() + 2) + \
            said(self.digits(rest) if rest.startswith("0") else self.card(rest), m.start() + 2, m.end())

    def serial(self, m: re.Match) -> list[Said]:
        """A380, B12, 4x4: letters spelled where alone or capitals, numbers of up to three digits as numbers."""
        out = []
        for p in re.finditer(r"\d+|[A-Za-z]+", m.group()):
            s, e, piece = m.start() + p.start(), m.start() + p.end(), p.group()
            if piece.isdigit():
                out += said(self.card(piece) if len(piece) <= 3 and not piece.startswith("0") else self.digits(piece), s, e)
            else:
                out.append(Said(piece.upper() if len(piece) == 1 or piece.isupper() else piece, s, e))
        return out

    def roman(self, m: re.Match) -> list[Said] | None:
        letters = m.group("r") or m.group("r2")
        if not letters:
            return None
        value = 0
        for a, b in zip(letters, letters[1:] + " "):
            v = ROMAN_VALUES[a]
            value += -v if b != " " and ROMAN_VALUES[b] > v else v
        if m.group("r"):  # le XIXe siècle
            spoken = ("première" if m.group("suffix") == "re" else "premier") if value == 1 else numbers.ordinal(self.rules, str(value))
            return said(spoken, m.start(), m.end())
        # Louis XIV: a king's number is a cardinal, but the first is premier
        return [Said(m.group("name"), m.start("name"), m.end("name"))] + \
            said("premier" if value == 1 else self.card(str(value)), m.start("r2"), m.end("r2"))
