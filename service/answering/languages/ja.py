"""Japanese running text as the hiragana model (g2p-jpn-hira) reads it.

    ペンを3本ください。 -> ペン (ぺん) | を (お, the particle) | 3本 (さんぼん) | ください | 。

Katakana is read as the hiragana it writes, the long-vowel mark ー as the vowel before it (コーヒー
こうひい: a long o as おう, a long e as えい, as hiragana spells them). The particles は へ を are read
わ え お. Numbers are read in hiragana by num2words, with the sound changes of the counter after them
(3本 さんぼん, 1人 ひとり, 3つ みっつ, 20日 はつか, 6% ろっぱあせんと), dates (2024年3月5日), clock
times (10:30) and yen (¥500, 500円) among them.

Kanji have no reading the model can find from their characters. Where the `languages` extra is
installed (fugashi with the UniDic-lite dictionary, in its wheel; nothing is downloaded), the
dictionary segments each run of Japanese characters holding kanji or katakana into words, gives a
kanji word its reading and tells a particle は from the は of はな; a run of hiragana alone is one
word, as dictionary words are written, split only at を. Without it a run is split where its script changes, は and へ
are particles after kanji or katakana, を always, and kanji stay unread (flagged), as before.

Every word keeps its characters: a kana word maps each hiragana it is read as to the character it
came from; a kanji word and a number read their whole span.
"""
from __future__ import annotations

import re

from num2words import num2words

from service.answering.text import NUMBER, WORD, Spoken, Token

HIRAGANA = "\u3041-\u3096\u3099-\u309e"  # ぁ..ゖ, the (combining) voicing marks and the iteration marks ゝゞ
KATAKANA = "\u30a1-\u30fa\u30fd\u30fe"  # ァ..ヺ and ヽヾ
LONG = "\u30fc"  # ー
KANJI = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005\u3006"  # and 々 〆
RUN = f"[{HIRAGANA}{KATAKANA}{KANJI}{LONG}]+"
PARTICLES = {"は": "わ", "へ": "え", "を": "お"}
# A particle's pronunciation in g2p-jpn-hira's symbols (WikiPron's, as its lexicon writes わ え お in
# words): the model, trained on words, answers a lone kana unreliably (お as o̞ o̞). A model whose
# symbols lack one reads the particle's kana instead (text.py).
PARTICLE_SAID = {"わ": ("ɰᵝ", "a̠"), "え": ("e̞",), "お": ("o̞",)}
# A long vowel's kana, by the vowel of the kana before it (its row); ん and the like have none
VOWELS = {**dict.fromkeys("ぁあかがさざただなはばぱまゃやらゎわ", "あ"), **dict.fromkeys("ぃいきぎしじちぢにひびぴみり", "い"),
          **dict.fromkeys("ぅうくぐすずっつづぬふぶぷむゅゆるゔ", "う"), **dict.fromkeys("ぇえけげせぜてでねへべぺめれ", "い"),
          **dict.fromkeys("ぉおこごそぞとどのほぼぽもょよろを", "う")}
SCALES = {"万": 10 ** 4, "億": 10 ** 8, "兆": 10 ** 12}  # written after digits: 3万 is 30000


def _h_row(kana: str) -> dict[str, str]:
    """A counter in the h-row (本 ほん, 杯 はい, 匹 ひき): p after a doubled consonant, b after ん."""
    b = kana[0].translate(str.maketrans("はひふへほ", "ばびぶべぼ")) + kana[1:]
    p = kana[0].translate(str.maketrans("はひふへほ", "ぱぴぷぺぽ")) + kana[1:]
    return {"いち": "いっ" + p, "ろく": "ろっ" + p, "はち": "はっ" + p, "じゅう": "じゅっ" + p, "ひゃく": "ひゃっ" + p,
            "びゃく": "びゃっ" + p, "ぴゃく": "ぴゃっ" + p, "さん": "さん" + b, "せん": "せん" + b, "ぜん": "ぜん" + b,
            "まん": "まん" + b, "": kana}


