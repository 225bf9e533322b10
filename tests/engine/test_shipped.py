"""The shipped model through the real entry points: what `make serve` and the README promise."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from service.engine.bundle import load_bundle
from tests.conftest import SHIPPED_MODEL
from tests.helpers import free_port, wait_serving

BIN = Path(sys.executable).parent


def test_shipped_bundle_verifies_and_states_its_quality():
    m = load_bundle(SHIPPED_MODEL).manifest  # sha256 of every file checked
    assert m["parity"]["words"] >= 1000 and m["parity"]["output_mismatches"] == 0
    assert m["parity"]["max_attn_abs_diff"] <= 1e-4
    assert m["metrics"]["test"]["wer"] <= 0.30 and m["metrics"]["test"]["per"] <= 0.08
    assert "filter" in m["data"] and "split" in m["data"]


def start_shipped() -> tuple[subprocess.Popen, str]:
    """`attnserve-server` on the shipped model, once it reports SERVING: the process and its address."""
    port, metrics_port = free_port(), free_port()
    env = {**os.environ, "ATTNSERVE_METRICS_PORT": str(metrics_port)}  # env equivalents work too
    proc = subprocess.Popen([str(BIN / "attnserve-server"), "--model-dir", str(SHIPPED_MODEL),
                             "--host", "127.0.0.1", "--port", str(port), "--grace-period-s", "5"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    addr = f"127.0.0.1:{port}"
    try:
        wait_serving(addr, 90, proc)
    except RuntimeError as e:  # it exited
        pytest.fail(f"{e}:\n{proc.stdout.read()}")
    except TimeoutError as e:
        proc.kill()
        pytest.fail(str(e))
    check = subprocess.run([sys.executable, "-m", "service.client.healthcheck", "--addr", addr, "--timeout-s", "5"],
                           capture_output=True, text=True)  # what the image's HEALTHCHECK runs
    assert (check.returncode, check.stdout.strip()) == (0, "SERVING"), check.stderr
    return proc, addr


@pytest.fixture(scope="module")
def served():
    """One server for the module's tests: none of them stops it."""
    proc, addr = start_shipped()
    yield proc, addr
    if proc.poll() is None:
        proc.kill()


def client(addr, *args):
    return subprocess.run([str(BIN / "attnserve-client"), "phonemes", *args, "--server", addr],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "120"})


def test_client_one_liner_prints_phonemes_and_a_heat_map(served):
    _, addr = served
    out = client(addr, "attention")
    assert out.returncode == 0, out.stderr
    assert "AH T EH N SH AH N" in out.stdout
    first_lines = out.stdout.splitlines()
    assert any(all(ch in line for ch in "atention") for line in first_lines)  # letter column labels


def test_client_json_and_png(served, tmp_path):
    _, addr = served
    out = client(addr, "knight", "phoenix", "--json")
    data = json.loads(out.stdout)
    knight = data["results"][0]
    assert knight["output_text"] == "N AY T"
    assert knight["attention"]["rows"] == 4 and knight["attention"]["cols"] == 6
    png = tmp_path / "attn.png"
    out = client(addr, "exit", "--png", str(png))
    assert out.returncode == 0, out.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_dictionary_words_come_back_as_cmudict_has_them_and_the_model_is_one_flag_away(served):
    _, addr = served
    words = {"one": "W AH N", "though": "DH OW", "enough": "IH N AH F", "colonel": "K ER N AH L"}
    data = json.loads(client(addr, *words, "--json").stdout)
    for r in data["results"]:
        assert (r["output_text"], r["origin"]) == (words[r["input"]], "LEXICON"), r["input"]
        rows, cols = r["attention"]["rows"], r["attention"]["cols"]
        assert (rows, cols) == (len(r["output_tokens"]) + 1, len(r["input"]))  # the model's forced alignment
    model = json.loads(client(addr, *words, "--json", "--no-lexicon").stdout)
    assert all(r["origin"] == "MODEL" for r in model["results"])
    assert sum(r["output_text"] != words[r["input"]] for r in model["results"]) >= 3  # what the issue found


def test_client_score_prints_both_candidates_best_first(served):
    _, addr = served
    out = subprocess.run([str(BIN / "attnserve-client"), "score", "knight", "N AY T", "K N IH G T", "--server", addr],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "120"})
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if "->" in line]
    assert [line.split("->")[1].split("log_prob")[0].strip() for line in lines] == ["N AY T", "K N IH G T"]
    assert out.stdout.count("</s>") >= 4  # per-token line and heat map of each


def test_the_shipped_model_is_served_in_int8_by_default_as_its_wer_and_batch_check_allow(served):
    # make quantize measured int8's dev WER within 0.1 points of fp32's (its test WER too) and its
    # answers independent of the batch: --precision auto serves it
    m = load_bundle(SHIPPED_MODEL).manifest
    for split in ("dev", "test"):
        assert m["int8"]["metrics"][split]["wer"] - m["metrics"][split]["wer"] <= 0.001
    assert m["int8"]["batch_independence"]["independent"] is True
    _, addr = served
    out = subprocess.run([str(BIN / "attnserve-client"), "info", "--json", "--server", addr],
                         capture_output=True, text=True, timeout=60)
    assert json.loads(out.stdout)["precision"] == "int8", out.stdout + out.stderr


def test_sigterm_exits_cleanly():
    proc, _ = start_shipped()  # its own: the module's server serves the other tests, in any order
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
