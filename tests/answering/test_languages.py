"""Each served language's own text rules (service/answering/languages/, textdata/): Japanese katakana,
particles and numbers with their counters, read as the hiragana model reads them; Korean native numbers
before native counters; number words from CLDR where num2words has none; `%` in every language; the
letters a model was trained without read as those it was trained on (Greek ς as σ). Expected forms
are written by hand; over a real server with the shipped models, spans cover each text, nothing dropped.
"""
import pytest

from attnserve.v1 import attnserve_pb2 as pb
from service.answering.languages import ja
from service.answering.languages.registry import reader
from service.answering.reading import RULE_CHOICE
from service.answering.text import Script, TextReader, spoken_text
from service.answering.textrules import read_rules
from service.domain import LexiconError
from tests.answering.test_text import check_cover, check_punctuation_kept, read
from tests.live import ServerSetup, loopback_config, shipped_repository

# unicode-rbnf is a base dependency and the languages extra (fugashi, UniDic-lite, babel) is installed by
# `make test` (.[dev]): nothing here is skipped, so a missing one fails. What a server reads without the
# extra is asked below of a reader made without the dictionary (ja.Japanese(dictionary=False)).


def spoken(language: str, text: str) -> str:
    return spoken_text(text, reader(read_rules(language)).read(text))


def test_katakana_reads_as_hiragana_one_character_each():
    assert ja.hiragana("コーヒー") == "こうひい"  # a long o as おう, as hiragana spells it
    assert ja.hiragana("ケーキ") == "けいき" and ja.hiragana("パーティー") == "ぱあてぃい"
    assert ja.hiragana("ヴァイオリン") == "ゔぁいおりん" and ja.hiragana("ひらがな") == "ひらがな"
    assert ja.hiragana("ーア") == "ーあ"  # a mark with no vowel before it stays (then flagged unread)


@pytest.mark.parametrize("number,counter,said", [
    (3, "本", "さんぼん"), (1, "本", "いっぽん"), (6, "本", "ろっぽん"), (10, "本", "じゅっぽん"), (2, "本", "にほん"),
    (1, "人", "ひとり"), (2, "人", "ふたり"), (4, "人", "よにん"), (11, "人", "じゅういちにん"),
    (3, "つ", "みっつ"), (9, "つ", "ここのつ"), (20, "日", "はつか"), (1, "日", "ついたち"), (14, "日", "じゅうよっか"),
    (17, "日", "じゅうしちにち"), (4, "時", "よじ"), (9, "時", "くじ"), (4, "月", "しがつ"), (3, "分", "さんぷん"),
    (5, "分", "ごふん"), (30, "分", "さんじゅっぷん"), (1, "個", "いっこ"), (6, "%", "ろっぱあせんと"), (4, "円", "よえん"),
    (8, "歳", "はっさい"), (3, "階", "さんがい"), (2, "杯", "にはい"), (300, "本", "さんびゃっぽん"), (7, None, "なな"),
])
def test_japanese_numbers_with_their_counters(number, counter, said):
    assert ja.counted(number, counter) == said


def test_japanese_dates_times_yen_and_decimals():
    assert spoken("jpn_hira", "2024年3月20日") == "にせんにじゅうよねん さんがつ はつか"
    assert spoken("jpn_hira", "10:30に") == "じゅうじ さんじゅっぷん に"
    assert spoken("jpn_hira", "¥500と1,000円と3万円") == "ごひゃくえん と せんえん と さんまんえん"
    assert spoken("jpn_hira", "3.5%") == "さんてんごぱあせんと"
    assert spoken("jpn_hira", "３本、１２３，４５６円、-5度、5-3") == (  # full-width digits and marks; a minus
        "さんぼん、じゅうにまん さんぜんよんひゃくごじゅうろくえん、まいなす ごど、ご-さん")
    # a long number is a word per group of ten thousand, none longer than the model decodes
    (token,) = reader(read_rules("jpn_hira")).read("123456789")
    assert [w.text for w in token.words] == ["いちおく", "にせんさんびゃくよんじゅうごまん", "ろくせんななひゃくはちじゅうきゅう"]


