"""Number words in the served languages num2words lacks, from CLDR (languages/spellout.py), and `%`
and the decimal word in every language with number words; hand-written expected forms.
"""
import pytest

from service.answering.text import TextReader, spoken_text
from service.answering.textrules import read_rules

try:
    import unicode_rbnf  # noqa: F401  (a base dependency: an install from before it reads as before)
    CLDR = True
except ImportError:
    CLDR = False
needs_cldr = pytest.mark.skipif(not CLDR, reason="unicode-rbnf is not installed (pip install -e .)")


def spoken(language: str, text: str) -> str:
    return spoken_text(text, TextReader(read_rules(language)).read(text))


@needs_cldr
@pytest.mark.parametrize("language,text,said", [
    ("bul", "21 и 5%", "двайсет и едно и пет процента"),
    ("gre", "21 και 5%", "είκοσι ένα και πέντε τοις εκατό"),
    ("arm_e", "21 5%", "քսանմեկ հինգ տոկոս"),
    ("geo", "21 5%", "ოცდაერთი ხუთი პროცენტი"),
    ("khm", "21 5%", "ម្ភៃ មួយ ប្រាំ ភាគរយ"),  # CLDR's zero-width spaces: a word each
    ("mlt_latn", "21 900 5%", "wieħed u għoxrin disa mija ħamsa fil mija"),  # disaʼ's modifier apostrophe: no model reads it
])
def test_numbers_from_cldr_where_num2words_has_none(language, text, said):
    assert spoken(language, text) == said


def test_adyghe_numbers_stay_unread_and_flagged():
    (token,) = TextReader(read_rules("ady")).read("21")
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