def _doubled(kana: str, rokku: bool = True) -> dict[str, str]:
    """A counter in the k-, s-, t- or p-row (個 こ, 歳 さい, 通 つう): a doubled consonant after 1, 8,
    10 and, before k and p, 6 and 100."""
    rules = {"いち": "いっ" + kana, "はち": "はっ" + kana, "じゅう": "じゅっ" + kana, "": kana}
    if rokku:
        rules.update({"ろく": "ろっ" + kana, "ひゃく": "ひゃっ" + kana, "びゃく": "びゃっ" + kana, "ぴゃく": "ぴゃっ" + kana})
    return rules


# counter -> how the number's reading ends -> that ending and the counter as said; "" is every other
# ending. EXACT: counters that say some whole numbers their own way.
COUNTERS: dict[str, dict[str, str]] = {
    "本": _h_row("ほん"), "杯": _h_row("はい"), "匹": _h_row("ひき"), "発": _h_row("はつ"), "泊": _h_row("はく"),
    "分": {**_h_row("ふん"), "さん": "さんぷん", "よん": "よんぷん", "せん": "せんぷん", "まん": "まんぷん"},
    "個": _doubled("こ"), "回": _doubled("かい"), "階": {**_doubled("かい"), "さん": "さんがい"}, "曲": _doubled("きょく"),
    "軒": {**_doubled("けん"), "さん": "さんげん"}, "ヶ月": _doubled("かげつ"), "か月": _doubled("かげつ"),
    "カ月": _doubled("かげつ"), "歳": _doubled("さい", False), "才": _doubled("さい", False),
    "冊": _doubled("さつ", False), "週間": _doubled("しゅうかん", False), "通": _doubled("つう", False),
    "頭": _doubled("とう", False), "%": _doubled("ぱーせんと"), "％": _doubled("ぱーせんと"),
    "人": {"よん": "よにん", "": "にん"}, "時": {"よん": "よじ", "なな": "しちじ", "きゅう": "くじ", "": "じ"},
    "時間": {"よん": "よじかん", "きゅう": "くじかん", "": "じかん"}, "年": {"よん": "よねん", "": "ねん"},
    "月": {"よん": "しがつ", "なな": "しちがつ", "きゅう": "くがつ", "": "がつ"},
    "日": {"じゅうよん": "じゅうよっか", "なな": "しちにち", "きゅう": "くにち", "": "にち"},
    "円": {"よん": "よえん", "": "えん"}, "枚": {"": "まい"}, "番": {"": "ばん"}, "度": {"": "ど"}, "台": {"": "だい"},
    "秒": {"": "びょう"}, "倍": {"": "ばい"}, "号": {"": "ごう"}, "名": {"": "めい"}, "週": {"": "しゅう"},
    "つ": {"": ""},
}
EXACT = {"人": {1: "ひとり", 2: "ふたり"},
         "つ": dict(enumerate(("ひとつ", "ふたつ", "みっつ", "よっつ", "いつつ", "むっつ", "ななつ", "やっつ", "ここのつ", "とお"), 1)),
         "日": {**dict(enumerate(("ついたち", "ふつか", "みっか", "よっか", "いつか", "むいか", "なのか", "ようか",
                                  "ここのか", "とおか"), 1)), 20: "はつか"}}
DIGITS = r"\d{1,3}(?:[,，]\d{3})+(?!\d)|\d+(?:[.．]\d+)?"  # thousands and decimal marks, either width
MINUS = r"(?:(?<![\w.,])[-−－](?=\d))?"
COUNTER = "|".join(re.escape(c) for c in sorted(COUNTERS, key=len, reverse=True))
SCALE = "|".join(SCALES)
AMOUNT = re.compile(rf"(?P<yen>[¥￥]\s?)?(?P<minus>{MINUS})(?P<digits>{DIGITS})(?P<scale>{SCALE})?"
                    rf"\s?(?P<counter>{COUNTER})?")
CLOCK = re.compile(r"([01]?\d|2[0-4]):([0-5]\d)")


def hiragana(text: str) -> str:
    """Katakana as hiragana, ー as the vowel before it; every character one character (traceable)."""
    out = []
    for c in text:
        if "\u30a1" <= c <= "\u30f6" or c in "\u30fd\u30fe":
            c = chr(ord(c) - 0x60)
        elif c == LONG and out:
            c = VOWELS.get(out[-1], c)
        out.append(c)
    return "".join(out)