def test_japanese_without_the_dictionary_splits_by_script():
    """Without the languages extra: katakana and kana read, は へ after kanji or katakana and を
    anywhere are particles, kanji unread (flagged by the model's alphabet), every character kept."""
    plain = TextReader(read_rules("jpn_hira"), ja.Japanese(dictionary=False))
    tokens = plain.read("私は東京へペンを3本。はなはきれい")
    assert [(t.text, t.spoken) for t in tokens] == [
        ("私", "私"), ("は", "わ"), ("東京", "東京"), ("へ", "え"), ("ペン", "ぺん"), ("を", "お"), ("3本", "さんぼん"),
        ("。", ""), ("はなはきれい", "はなはきれい")]  # no dictionary: はな's は cannot be told from a particle
    (particle,) = tokens[1].words
    assert (particle.text, particle.letters) == ("わ", (1,))
    assert tokens[4].words[0].letters == (5, 6)


def test_japanese_with_the_dictionary_reads_kanji_and_finds_particles():
    tokens = reader(read_rules("jpn_hira")).read("今日は東京へ行きます。これはペンです。")
    assert [(t.text, t.spoken) for t in tokens] == [
        ("今日", "きょう"), ("は", "わ"), ("東京", "とうきょう"), ("へ", "え"), ("行き", "いき"), ("ます", "ます"), ("。", ""),
        ("これ", "これ"), ("は", "わ"), ("ペン", "ぺん"), ("です", "です"), ("。", "")]
    assert tokens[0].words[0].letters is None  # a kanji word reads its whole span
    (hello,) = reader(read_rules("jpn_hira")).read("こんにちは")
    assert (hello.spoken, hello.words[0].letters) == ("こんにちわ", (0, 1, 2, 3, 4))  # its は said わ


def test_a_run_of_hiragana_alone_stays_one_word_as_a_lexicon_writes_it():
    """The dictionary would split あかはらいもり and take its は for a particle: a run of hiragana alone
    (a dictionary word as written) is one word but at を; kana words between kanji are joined."""
    read = reader(read_rules("jpn_hira")).read
    assert [t.spoken for t in read("あかはらいもり はなはきれい")] == ["あかはらいもり", "はなはきれい"]
    assert [t.spoken for t in read("すしをたべる")] == ["すし", "お", "たべる"]
    assert [t.spoken for t in read("東京でちょっとまってください")] == ["とうきょう", "でちょっとまってください"]
    (word,) = read("き゚ょ")  # a combining voicing mark belongs to its kana
    assert word.text == "き゚ょ"


def test_korean_native_numbers_before_native_counters():
    assert spoken("kor", "사과 3개, 학생 2명, 고양이 20마리, 1살") == "사과 세 개, 학생 두 명, 고양이 스무 마리, 한 살"
    assert spoken("kor", "3시 30분, 10:05, 2시간") == "세 시 삼십 분, 열 시 오 분, 두 시간"
    assert spoken("kor", "3분 5% 2024년 123개") == "삼 분 오 퍼센트 이천이십사 년 백이십삼 개"


def test_korean_money_and_the_months_said_short():
    assert spoken("kor", "₩5,000과 $5.50, $1") == "오천 원 과 오 달러 오십 센트, 일 달러"
    assert spoken("kor", "6월 10월 16월 3월") == "유 월 시 월 십육 월 삼 월"


@pytest.mark.parametrize("language,text,said", [
    ("rum", "05.03.2024, 2021-12-01", "cinci martie două mii douăzeci și patru, unu decembrie două mii douăzeci și unu"),
    ("gre", "5/3/2024", "πέντε Μαρτίου δύο χίλιάδες είκοσι τέσσερα"),  # the month as a date writes it: genitive
    ("hun", "2024. 03. 05.", "kétezer-huszonnégy március öt."),  # year first; the last full stop is punctuation
    ("vie_hanoi", "5/3/2024", "năm tháng ba hai nghìn lẻ hai mươi bốn"),
    ("dut", "05-03-2024", "vijf maart tweeduizendvierentwintig"),
    ("ita", "31/12/1999 e 45/12/1999", "trentuno dicembre millenovecentonovantanove e quarantacinque/dodici/"
                                       "millenovecentonovantanove"),  # no 45th: not a date
])
def test_numeric_dates_in_the_language_order_with_its_month_names(language, text, said):
    assert spoken(language, text) == said


