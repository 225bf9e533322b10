"""attnserve-client without a model server: hand-built Results and an in-process fake servicer."""
import io
import json
import re
import subprocess
import sys
import threading
from concurrent import futures

import grpc
import numpy as np
import pytest
from rich.console import Console

from attnserve.v1 import attnserve_pb2, attnserve_pb2_grpc
from service.client import client

WEIGHTS = [[0.9, 0.1], [0.2, 0.8], [0.3, 0.7]]


def make_result(with_attention=True):
    r = attnserve_pb2.Result(output_tokens=["N", "OW"], output_text="N OW", log_prob=-0.25, finished=True)
    if with_attention:
        r.attention.CopyFrom(attnserve_pb2.Attention(
            rows=3, cols=2, weights=[w for row in WEIGHTS for w in row],
            source_labels=["n", "o"], target_labels=["N", "OW", "</s>"]))
    return r


def render_text(renderable, width=120):
    console = Console(record=True, width=width, file=open("/dev/null", "w"))
    console.print(renderable)
    return console.export_text()


def test_attention_matrix_shape_and_values():
    m = client.attention_matrix(make_result())
    assert m.shape == (3, 2)
    np.testing.assert_allclose(m, WEIGHTS, rtol=1e-6)
    np.testing.assert_allclose(m.sum(axis=1), 1.0, rtol=1e-6)


def test_attention_matrix_absent_and_malformed():
    assert client.attention_matrix(make_result(with_attention=False)).shape == (0, 0)
    bad = make_result()
    bad.attention.rows = 4
    with pytest.raises(ValueError):
        client.attention_matrix(bad)


def test_result_to_dict_json_round_trip():
    d = client.result_to_dict("no", make_result())
    assert json.loads(json.dumps(d)) == d
    assert d["input"] == "no" and d["output_tokens"] == ["N", "OW"] and d["output_text"] == "N OW"
    assert d["log_prob"] == -0.25 and d["finished"] is True
    att = d["attention"]
    assert (att["rows"], att["cols"]) == (3, 2)
    assert att["weights"] == WEIGHTS  # float32 values come back as their short decimals
    assert att["source_labels"] == ["n", "o"] and att["target_labels"] == ["N", "OW", "</s>"]
    assert client.result_to_dict("no", make_result(with_attention=False))["attention"] is None


def test_render_heatmap_labels_and_values():
    text = render_text(client.render_heatmap(make_result()))
    lines = text.splitlines()
    assert "n" in lines[0] and "o" in lines[0]
    for label in ["N", "OW", "</s>"]:
        assert any(line.startswith(label) for line in lines)
    assert "0.90" in text and "0.80" in text


def test_render_heatmap_narrow_drops_values_and_colour_output():
    text = render_text(client.render_heatmap(make_result()), width=8)
    assert "0.90" not in text and "</s>" in text
    # With colour the intensity is a background colour, one per level.
    console = Console(record=True, width=120, force_terminal=True, color_system="truecolor",
                      file=open("/dev/null", "w"))
    console.print(client.render_heatmap(make_result()))
    assert "48;2;" in console.export_text(styles=True)
    assert "no attention" in render_text(client.render_heatmap(make_result(with_attention=False)))


def test_write_png(tmp_path):
    path = tmp_path / "attn.png"
    client.write_png([("no", make_result()), ("no", make_result())], path)
    assert path.read_bytes().startswith(b"\x89PNG")


# A letter of every script the SIGMORPHON 2021 languages are written in (Armenian, Georgian, Hangul,
# Hiragana, Khmer, Cyrillic, Greek, Latin with diacritics) and IPA on the target side.
SCRIPTS = ["ա", "ქ", "한", "ひ", "ក", "ж", "λ", "ç"]
IPA = ["ʃ", "d͡ʒ", "ɑ̃", "˧˧"]


def every_script_result():
    S, T = len(SCRIPTS), len(IPA) + 1
    return attnserve_pb2.Result(output_tokens=IPA, output_text=" ".join(IPA), log_prob=-1.0, finished=True,
                                attention=attnserve_pb2.Attention(rows=T, cols=S, weights=[1.0 / S] * (S * T),
                                                                  source_labels=SCRIPTS, target_labels=IPA + ["</s>"]))