def reading(number: int) -> str:
    return hiragana(num2words(number, lang="ja", reading=True))


def counted(number: int, counter: str | None) -> str:
    """A whole number and the counter after it, as said: 3本 さんぼん, 1人 ひとり, 20日 はつか."""
    said = reading(number)
    if counter is None:
        return said
    exact = EXACT.get(counter, {}).get(number)
    if exact is not None:
        return exact
    rules = COUNTERS[counter]
    for ending in sorted(rules, key=len, reverse=True):
        if ending and said.endswith(ending):
            return hiragana(said[:-len(ending)] + rules[ending])
    return hiragana(said + rules[""])


def amount(digits: str, scale: str | None, counter: str | None) -> list[str]:
    """A written number (1,000 3.14 3万) and its counter, as said: a word per group of 10,000
    (いちおく | にせんさんびゃくよんじゅうごまん | ...), no word longer than the model decodes, the
    counter in the last (a counter changes the end of the number's last group only)."""
    integer, _, fraction = re.sub("[,，]", "", digits).replace("．", ".").partition(".")
    number = int(integer) * SCALES.get(scale or "", 1)
    if fraction:  # a decimal: its digits one by one after てん, the counter's sound change on the last
        said = reading(number) + "てん" + "".join(reading(int(d)) for d in fraction[:-1])
        return [said + counted(int(fraction[-1]), counter)]
    groups = [g for g in re.split(r"(?<=おく)|(?<=まん)|(?<=ちょう)", reading(number)) if g]
    head = "".join(groups[:-1])
    return groups[:-1] + [counted(number, counter)[len(head):]]


class Japanese:
    """Japanese's own reading (text.OwnReading): numbers with what is counted, and runs of kana and
    kanji, segmented by the dictionary where the languages extra is installed."""

    pattern = (rf"[¥￥]\s?(?:{DIGITS})(?:{SCALE})?|(?:[01]?\d|2[0-4]):[0-5]\d(?!\d)"
               rf"|{MINUS}(?:{DIGITS})(?:{SCALE})?(?:\s?(?:{COUNTER}))?|{RUN}")

    def __init__(self, dictionary: bool = True):
        self.tagger = _tagger() if dictionary else None  # dictionary=False: as without the extra

    def tokens(self, text: str, match: re.Match) -> list[Token]:
        written, start, end = match.group(), match.start(), match.end()
        if re.fullmatch(RUN, written):
            return [self._word(text, *segment) for segment in self._segments(written, start)]
        clock = CLOCK.fullmatch(written)
        if clock is not None:
            hours, minutes = int(clock.group(1)), int(clock.group(2))
            said = [counted(hours, "時")] + ([counted(minutes, "分")] if minutes else [])
        else:
            m = AMOUNT.fullmatch(written)
            counter = "円" if m.group("yen") else m.group("counter")
            said = amount(m.group("digits"), m.group("scale"), counter)
            if m.group("minus"):
                said = ["まいなす"] + said
        return [Token(written, NUMBER, start, end, " ".join(said), tuple(Spoken(w, start, end) for w in said))]

    @staticmethod
    def _word(text: str, start: int, end: int, said: str, letters: tuple[int, ...] | None,
              symbols: tuple[str, ...] | None) -> Token:
        return Token(text[start:end], WORD, start, end, said, (Spoken(said, start, end, letters, symbols),))

    def _segments(self, run: str, start: int):
        """(start, end, reading, letters, pronunciation or None) per word of a run of Japanese characters.

        A run of hiragana alone is one word (dictionary words are written so: あかはらいもり, whose は a
        dictionary would take for a particle), but for を, only ever a particle. In a run with kanji or
        katakana the dictionary finds the words and particles (else the scripts do), and the kana
        words between two particles or kanji words are one word again, as a lexicon writes them."""
        if not re.search(f"[{KANJI}{KATAKANA}]", run):
            pieces = list(_by_script(run))  # one stretch of hiragana: split at を only
            whole = self._analyzed(run) if self.tagger is not None and len(pieces) == 1 else None
            if whole is not None and len(whole) == 1:  # one dictionary word: its wa (こんにちは)
                pieces = whole
        else:
            pieces = self._analyzed(run) if self.tagger is not None else None
            pieces = _joined(run, pieces if pieces is not None else list(_by_script(run)))
        for i, j, particle, dictionary in pieces:
            written = run[i:j]
            if particle:
                kana = PARTICLES[written]
                yield start + i, start + j, kana, (start + i,), PARTICLE_SAID[kana]
            elif dictionary is not None and re.search(f"[{KANJI}]", written):
                yield start + i, start + j, hiragana(dictionary), None, None  # a kanji word: the dictionary's reading
            else:  # a kana word, each kana its character's (こんにちは's は said わ, as the dictionary says it)
                yield start + i, start + j, hiragana(dictionary or written), tuple(range(start + i, start + j)), None

    def _analyzed(self, run: str):
        """The dictionary's words: (start, end, is a particle, reading or None); None where its words
        do not spell the run (then the run is split by script)."""
        out, i = [], 0
        for node in self.tagger(run):
            surface = node.surface
            if not surface or not run.startswith(surface, i):
                return None
            kana = getattr(node.feature, "kana", None)
            kana = kana if kana and kana != "*" else None
            particle = surface in PARTICLES and getattr(node.feature, "pos1", "") == "助詞"
            if kana is not None and not re.search(f"[{KANJI}]", surface):
                kana = _said_as(surface, kana, getattr(node.feature, "pron", None))
            out.append((i, i + len(surface), particle, kana))
            i += len(surface)
        return out if i == len(run) else None


