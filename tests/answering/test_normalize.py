"""Normalization over a real server (service/answering/normalize/): every class in English (g2p-en)
and French (g2p-fra), each with its spoken form written by hand here, the spans covering each text
with nothing dropped, punctuation in place, and a chunk's words pointing at the characters they read."""
from __future__ import annotations

import pytest

from attnserve.v1 import attnserve_pb2 as pb
from tests.live import ServerSetup, loopback_config, shipped_repository

ENGLISH = [  # (text, the words it is read as): every class
    ("It cost $3.25 and 12 apples.", "it cost three dollars twenty five cents and twelve apples"),  # money, cardinal
    ("Seoul spent ₩2.5 billion, £10/wk.", "seoul spent two point five billion won ten pounds per week"),  # scale, per
    ("He came 2nd of 31.", "he came second of thirty one"),  # ordinal
    ("It rose 0.05 percent.", "it rose zero point zero five percent"),  # decimal
    ("Add 3 1/2 cups, then 2/3 more.", "add three and a half cups then two thirds more"),  # fraction
    ("It weighs 12kg and runs at 5 km/h.", "it weighs twelve kilograms and runs at five kilometers per hour"),  # measure
    ("Born Mar. 4, 1999 in town.", "born march fourth nineteen ninety nine in town"),  # date, month first
    ("On 4 July 1776 they met.", "on the fourth of july seventeen seventy six they met"),  # date, day first
    ("Due 2024-02-29 or 12/31/2025.", "due february twenty ninth twenty twenty four or december thirty first twenty twenty five"),
    ("Wake at 6:45 a.m. PST, sleep at 10pm.", "wake at six forty five AM PST sleep at ten PM"),  # time, zone
    ("Dial (212) 555-0199 now.", "dial two one two five five five zero one nine nine now"),  # telephone
    ("Write to jo.ng@uni.edu or www.x.org/a-1.",
     "write to jo dot ng at uni dot edu or WWW dot x dot org slash a dash one"),  # electronic
    ("Go to 350 W 5th Ave, Boise, ID 83702.",
     "go to three fifty West fifth avenue Boise Idaho eight three seven zero two"),  # address
    ("It ran 1939-1945, a 1960s-1980s trend.",
     "it ran nineteen thirty nine to nineteen forty five a nineteen sixties to nineteen eighties trend"),  # range
    ("Code X7Y2 sent.", "code X seven Y two sent"),  # serial
    ("Read Chapter XII of Henry VIII.", "read chapter twelve of henry the eighth"),  # roman numerals
    ("Dr. Who met the NTSB.", "doctor who met the NTSB"),  # abbreviations
    ("So 7 + 3 = 10.", "so seven plus three equals ten"),  # math
    ("Rome fell in 476 AD.", "rome fell in four seventy six AD"),  # era
]

FRENCH = [
    ("Il a 21 chats.", "il a vingt et un chats"),  # cardinal
    ("La 1re et le 3e.", "la première et le troisième"),  # ordinal
    ("Il mesure 1,75 m.", "il mesure un virgule soixante-quinze mètre"),  # decimal, measure
    ("Ajoutez 3/4 et 1 1/2.", "ajoutez trois quarts et un et demi"),  # fraction
    ("Cela coûte 12,50 € ou 3 $.", "cela coûte douze euros et cinquante centimes ou trois dollars"),  # money
    ("Il roule à 90 km/h sur 12 km.", "il roule à quatre-vingt-dix kilomètres par heure sur douze kilomètres"),
    ("Né le 14/07/1989, le 1er mai.", "né le quatorze juillet mille neuf cent quatre-vingt-neuf le premier mai"),  # date
    ("Rendez-vous à 14h30 ou 9h.", "rendez vous à quatorze heures trente ou neuf heures"),  # time
    ("Appelez le 01 42 68 53 00.", "appelez le zéro un quarante-deux soixante-huit cinquante-trois zéro zéro"),  # telephone
    ("Écrivez à anne@site.fr.", "écrivez à anne arobase site point fr"),  # electronic
    ("De 10-20 kg.", "de dix à vingt kilogrammes"),  # range
    ("Au XIXe siècle, Louis XIV régnait.", "au dix-neuvième siècle louis quatorze régnait"),  # roman numerals
    ("Mᵐᵉ Roux et M. Dupont.", "madame roux et monsieur dupont"),  # abbreviations
    ("Au 12 bis rue Nationale, 69100 Villeurbanne.",
     "au douze bis rue nationale soixante-neuf cent villeurbanne"),  # address: a postcode
    ("Le vol AF447 en A330.", "le vol AF quatre cent quarante-sept en A trois cent trente"),  # serial
]


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return shipped_repository(tmp_path_factory.mktemp("normalize-models"), ("g2p-en", "g2p-fra"))


@pytest.fixture(scope="module")
def server_setup(repository):
    return ServerSetup(loopback_config(model_repository=repository, default_model="g2p-en",
                                       server={"metrics_port": 0}))