@pytest.mark.parametrize("language,text,said", [
    ("bul", "21 и 5%", "двайсет и едно и пет процента"),
    ("bul", "5 лв. и 3,50 лв", "пет лева и три лева петдесет"),
    ("gre", "21 και 5%", "είκοσι ένα και πέντε τοις εκατό"),
    ("arm_e", "21 5%", "քսանմեկ հինգ տոկոս"),
    ("geo", "21 5%", "ოცდაერთი ხუთი პროცენტი"),
    ("khm", "21 5%", "ម្ភៃ មួយ ប្រាំ ភាគរយ"),  # CLDR's zero-width spaces: a word each
    ("mlt_latn", "21 900 5%", "wieħed u għoxrin disa mija ħamsa fil mija"),  # disaʼ's modifier apostrophe: no model reads it
])
def test_numbers_from_cldr_where_num2words_has_none(language, text, said):
    assert spoken(language, text) == said


def test_adyghe_numbers_stay_unread_and_flagged():
    (token,) = reader(read_rules("ady")).read("21")
    assert token.unread == (0, 1) and not token.words


@pytest.mark.parametrize("language,text,said", [
    ("rum", "21 și 5% și 3,5", "douăzeci și unu și cinci la sută și trei virgulă cinci"),
    ("vie_hanoi", "5%", "năm phần trăm"), ("wel_sw", "5%", "pump y cant"), ("hbs_latn", "5%", "pet posto"),
])
def test_percent_and_the_decimal_word_in_num2words_languages(language, text, said):
    assert spoken(language, text) == said  # the decimal word as written (virgulă), not its bytes


def test_romanian_si_in_a_number_is_read_by_its_rule():
    """și has a letter g2p-ron was never trained on: the number word is said by the rule (ʃ i)."""
    (token,) = TextReader(read_rules("rum")).read("21")
    assert [(w.text, w.said) for w in token.words] == [("douăzeci", None), ("și", ("ʃ", "i")), ("unu", None)]


def test_a_rule_word_the_lexicon_has_is_said_by_rule_where_the_model_cannot_read_it():
    """The lexicon's reading comes first, but a word whose letters the model cannot read would be
    unread with it: the rule says it (Romanian și once a lexicon lists it)."""
    rules = read_rules("rum")
    cannot = Script(True, frozenset("abcdefghijlmnoprstuvxyzâîăț"), str.lower, list)
    can = Script(True, frozenset("abcdefghijlmnoprstuvxyzâîățș"), str.lower, list)
    (token,) = TextReader(rules).read("și", cannot, known={"și"})
    assert token.words[0].said == ("ʃ", "i") and not token.unread
    (token,) = TextReader(rules).read("și", can, known={"și"})
    assert token.words[0].said is None and not token.unread  # the lexicon's, as before
    italian = Script(True, frozenset("abcdefghilmnopqrstuvz"), str.lower, list)
    (token,) = TextReader(read_rules("ita")).read("è", italian, known={"è"})
    assert (token.words[0].text, token.words[0].said) == ("è", ("ɛ",))  # said by rule, not respelled e


def test_a_spelling_line_is_one_letter_to_letters(tmp_path):
    own = tmp_path / "text.tsv"
    own.write_text("spelling\tςσ\tσ\n", encoding="utf-8")
    with pytest.raises(LexiconError, match="a spelling is one letter"):
        read_rules("gre", own)


def test_letters_the_model_lacks_are_read_as_its_spelling():
    alphabet = frozenset("αβγδεζηθικλμνξοπρστυφχψωάέήίόύώ")
    script = Script(True, alphabet, str.lower, list)
    tokens = TextReader(read_rules("gre")).read("γάτες", script) + TextReader(read_rules("gre")).read(
        "ΟΙ ΓΆΤΕΣ ΤΗΣ", script)  # shouted: its capitals are words, and lower-casing would make Σ ς again
    assert [(w.text, w.letters) for t in tokens for w in t.words] == [
        ("γάτεσ", (0, 1, 2, 3, 4)), ("ΟΙ", (0, 1)), ("ΓΆΤΕσ", (3, 4, 5, 6, 7)), ("ΤΗσ", (9, 10, 11))]
    assert not any(t.unread for t in tokens)
    with_sigma = Script(True, alphabet | {"ς"}, str.lower, list)  # a model that reads ς keeps it
    assert TextReader(read_rules("gre")).read("γάτες", with_sigma)[0].words[0].text == "γάτες"
    hy = Script(True, frozenset("եւրվան"), str.lower, list)
    (word,) = TextReader(read_rules("arm_e")).read("երևան", hy)[0].words
    assert (word.text, word.letters) == ("երեւան", (0, 1, 2, 2, 3, 4))  # և's two letters both trace to it


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return shipped_repository(tmp_path_factory.mktemp("language-models"),
                              ("g2p-en", "g2p-jpn-hira", "g2p-kor", "g2p-ron", "g2p-ell", "g2p-ita"))


