"""Where a person tries the service: the page against a real server serving several shipped models
(models/: English, Bulgarian, Adyghe (both Cyrillic) and French), the Adyghe one first by name.

The page must open on the server's default model (--default-model) and read its own example
sentence right on first load; its picker names each model's language; a word or a text the chosen
model cannot read names the served models that can, on the page and in the gRPC error.
"""
import json
import urllib.request
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from attnserve.inference import grpc_service_pb2 as kpb, grpc_service_pb2_grpc as kpbg
from attnserve.v1 import attnserve_pb2 as pb
from attnserve.v1 import attnserve_pb2_grpc as pb_grpc
from service.client import client
from tests.live import ThreadServer
from tests.server.test_server import config
from tests.transport.test_page import _set, _wait_state, browser  # noqa: F401 (browser: a fixture)

MODELS = Path(__file__).resolve().parents[2] / "models"
SERVED = ("g2p-ady", "g2p-bul", "g2p-en", "g2p-fra")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    repository = tmp_path_factory.mktemp("repository")
    for name in SERVED:
        (repository / name).symlink_to(MODELS / name, target_is_directory=True)
    cfg = config(None)
    cfg = replace(cfg, model_dir=None, model_repository=repository, default_model="g2p-en",
                  server=replace(cfg.server, max_input_len=64))
    with ThreadServer(cfg) as s:
        yield s


def _options(driver) -> list[tuple[str, str, bool]]:
    return driver.execute_script("""return Array.from(document.querySelectorAll("#model option")).map((o) =>
        [o.value, o.textContent, o.selected]);""")


def _open(driver, port: int) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"http://127.0.0.1:{port}/")
    WebDriverWait(driver, 20).until(lambda d: len(_options(d)) == len(SERVED))


def test_the_page_opens_on_the_default_model_and_reads_its_example(served, browser):  # noqa: F811
    _open(browser, served.server.metrics_port)
    options = _options(browser)
    assert [o[0] for o in options] == list(SERVED)  # g2p-ady first by name ...
    assert [o[0] for o in options if o[2]] == ["g2p-en"]  # ... but the default is chosen
    labels = {value: label for value, label, _ in options}
    assert labels["g2p-en"].startswith("English \u2014 g2p-en") and "(default)" in labels["g2p-en"]
    assert labels["g2p-bul"].startswith("Bulgarian \u2014 g2p-bul")
    assert labels["g2p-fra"].startswith("French \u2014 g2p-fra")
    assert labels["g2p-ady"].startswith("Adyghe \u2014 g2p-ady")

    # Read on first load, the box empty: its example sentence, every word read
    browser.find_element("id", "read").click()
    _wait_state(browser, "done")
    assert not browser.find_element("id", "error").is_displayed()
    rows = browser.execute_script("""return Array.from(document.querySelectorAll("table.tokens tbody tr")).map((r) =>
        [r.className, r.querySelectorAll("td")[1].textContent, r.querySelectorAll("td")[3].textContent]);""")
    assert [t for _, t, _ in rows] == ["Dr.", "Smith", "paid", "$5.50", "on", "the", "14th", "."]
    assert all(cls != "unread" for cls, _, _ in rows), rows
    said = browser.find_element("css selector", ".text .pronunciation").text
    assert said.startswith("D AA K T ER | S M IH TH | P EY D | F AY V | D AA L ER Z") and said.endswith("."), said

    # Transduce on first load: its example words, knight among them
    browser.find_element("id", "submit").click()
    _wait_state(browser, "done")
    assert [s.get_attribute("data-word") for s in browser.find_elements("css selector", "section.word")] == \
        ["knight", "attention"]
    assert browser.find_elements("css selector", "section.word[data-word=knight] td.output")[0].text == "N AY T"


