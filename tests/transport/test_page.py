"""The attention page (service/transport/web/) in a real browser: Debian's headless Chromium, driven by
selenium through the system chromedriver, against a real server on loopback serving the tiny model.

The page's heat maps must hold exactly the attention the REST binding answers for the same request;
an API error must be shown on the page. The browser fetches nothing but the server's own files.
ATTNSERVE_SCREENSHOT=path also keeps the screenshot there.
"""
import json
import os
import shutil
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from service.engine.bundle import load_bundle
from tests.live import ThreadServer, copy_bundle
from tests.server.test_server import config

WORDS = ["knight", "attention"]
BEAM = N_BEST = 3


def _find(*names: str) -> str | None:
    for name in names:
        path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").is_file() else None)
        if path:
            return path
    return None


CHROMIUM = _find("chromium", "chromium-browser", "google-chrome")
CHROMEDRIVER = _find("chromedriver")
# No skip: `make test` installs both (make system-deps), so a green run means the browser ran.
assert CHROMIUM is not None and CHROMEDRIVER is not None, \
    "tests/transport/test_page.py needs Debian's chromium and chromium-driver: run `make system-deps`"


@pytest.fixture(scope="module")
def page_server(tiny_bundle):
    with ThreadServer(config(tiny_bundle)) as s:
        yield s.server


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # selenium-manager must never download a driver or browser
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900",
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-default-apps", "--disable-sync", "--disable-extensions"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()


def _rest_infer(port: int, words: list[str], parameters: dict) -> dict:
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(words)], "data": words}],
            "parameters": parameters}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/tiny/infer", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=20) as r:
        return {o["name"]: o for o in json.loads(r.read())["outputs"]}


# Every heat map and n-best row on the page, read in one round trip.
READ_PAGE = """
return Array.from(document.querySelectorAll("table.heatmap")).map((t) => ({
  word: t.dataset.word, item: +t.dataset.item, hypothesis: +t.dataset.hypothesis,
  cols: Array.from(t.querySelectorAll("thead th[scope=col]")).map((th) => th.textContent),
  rows: Array.from(t.querySelectorAll("tbody th[scope=row]")).map((th) => th.textContent),
  cells: Array.from(t.querySelectorAll("td")).map((td) => [+td.dataset.row, +td.dataset.col, td.dataset.weight,
                                                           td.title, td.style.backgroundColor]),
  heading: t.closest(".hypothesis").querySelector("h3").textContent,
  score: t.closest(".hypothesis").dataset.score,
}));
"""


def _set(driver, element_id: str, value: str) -> None:
    field = driver.find_element("id", element_id)
    field.clear()
    field.send_keys(value)


def _wait_state(driver, state: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 20).until(lambda d: d.execute_script("return document.body.dataset.state") == state)