def test_the_png_heat_map_has_a_glyph_for_every_script(tmp_path, monkeypatch):
    import warnings

    from service.client import heatmap

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns "Glyph ... missing from font(s)" for a tofu box
        client.write_png([("ա ქ 한 ひ ក", every_script_result())], tmp_path / "scripts.png")
    assert (tmp_path / "scripts.png").read_bytes().startswith(b"\x89PNG")
    # the check can fail: with DejaVu Sans alone, Hangul, Hiragana and Khmer have no glyph
    monkeypatch.setattr(heatmap, "FONT_FAMILIES", ("DejaVu Sans",))
    with pytest.warns(UserWarning, match="missing from font"):
        client.write_png([("한", every_script_result())], tmp_path / "tofu.png")


def test_the_terminal_heat_map_aligns_wide_characters():
    text = render_text(client.render_heatmap(every_script_result()), width=200)
    header, *rows = text.splitlines()
    assert all(ch in header for ch in SCRIPTS)
    from rich.cells import cell_len
    assert len({cell_len(line.rstrip()) for line in rows if line.strip()}) == 1  # every row as wide as the next


def test_client_imports_neither_torch_nor_matplotlib():
    code = "import sys, service.client.client; assert not {'torch', 'matplotlib'} & set(sys.modules), sys.modules.keys()"
    subprocess.run([sys.executable, "-c", code], check=True)


class FakeTransducer(attnserve_pb2_grpc.TransducerServicer):
    def Transduce(self, request, context):
        if "" in request.inputs:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "empty input")
        results = [make_result(request.options.return_attention) for _ in request.inputs]
        return attnserve_pb2.TransduceResponse(results=results, model_name="g2p-en", model_version="1")

    def GetModelInfo(self, request, context):
        return attnserve_pb2.ModelInfo(name="g2p-en", version="1", source_vocab=["a", "b"],
                                       target_vocab=["AA"], metrics={"test_wer": 0.25}, config_json='{"h": 8}')


@pytest.fixture(scope="module")
def fake_server():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    attnserve_pb2_grpc.add_TransducerServicer_to_server(FakeTransducer(), server)
    port = server.add_insecure_port("localhost:0")
    server.start()
    yield f"localhost:{port}"
    server.stop(None)