def words_of(result) -> str:
    """The words a text was read as, lower case, hyphens and punctuation as spaces."""
    spoken = " ".join(t.spoken for t in result.tokens if t.words)
    return " ".join(spoken.replace("-", " ").replace(",", " ").split()).lower()


def check(text: str, result) -> None:
    """Spans in order and covering the text but whitespace; each word inside its token; punctuation
    tokens in the pronunciation, in order; every token either read or punctuation, none unread."""
    at = 0
    for t in result.tokens:
        assert t.start >= at and text[at:t.start].strip() == "", (text, t.text)
        assert text[t.start:t.end] == t.text and t.end > t.start
        at = t.end
        for w in t.words:
            assert t.start <= w.start < w.end <= t.end, (text, t.text, w.text)
            assert w.result.output_tokens, (text, w.text)
        assert bool(t.words) == (t.kind == pb.TOKEN_KIND_WORD or t.kind != pb.TOKEN_KIND_PUNCTUATION), (text, t.text)
        assert not t.unread, (text, t.text)
    assert text[at:].strip() == ""
    marks, found = [t.text for t in result.tokens if t.kind == pb.TOKEN_KIND_PUNCTUATION], 0
    for mark in marks:
        found = result.pronunciation.find(mark, found)
        assert found >= 0, (text, mark)
        found += len(mark)


async def read(stub, texts, model):
    reply = await stub.TransduceText(pb.TransduceTextRequest(texts=[t for t, _ in texts], model_name=model,
                                                             options=pb.TextOptions()), timeout=60)
    return reply.results


@pytest.mark.parametrize("model, cases", [("g2p-en", ENGLISH), ("g2p-fra", FRENCH)], ids=["english", "french"])
async def test_every_class_reads_as_written_by_hand(stub, model, cases):
    for (text, spoken), r in zip(cases, await read(stub, cases, model)):
        assert words_of(r) == spoken.replace("-", " ").lower(), text
        check(text, r)


async def test_a_chunks_words_point_at_what_they_read(stub):
    text = "Born Mar. 4, 1999, call 212-555-0199 or Jo at 350 W 5th Ave."
    r = (await read(stub, [(text, "")], "g2p-en"))[0]
    tokens = {t.text: t for t in r.tokens}
    date = tokens["Mar. 4"]
    assert date.kind == pb.TOKEN_KIND_NUMBER
    assert {w.text: text[w.start:w.end] for w in date.words} == {"March": "Mar", "fourth": "4"}
    after = r.tokens[[t.text for t in r.tokens].index("Mar. 4") + 1]
    assert after.text == "," and after.kind == pb.TOKEN_KIND_PUNCTUATION  # the date's comma stays in place
    phone = tokens["212-555-0199"]
    assert [text[w.start:w.end] for w in phone.words] == ["212"] * 3 + ["555"] * 3 + ["0199"] * 4
    address = tokens["350 W 5th Ave"]
    assert [(w.text, text[w.start:w.end]) for w in address.words][-3:] == [("West", "W"), ("fifth", "5th"), ("avenue", "Ave")]
    assert [t.text for t in r.tokens][-1] == "."  # the sentence's full stop stays punctuation


async def test_a_text_without_anything_to_normalize_reads_as_the_scanner_reads_it(stub):
    r = (await read(stub, [("The cat sat on the mat.", "")], "g2p-en"))[0]
    assert [t.kind for t in r.tokens] == [pb.TOKEN_KIND_WORD] * 6 + [pb.TOKEN_KIND_PUNCTUATION]
    assert all(len(t.words) == 1 and t.words[0].start == t.start for t in r.tokens[:-1])


def test_random_digits_and_signs_are_read_with_every_character_in_one_token():
    """Strings of digits, signs, month names and unit letters (where the rules' patterns meet each
    other): each reads without an error, its tokens cover it in order, each word inside its token."""
    import random

    from service.answering.text import TextReader
    from service.answering.textrules import read_rules

    pieces = list("0123456789") * 4 + list("abcXYZIVXLCM .,:;/-+@$€£¥₩%#&*=()'\"°kgmhs") + \
        ["Jan ", "mai ", " St ", "www.", ".com", " am", "h", "e", "er", "th", " bis", ", CA "]
    rng = random.Random(68)
    readers = [TextReader(read_rules(language)) for language in ("eng", "fra")]
    found = ["it was 06° out", "b;69-666&4°5mai 0,:₩0,Z(°1er'££ St"]  # wetext's grammars assert on 06°
    for text in found + ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 40))) for _ in range(600)]:
        for reader in readers:
            at = 0
            for t in reader.read(text):
                assert t.start >= at and text[at:t.start].strip() == "" and text[t.start:t.end] == t.text, (text, t)
                assert all(t.start <= w.start < w.end <= t.end for w in t.words), (text, t)
                at = t.end
            assert text[at:].strip() == "", text