def test_page_draws_the_rest_attention_and_shows_errors(page_server, browser, tmp_path):
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    port = page_server.metrics_port
    base = f"http://127.0.0.1:{port}"
    browser.get(base + "/")
    assert "attention" in browser.title
    # the model list comes from the repository index
    WebDriverWait(browser, 20).until(
        lambda d: d.execute_script("return document.querySelector('#model option[value=tiny]') !== null"))
    assert Select(browser.find_element("id", "model")).first_selected_option.get_attribute("value") == "tiny"

    _set(browser, "beam", str(BEAM))
    _set(browser, "nbest", str(N_BEST))
    _set(browser, "words", "  ".join(WORDS))
    browser.find_element("id", "words").send_keys(Keys.ENTER)  # Enter submits
    _wait_state(browser, "done")
    assert not browser.find_element("id", "error").is_displayed()

    rest = _rest_infer(port, WORDS, {"beam_size": BEAM, "n_best": N_BEST, "attention_mode": "soft"})
    B, N, T, S = rest["ATTENTION"]["shape"]
    attn = np.array(rest["ATTENTION"]["data"], dtype=np.float64).reshape(B, N, T, S)
    counts, cols_of = rest["HYPOTHESIS_COUNT"]["data"], rest["INPUT_LENGTH"]["data"]
    lengths = np.array(rest["OUTPUT_LENGTH"]["data"]).reshape(B, N)
    maps = browser.execute_script(READ_PAGE)
    assert [(m["item"], m["hypothesis"]) for m in maps] == [(b, k) for b in range(B) for k in range(counts[b])]
    assert sum(counts) > len(WORDS)  # beam search gave more than one hypothesis somewhere
    for m in maps:
        b, k = m["item"], m["hypothesis"]
        word, rows, cols = WORDS[b], int(lengths[b, k]), cols_of[b]
        output = rest["OUTPUT"]["data"][b * N + k]
        assert m["word"] == word
        assert m["cols"] == (list(word) if len(word) == cols else [str(j) for j in range(cols)])
        tokens = output.split()
        assert m["rows"] == (tokens + ["</s>"] if len(tokens) + 1 == rows else
                             tokens if len(tokens) == rows else [str(i) for i in range(rows)])
        assert output in m["heading"] and float(m["score"]) == pytest.approx(rest["SCORE"]["data"][b * N + k], abs=1e-6)
        # exactly the real rows x cols, each cell the REST weight (padding cut off)
        assert [(i, j) for i, j, *_ in m["cells"]] == [(i, j) for i in range(rows) for j in range(cols)]
        page = np.array([float(w) for _, _, w, *_ in m["cells"]]).reshape(rows, cols)
        assert np.allclose(page, attn[b, k, :rows, :cols], atol=1e-6, rtol=0)
        for i, j, w, title, background in m["cells"]:
            assert title.endswith(w) and background.startswith("rgb")
    # the heaviest cell is darker than the lightest (white-to-dark scale)
    cells = [c for m in maps for c in m["cells"]]
    darkest = min(cells, key=lambda c: sum(map(int, c[4][4:-1].split(","))))
    lightest = max(cells, key=lambda c: sum(map(int, c[4][4:-1].split(","))))
    assert float(darkest[2]) > float(lightest[2])
    # the n-best list: each hypothesis of each word with its score
    nbest = browser.execute_script("""return Array.from(document.querySelectorAll("section.word")).map((s) =>
        Array.from(s.querySelectorAll("table.nbest tbody tr")).map((r) => r.querySelector(".output").textContent));""")
    assert nbest == [[rest["OUTPUT"]["data"][b * N + k] for k in range(counts[b])] for b in range(B)]

    shot = tmp_path / "page.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 0
    if os.environ.get("ATTNSERVE_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["ATTNSERVE_SCREENSHOT"])

    # top-k attention: every row keeps at most top_k nonzero weights
    Select(browser.find_element("id", "mode")).select_by_value("topk")
    _set(browser, "topk", "1")
    browser.find_element("id", "submit").click()
    _wait_state(browser, "done")
    hard = browser.execute_script(READ_PAGE)
    assert hard and all(sum(float(w) > 0 for i, _, w, *_ in m["cells"] if i == r) <= 1
                        for m in hard for r in range(len(m["rows"])))

    # an API error (the test server allows 20 characters) is shown on the page, with no stale results
    _set(browser, "words", "x" * 21)
    browser.find_element("id", "submit").click()
    _wait_state(browser, "error")
    error = browser.find_element("id", "error")
    assert error.is_displayed() and "400" in error.text and "21 characters; the limit is 20" in error.text
    assert browser.find_elements("css selector", "table.heatmap") == []

    # nothing was fetched but the server's own files and API, and no script failed
    origins = browser.execute_script(
        "return performance.getEntriesByType('resource').map((e) => new URL(e.name).origin);")
    assert set(origins) == {base}
    severe = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"
              and "status of 400" not in e["message"]]  # the over-long word's answer
    assert severe == []