def _said_as(surface: str, kana: str, pron: str | None) -> str | None:
    """A kana word as written, but a は or へ its pronunciation says わ or え (こんにちは); None: as written.
    Only where written, spelled and said have one character each, so each stays its character's."""
    if not pron or not len(surface) == len(kana) == len(pron):
        return None
    said = [PARTICLES[c] if c in "はへ" and (k, p) in (("ハ", "ワ"), ("ヘ", "エ")) else c
            for c, k, p in zip(surface, kana, pron)]
    return "".join(said) if said != list(surface) else None


def _joined(run: str, pieces: list) -> list:
    """Neighbouring hiragana words (neither a particle nor holding kanji or katakana) as one word."""
    out = []
    for i, j, particle, said in pieces:
        kana = not particle and not re.search(f"[{KANJI}{KATAKANA}]", run[i:j])
        if kana and out and out[-1][4]:
            a, _, _, before, _ = out.pop()
            said = (before or run[a:i]) + (said or run[i:j]) if before or said else None
            i = a
        out.append((i, j, particle, said, kana))
    return [piece[:4] for piece in out]


def _script(c: str) -> str:
    return "hiragana" if re.match(f"[{HIRAGANA}]", c) else "katakana" if re.match(f"[{KATAKANA}]", c) else "kanji"


def _by_script(run: str):
    """Without a dictionary: a word per stretch of one script (ー joins the stretch before it); を is
    a particle, and so are は and へ starting a stretch of hiragana after kanji or katakana."""
    stretches, i = [], 0
    while i < len(run):
        script = _script(run[i]) if run[i] != LONG else "katakana"
        j = i + 1
        while j < len(run) and (run[j] == LONG or _script(run[j]) == script):
            j += 1
        stretches.append((i, j, script))
        i = j
    for n, (i, j, script) in enumerate(stretches):
        k = i
        for m in range(i, j):
            after_other = m == i and (n > 0 or i == 0 and j - i == 1)
            if script == "hiragana" and (run[m] == "を" or run[m] in "はへ" and after_other):
                if m > k:
                    yield k, m, False, None
                yield m, m + 1, True, None
                k = m + 1
        if k < j:
            yield k, j, False, None


def _tagger():
    """MeCab (fugashi) with UniDic-lite's dictionary, where the languages extra is installed; else None."""
    try:
        import fugashi
        import unidic_lite
    except ImportError:
        return None
    return fugashi.Tagger(f'-d "{unidic_lite.DICDIR}"')