def test_an_unreadable_word_or_text_names_the_models_that_read_it(served, browser):  # noqa: F811
    _open(browser, served.server.metrics_port)
    _set(browser, "words", "жук")
    browser.find_element("id", "submit").click()
    _wait_state(browser, "error")
    error = browser.find_element("id", "error").text
    assert "400" in error and "outside the model's alphabet" in error and error.endswith("models that read it: g2p-ady, g2p-bul")

    _set(browser, "text", "Жук спи.")
    browser.find_element("id", "read").click()
    _wait_state(browser, "done")
    error = browser.find_element("id", "error")
    assert error.is_displayed() and error.text.endswith("models that read them: g2p-ady, g2p-bul"), error.text


def test_grpc_and_http_errors_name_the_models_that_read_it(served):
    with grpc.insecure_channel(served.address) as channel:
        stub = pb_grpc.TransducerStub(channel)
        with pytest.raises(grpc.RpcError) as e:
            stub.Transduce(pb.TransduceRequest(model_name="g2p-en", inputs=["жук"]), timeout=30)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "'ж' at position 0" in e.value.details() and e.value.details().endswith("models that read it: g2p-ady, g2p-bul")
        with pytest.raises(grpc.RpcError) as e:  # no served model reads Greek
            stub.Transduce(pb.TransduceRequest(model_name="g2p-en", inputs=["λόγος"]), timeout=30)
        assert e.value.details().endswith("no served model reads it")
        # each model by its own normalization: the English one folds accents, so it reads été too
        with pytest.raises(grpc.RpcError) as e:
            stub.Transduce(pb.TransduceRequest(model_name="g2p-bul", inputs=["été"]), timeout=30)
        assert e.value.details().endswith("models that read it: g2p-en, g2p-fra")
    # the models listing the page reads: the default and each language by name
    with urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{served.server.metrics_port}/v2/repository/index", data=b"{}", method="POST")) as r:
        index = {m["name"]: m for m in json.loads(r.read())}
    assert {n: (m["language_name"], m["default"]) for n, m in index.items()} == {
        "g2p-ady": ("Adyghe", False), "g2p-bul": ("Bulgarian", False), "g2p-en": ("English", True),
        "g2p-fra": ("French", False)}


def test_the_client_names_the_models_that_read_it(served, capsys):
    assert client.main(["phonemes", "жук", "--server", served.address, "--model", "g2p-en"]) == 1
    assert capsys.readouterr().err.strip().endswith("; models that read it: g2p-ady, g2p-bul")
    assert client.main(["text", "Жук спи.", "--server", served.address, "--model", "g2p-en"]) == 0
    assert "g2p-en reads none of its words; models that read it: g2p-ady, g2p-bul" in capsys.readouterr().out
    assert client.main(["text", "Жук спи.", "--server", served.address, "--model", "g2p-bul"]) == 0
    assert "reads none of its words" not in capsys.readouterr().out  # read: nothing to suggest


def _kserve_text(model: str, text: str, as_text: bool) -> kpb.ModelInferRequest:
    req = kpb.ModelInferRequest(model_name=model, parameters={"text": kpb.InferParameter(bool_param=as_text)})
    req.inputs.add(name="TEXT", datatype="BYTES", shape=[1],
                   contents=kpb.InferTensorContents(bytes_contents=[text.encode()]))
    if as_text:
        req.outputs.add(name="TOKENS")
    return req


def test_the_open_inference_protocol_names_them_too(served):
    """Over gRPC's Open Inference Protocol: the refusal of a word, and a text's TOKENS `readers` where the
    model reads none of its words (not where it reads one)."""
    with grpc.insecure_channel(served.address) as channel:
        stub = kpbg.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(_kserve_text("g2p-en", "жук", False), timeout=30)
        assert e.value.details().endswith("models that read it: g2p-ady, g2p-bul")

        def tokens(model, text):
            raw = stub.ModelInfer(_kserve_text(model, text, True), timeout=30).raw_output_contents[0]
            return json.loads(raw[4:].decode())  # one length-prefixed element
        assert tokens("g2p-en", "Жук спи.")["readers"] == ["g2p-ady", "g2p-bul"]
        assert "readers" not in tokens("g2p-en", "Жук, a cat.")
        assert tokens("g2p-en", "λόγος")["readers"] == []
