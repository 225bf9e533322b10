"""scripts/frequent_words.py's scoring on a small fixed case: a word is right when nothing of it is
unread and it sounds as one of its right readings; the shares are weighted by frequency; what text
needs replaces the file's readings (Japanese particles) or adds to them (English `the`); the table
lands between its markers.
"""
import importlib.util
import sys
from types import SimpleNamespace

from tests.conftest import REPO
from training.wikipron import Frequent, by_sound

spec = importlib.util.spec_from_file_location("frequent_words", REPO / "scripts" / "frequent_words.py")
frequent_words = importlib.util.module_from_spec(spec)
sys.modules.setdefault("frequent_words", frequent_words)  # its dataclass looks its module up
spec.loader.exec_module(frequent_words)


def result(pronunciation: str, complete: bool = True):
    return SimpleNamespace(pronunciation=pronunciation, complete=complete)


def test_token_weighted_shares_of_a_fixed_case():
    words = [Frequent("a", 0.5, False, ("a",)), Frequent("et", 0.3, True, ("e",)),
             Frequent("jusqu'à", 0.15, False, ("ʒ y s k ‿ a",)), Frequent("ça", 0.05, False, ("s a",))]
    served = [result("a"), result("e"), result("ʒ y s k a"), result("s a", complete=False)]
    alone = [result(""), result("ʒ y s k a"), result("s a")]  # the three words outside the task files
    everything, outside, wrong = frequent_words.score("fre", words, served, alone)
    assert (everything.words, everything.words_right) == (4, 3)
    assert abs(everything.share - 0.95) < 1e-9  # ça is partly unread: wrong, whatever it sounds like
    assert (outside.words, outside.words_right) == (3, 2)
    assert abs(outside.share - 0.2 / 0.7) < 1e-9  # an empty answer is wrong
    assert [w for w, *_ in wrong] == ["ça"]


def test_what_text_needs():
    ha = Frequent("は", 0.1, True, ("h a̠",))
    assert not frequent_words.read_right("jpn_hira", ha, result("h a̠"))  # the noun, not the particle
    assert frequent_words.read_right("jpn_hira", ha, result("ɰᵝ a̠"))
    the = Frequent("the", 0.1, False, ("ð i",))
    assert frequent_words.read_right("eng_us", the, result("ðə")) and frequent_words.read_right("eng_us", the, result("ði"))
    assert not frequent_words.read_right("fre", Frequent("the", 0.1, False, ("ð i",)), result("ðə"))


def test_english_is_compared_by_the_american_sound():
    # ARPAbet's IPA beside WikiPron's notation of the same sounds
    assert by_sound("ˈkɛɹ", "eng_us") == by_sound("k ɛ ə ɹ", "eng_us")
    assert by_sound("ˈnʌθɪŋ", "eng_us") == by_sound("n ə θ ɪ ŋ", "eng_us")
    assert by_sound("ˈlɪtəl", "eng_us") == by_sound("l ɪ t l̩", "eng_us")
    assert by_sound("tu", "eng_us") == by_sound("t uː", "eng_us")
    assert by_sound("ˈsɛd", "eng_us") != by_sound("s a ɪ d", "eng_us")
    assert by_sound("t uː") != by_sound("t u")  # elsewhere length is heard


def test_the_table_lands_between_its_markers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"intro\n{frequent_words.BEGIN}\nold\n{frequent_words.END}\noutro\n", encoding="utf-8")
    rows = [{"code": "fre", "model": "g2p-fra", "words": 4, "words_right": 3, "served": 0.95,
             "outside_words": 3, "outside": 0.2857}]
    frequent_words.write_table(page, frequent_words.table(rows, {"g2p-fra": {"served": 0.5}}))
    text = page.read_text(encoding="utf-8")
    assert text.startswith("intro\n") and text.endswith("outro\n") and "old" not in text
    assert "| fre | `g2p-fra` | 4 | 0.950 | 0.500 | 3 | 3 | 0.286 | no |" in text