def test_page_sends_the_bearer_token(tiny_bundle, browser, tmp_path, monkeypatch):
    """The page and its files are open; the API answers 401 until the token field holds the token."""
    from selenium.webdriver.support.ui import WebDriverWait

    monkeypatch.delenv("ATTNSERVE_AUTH_TOKEN", raising=False)
    token_file = tmp_path / "token"
    token_file.write_text("page-secret\n")
    with ThreadServer(config(tiny_bundle, auth_token_file=str(token_file))) as s:
        browser.get(f"http://127.0.0.1:{s.server.metrics_port}/")
        error = browser.find_element("id", "error")
        WebDriverWait(browser, 20).until(lambda d: error.is_displayed())
        assert "401" in error.text and "missing bearer token" in error.text
        assert browser.find_elements("css selector", "#model option") == []
        _set(browser, "token", "page-secret")
        _set(browser, "words", "a")  # leaving the token field loads the model list with the token
        WebDriverWait(browser, 20).until(lambda d: d.find_elements("css selector", "#model option[value=tiny]"))
        assert not error.is_displayed()
        browser.find_element("id", "submit").click()
        _wait_state(browser, "done")
        assert browser.find_elements("css selector", "table.heatmap[data-word=a] td[data-weight]")


@pytest.fixture(scope="module")
def english_server(tiny_bundle, tmp_path_factory):
    """The tiny model declared English: its texts' numbers are read in English."""
    model_dir = tmp_path_factory.mktemp("page-en") / "tiny"
    copy_bundle(load_bundle(tiny_bundle, "1").path, model_dir / "1", language="en")
    with ThreadServer(config(model_dir)) as s:
        yield s.server


def test_page_reads_a_typed_sentence(english_server, browser):
    """The text box: a sentence typed and sent with Enter comes back as the REST binding reads it (text:
    true): the pronunciation with its punctuation, each token's span and kind, and each word's heat map
    on the sentence's own characters, cell for cell."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    port = english_server.metrics_port
    browser.get(f"http://127.0.0.1:{port}/")
    WebDriverWait(browser, 20).until(
        lambda d: d.execute_script("return document.querySelector('#model option[value=tiny]') !== null"))
    sentence = "in 1066, 3 kings met on the 14th."  # the tiny model reads lower case
    _set(browser, "text", sentence)
    browser.find_element("id", "text").send_keys(Keys.ENTER)
    _wait_state(browser, "done")
    assert not browser.find_element("id", "error").is_displayed()

    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [sentence]}],
            "parameters": {"text": True}, "outputs": [{"name": "OUTPUT"}, {"name": "TOKENS"}]}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/tiny/infer", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=20) as r:
        outputs = {o["name"]: o["data"][0] for o in json.loads(r.read())["outputs"]}
    doc = json.loads(outputs["TOKENS"])
    page = browser.execute_script("""return {
      pronunciation: document.querySelector(".text .pronunciation").textContent,
      spoken: document.querySelector(".text .spoken").textContent,
      tokens: Array.from(document.querySelectorAll("table.tokens tbody tr")).map((r) =>
        Array.from(r.querySelectorAll("td")).slice(0, 3).map((td) => td.textContent)),
      maps: Array.from(document.querySelectorAll("table.heatmap.chars")).map((t) => ({
        token: +t.dataset.token, word: +t.dataset.word,
        cols: Array.from(t.querySelectorAll("thead th[scope=col]")).map((th) => th.textContent),
        weights: Array.from(t.querySelectorAll("td")).map((td) => +td.dataset.weight)})),
    };""")
    assert page["pronunciation"] == outputs["OUTPUT"] and "," in page["pronunciation"] and page["pronunciation"][-1] == "."
    assert page["spoken"] == "read as: in ten sixty-six, three kings met on the fourteenth."
    assert page["tokens"] == [[f"{t['start']}\u2013{t['end']}", t["text"], t["kind"]] for t in doc["tokens"]]
    words = [(t, k, w) for t, token in enumerate(doc["tokens"]) for k, w in enumerate(token["words"])]
    assert [(m["token"], m["word"]) for m in page["maps"]] == [(t, k) for t, k, _ in words]
    for m, (_, _, w) in zip(page["maps"], words):
        assert m["cols"] == list(sentence[w["start"]:w["end"]])
        assert np.allclose(m["weights"], w["char_attention"]["weights"], atol=1e-9)