@pytest.fixture(scope="module")
def server_setup(repository):
    return ServerSetup(loopback_config(model_repository=repository, default_model="g2p-en",
                                       server={"metrics_port": 0}, answering={"cache_entries": 1000}))


def check_read_whole(text: str, r) -> None:
    check_cover(text, r)
    check_punctuation_kept(text, r)
    assert r.complete and not [t.text for t in r.tokens if t.unread], text


async def test_a_japanese_sentence_with_katakana_and_a_number(stub):
    text = "ペンを3本ください。"
    r = (await read(stub, text, model="g2p-jpn-hira"))[0]
    check_read_whole(text, r)
    assert [(t.text, t.spoken) for t in r.tokens] == [("ペン", "ぺん"), ("を", "お"), ("3本", "さんぼん"),
                                                      ("ください", "ください"), ("。", "")]
    pen, wo, hon = (t.words[0] for t in r.tokens[:3])
    assert pen.result.output_text == "p ẽ̞ ɴ"
    assert wo.result.output_text == "o̞" and wo.choice == RULE_CHOICE  # the particle, said by its rule
    assert hon.result.output_text == "s ã̠ m b õ̞ ɴ"  # さんぼん, its n before b said m
    assert (hon.start, hon.end) == (3, 5)  # the number and its counter


async def test_japanese_kanji_and_the_particle_wa_over_the_server(stub):
    text = "今日は東京へ行きます。"
    r = (await read(stub, text, model="g2p-jpn-hira"))[0]
    check_read_whole(text, r)
    wa = next(t for t in r.tokens if t.text == "は")
    assert wa.spoken == "わ" and wa.words[0].result.output_text == "ɰᵝ a̠"


async def test_korean_native_counters_over_the_server(stub):
    text = "사과 3개와 학생 2명이 10:30에 ₩5,000을 냈어요."
    r = (await read(stub, text, model="g2p-kor"))[0]
    check_read_whole(text, r)
    assert [t.spoken for t in r.tokens if t.kind == pb.TOKEN_KIND_NUMBER] == ["세", "두", "열 시 삼십 분", "오천 원"]


async def test_a_romanian_date_and_time_over_the_server(stub):
    text = "Pe 05.03.2024 la 10:30."
    r = (await read(stub, text, model="g2p-ron"))[0]
    check_read_whole(text, r)
    assert [t.spoken for t in r.tokens if t.kind == pb.TOKEN_KIND_NUMBER] == [
        "cinci martie două mii douăzeci și patru", "zece treizeci"]


async def test_romanian_si_numbers_and_percent_over_the_server(stub):
    text = "Am 21 de câini și 5% mai mult."
    r = (await read(stub, text, model="g2p-ron"))[0]
    check_read_whole(text, r)
    assert " ".join(t.spoken for t in r.tokens if t.words) == "Am douăzeci și unu de câini și cinci la sută mai mult"
    si = [w for t in r.tokens for w in t.words if w.result.output_text == "ʃ i"]
    assert len(si) == 2 and all(w.choice == RULE_CHOICE for w in si)


async def test_greek_final_sigma_numbers_and_time_over_the_server(stub):
    text = "Οι 21 γάτες της, 5%, 3,50 € και 10:30."
    r = (await read(stub, text, model="g2p-ell"))[0]
    check_read_whole(text, r)
    assert [t.spoken for t in r.tokens if t.words] == ["Οι", "είκοσι ένα", "γάτες", "της", "πέντε", "τοις εκατό",
                                                       "τρία ευρώ πενήντα", "και", "δέκα τριάντα"]
    tis = next(t for t in r.tokens if t.text == "της").words[0]
    assert tis.result.output_text.endswith("s")  # ς read as the σ the model was trained on


async def test_italian_e_is_the_verb(stub):
    text = "È vero, il caffè è buono."
    r = (await read(stub, text, model="g2p-ita"))[0]
    check_read_whole(text, r)
    verbs = [t.words[0] for t in r.tokens if t.text in ("È", "è")]
    assert [w.result.output_text for w in verbs] == ["ɛ", "ɛ"] and all(w.choice == RULE_CHOICE for w in verbs)
