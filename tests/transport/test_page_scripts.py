"""The attention page draws every script of the SIGMORPHON languages, in a real browser.

A tiny model trained in seconds on words of four scripts of the task's data (Hangul, Armenian,
Georgian, Khmer) with IPA outputs is served; the page is asked for one word of each. Each heat
map's column labels must be the word's characters and its row labels the IPA segments, and each
label must be drawn with a real glyph: two different characters that a font lacks are drawn as the
same missing-glyph box, so a label whose pixels equal another's, or a private-use character's, is
a box (the check is shown to catch boxes on two private-use characters).
"""
from pathlib import Path

import pytest

from tests.live import ThreadServer
from tests.transport.test_page import READ_PAGE, _set, _wait_state, browser  # noqa: F401 (browser: a fixture)
from tests.server.test_server import config

DATA = Path(__file__).resolve().parents[2] / "data" / "sigmorphon-2021"
SCRIPTS = {"kor": (DATA / "medium" / "kor_train.tsv", lambda ch: "\uac00" <= ch <= "\ud7a3"),
           "arm_e": (DATA / "medium" / "arm_e_train.tsv", lambda ch: "\u0531" <= ch <= "\u058f"),
           "geo": (DATA / "medium" / "geo_train.tsv", lambda ch: "\u10a0" <= ch <= "\u10ff"),
           "khm": (DATA / "low" / "khm_train.tsv", lambda ch: "\u1780" <= ch <= "\u17ff")}
PER_SCRIPT = 150

# Draws `text` in the computed font of `element` on a canvas and returns its pixels as one string.
PIXELS = """
const [element, text] = arguments;
const canvas = document.createElement("canvas");
canvas.width = 96; canvas.height = 64;
const ctx = canvas.getContext("2d");
ctx.font = getComputedStyle(element).font;
ctx.fillText(text, 8, 44);
return Array.from(ctx.getImageData(0, 0, canvas.width, canvas.height).data).join(",");
"""


def script_words() -> dict[str, list[tuple[str, str]]]:
    """The first PER_SCRIPT words of each language whose every character is of its script."""
    out = {}
    for lang, (path, of_script) in SCRIPTS.items():
        pairs = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]
        out[lang] = [(w, ipa) for w, ipa in pairs if all(of_script(ch) for ch in w)][:PER_SCRIPT]
    return out


@pytest.fixture(scope="module")
def scripts_bundle(tmp_path_factory) -> tuple[Path, dict]:
    from training import train
    from training.export import build_bundle

    words = script_words()
    corpus = tmp_path_factory.mktemp("scripts") / "scripts.tsv"
    corpus.write_text("".join(f"{w}\t{ipa}\n" for pairs in words.values() for w, ipa in pairs), encoding="utf-8")
    out = tmp_path_factory.mktemp("scripts-run")
    train.main(["--corpus", "tsv", "--tsv", str(corpus), "--out", str(out), "--hidden-size", "32", "--enc-layers", "1",
                "--emb-dim", "16", "--batch-size", "64", "--max-epochs", "1", "--lr", "0.01", "--dropout", "0.0",
                "--seed", "3", "--threads", "1"])
    model_dir = tmp_path_factory.mktemp("models") / "scripts"
    build_bundle(out / "best.pt", model_dir / "1", name="scripts", version="1", parity_words=50, lexicon=False)
    return model_dir, words


def test_every_script_is_drawn_with_real_glyphs(scripts_bundle, browser):  # noqa: F811 (the fixture)
    from selenium.webdriver.support.ui import WebDriverWait

    model_dir, words = scripts_bundle
    asked = [pairs[0][0] for pairs in words.values()]  # a training word of each script: in the alphabet
    with ThreadServer(config(model_dir)) as s:
        browser.get(f"http://127.0.0.1:{s.server.metrics_port}/")
        WebDriverWait(browser, 20).until(
            lambda d: d.execute_script("return document.querySelector('#model option[value=scripts]') !== null"))
        _set(browser, "beam", "1")
        _set(browser, "nbest", "1")
        _set(browser, "words", " ".join(asked))
        browser.find_element("id", "submit").click()
        _wait_state(browser, "done")
        maps = browser.execute_script(READ_PAGE)
        assert [m["word"] for m in maps] == asked
        for m, word in zip(maps, asked):
            assert m["cols"] == list(word)  # one column per character, labelled with it
            assert m["rows"] and m["rows"][-1] == "</s>" and all(r.strip() for r in m["rows"])
        heads = browser.find_elements("css selector", "table.heatmap thead th[scope=col]")
        labels = [h.text for h in heads]
        assert sorted(set(labels)) == sorted({ch for w in asked for ch in w})
        box_a = browser.execute_script(PIXELS, heads[0], "\ue000")
        box_b = browser.execute_script(PIXELS, heads[0], "\ue001")
        assert box_a == box_b  # the control: characters no font has are drawn alike, as a box
        drawn = {}
        for head, label in zip(heads, labels):
            drawn.setdefault(label, browser.execute_script(PIXELS, head, label))
        assert all(p != box_a for p in drawn.values()), [ch for ch, p in drawn.items() if p == box_a]
        assert len(set(drawn.values())) == len(drawn), "two characters drawn alike: boxes"