def test_main_json(fake_server, capsys, monkeypatch):
    monkeypatch.setenv("ATTNSERVE_SERVER", fake_server)
    assert client.main(["phonemes", "no", "no", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"] == {"name": "g2p-en", "version": "1"}
    assert [r["output_text"] for r in doc["results"]] == ["N OW", "N OW"]
    assert doc["results"][0]["attention"]["weights"] == WEIGHTS


def test_main_text_png_and_alias(fake_server, capsys, tmp_path):
    png = tmp_path / "out.png"
    assert client.main(["transduce", "no", "--server", fake_server, "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "no -> N OW" in out and "p=0.7788" in out and "</s>" in out
    assert png.read_bytes().startswith(b"\x89PNG")
    assert client.main(["phonemes", "no", "--server", fake_server, "--no-attention"]) == 0
    assert "</s>" not in capsys.readouterr().out


def test_main_info(fake_server, capsys):
    assert client.main(["info", "--server", fake_server, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["metrics"] == {"test_wer": 0.25} and doc["source_vocab_size"] == 2 and doc["config"] == {"h": 8}
    assert client.main(["info", "--server", fake_server]) == 0
    assert "test_wer" in capsys.readouterr().out


def test_main_grpc_errors(fake_server, capsys):
    assert client.main(["phonemes", "", "--server", fake_server]) == 1
    assert capsys.readouterr().err.strip() == "error: INVALID_ARGUMENT: empty input"
    # Nothing listens on port 1: fails fast with UNAVAILABLE.
    assert client.main(["info", "--server", "localhost:1", "--timeout-s", "5"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: UNAVAILABLE: ") and "Traceback" not in err


# ------------------------------------------------------- beam search and bulk --

class EchoTransducer(attnserve_pb2_grpc.TransducerServicer):
    """Output = the input upper-cased, with n_best hypotheses; a call holding a `slow` input is
    answered only once `overtakers` other calls have been."""

    def __init__(self):
        self.requests = []
        self.slow: set[str] = set()
        self.overtakers = 0
        self.answered = 0  # calls without a slow input
        self.lock = threading.Condition()

    def Transduce(self, request, context):
        slow = bool(self.slow & set(request.inputs))
        with self.lock:
            self.requests.append(request)
            if slow and not self.lock.wait_for(lambda: self.answered >= self.overtakers, 30):
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "no later call overtook the slow one")
        if "BAD" in request.inputs:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "inputs[0] is bad")
        n = max(1, request.options.n_best)
        results = []
        for text in request.inputs:
            hyps = [attnserve_pb2.Result(output_tokens=[text.upper()], output_text=f"{text.upper()}{'*' * k}",
                                         log_prob=-0.5 * (k + 1), score=-1.0 * (k + 1), finished=True)
                    for k in range(n)]
            hyps[0].alternatives.extend(hyps[1:])
            results.append(hyps[0])
        if not slow:
            with self.lock:
                self.answered += 1
                self.lock.notify_all()
        return attnserve_pb2.TransduceResponse(results=results, model_name="echo", model_version="1")


@pytest.fixture
def echo_server():
    fake = EchoTransducer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    attnserve_pb2_grpc.add_TransducerServicer_to_server(fake, server)
    port = server.add_insecure_port("localhost:0")
    server.start()
    yield f"localhost:{port}", fake
    server.stop(None)


def test_beam_and_n_best_print_every_hypothesis_with_its_score(echo_server, capsys):
    address, fake = echo_server
    assert client.main(["phonemes", "knight", "--server", address, "--beam", "4", "--n-best", "3"]) == 0
    opts = fake.requests[-1].options
    assert (opts.beam_size, opts.n_best) == (4, 3)
    out = capsys.readouterr().out
    for rank, text, score in [(1, "KNIGHT", "-1.0000"), (2, "KNIGHT*", "-2.0000"), (3, "KNIGHT**", "-3.0000")]:
        assert re.search(rf"^\s+{rank}\. {re.escape(text)}\s+score {score}", out, re.M), out
    # --n-best alone widens the beam to K; JSON carries the alternatives with their scores.
    assert client.main(["phonemes", "knight", "--server", address, "--n-best", "2", "--json"]) == 0
    assert (fake.requests[-1].options.beam_size, fake.requests[-1].options.n_best) == (2, 2)
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert result["score"] == -1.0
    assert [(a["output_text"], a["score"]) for a in result["alternatives"]] == [("KNIGHT*", -2.0)]
    # Greedy by default.
    assert client.main(["phonemes", "knight", "--server", address]) == 0
    assert (fake.requests[-1].options.beam_size, fake.requests[-1].options.n_best) == (1, 1)


@pytest.mark.parametrize("argv,message", [
    (["--beam", "2", "--n-best", "3", "x"], "--n-best 3 needs --beam 3"),
    (["--beam", "0", "x"], "must be >= 1"),
    (["x", "--file", "words.txt"], "not both"),
    ([], "no inputs"),
    (["--file", "words.txt", "--png", "a.png"], "--png"),
])
def test_argument_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        client.main(["phonemes", *argv])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_png_without_matplotlib_names_the_extra_before_calling(monkeypatch, capsys):
    """matplotlib is the [client] extra, not the base install: --png says so before any call is made."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else find_spec(name, *a))
    with pytest.raises(SystemExit) as e:
        client.main(["phonemes", "x", "--png", "a.png", "--server", "localhost:1"])
    assert e.value.code == 2 and "attnserve[client]" in capsys.readouterr().err


def test_bulk_file_sends_batches_and_prints_tsv_in_input_order(echo_server, capsys, tmp_path):
    address, fake = echo_server
    words = [f"w{i:03d}" for i in range(150)]
    path = tmp_path / "words.txt"
    path.write_text("\n".join(words[:70]) + "\n\n  \n" + "\n".join(f" {w} " for w in words[70:]) + "\n")
    fake.slow, fake.overtakers = {words[0]}, 2  # the two later calls overtake the first: output stays in order
    assert client.main(["phonemes", "--file", str(path), "--server", address, "--batch-size", "64"]) == 0
    # Calls in flight together reach the server in any order.
    assert sorted(list(r.inputs) for r in fake.requests) == [words[:64], words[64:128], words[128:]]
    assert all(not r.options.return_attention for r in fake.requests)  # bulk output has no attention
    assert capsys.readouterr().out.splitlines() == [f"{w}\t{w.upper()}" for w in words]


def test_bulk_stdin_json_lines_and_n_best_tsv(echo_server, capsys, monkeypatch):
    address, _ = echo_server
    monkeypatch.setattr("sys.stdin", io.StringIO("alpha\nbeta\n"))
    assert client.main(["phonemes", "-", "--server", address, "--json"]) == 0
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(d["input"], d["output_text"]) for d in docs] == [("alpha", "ALPHA"), ("beta", "BETA")]
    monkeypatch.setattr("sys.stdin", io.StringIO("alpha\nbeta\n"))
    assert client.main(["phonemes", "--file", "-", "--n-best", "2", "--server", address]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "alpha\tALPHA\t-1.0000", "alpha\tALPHA*\t-2.0000", "beta\tBETA\t-1.0000", "beta\tBETA*\t-2.0000"]


def test_a_refused_bulk_line_is_reported_and_the_run_goes_on(echo_server, capsys, tmp_path):
    address, fake = echo_server
    path = tmp_path / "words.txt"
    path.write_text("ok\n\nBAD\nfine\nlast\n")  # line 3 is refused; the blank line is skipped
    assert client.main(["transduce", "--file", str(path), "--server", address, "--batch-size", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["ok\tOK", "fine\tFINE", "last\tLAST"]
    assert f"{path}:3: inputs[0] is bad" in captured.err and "1 of 4 inputs refused" in captured.err
    # the refused call [ok, BAD] was sent again input by input, [fine, last] once (the two first calls
    # are in flight together, so the server may see them in either order)
    assert sorted(list(r.inputs) for r in fake.requests) == [["BAD"], ["fine", "last"], ["ok"], ["ok", "BAD"]]
    assert client.main(["phonemes", "--file", str(path), "--server", address, "--json"]) == 2
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [d["input"] for d in docs] == ["ok", "BAD", "fine", "last"] and docs[1]["error"] == "inputs[0] is bad"


def test_a_bulk_run_stops_on_an_error_that_is_not_the_input(echo_server, capsys, tmp_path):
    address, _ = echo_server
    assert client.main(["phonemes", "--file", str(tmp_path / "missing.txt"), "--server", address]) == 1
    assert "No such file" in capsys.readouterr().err
    path = tmp_path / "words.txt"
    path.write_text("ok\n")
    assert client.main(["phonemes", "--file", str(path), "--server", "localhost:1", "--timeout-s", "2"]) == 1
    assert "error: UNAVAILABLE" in capsys.readouterr().err


def test_allow_unknown_reaches_the_request(echo_server, capsys):
    address, fake = echo_server
    assert client.main(["transduce", "ok", "--server", address, "--allow-unknown", "--no-attention"]) == 0
    assert fake.requests[-1].options.allow_unknown_symbols
    assert client.main(["transduce", "ok", "--server", address, "--no-attention"]) == 0
    assert not fake.requests[-1].options.allow_unknown_symbols


def test_bulk_progress_bar_on_a_terminal(echo_server):
    address, _ = echo_server
    console = Console(file=io.StringIO(), force_terminal=True, width=100)
    options = attnserve_pb2.DecodeOptions(return_attention=False)
    with grpc.insecure_channel(address) as channel:
        pairs = list(client.transduce_bulk(attnserve_pb2_grpc.TransducerStub(channel), ["a", "b", "c"], options,
                                           batch_size=2, console=console))
    assert [(w, r.output_text) for w, r in pairs] == [("a", "A"), ("b", "B"), ("c", "C")]
    screen = console.file.getvalue()
    assert "transducing" in screen and "3/3" in screen
