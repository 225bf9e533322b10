"""The bundle contract (attnserve/bundle): format 1 read as format 2 in one place, an unknown format refused
by name, what `write` writes read back the same, and a manifest that breaks the contract refused. Torch-free."""
import json
from pathlib import Path

import pytest

from attnserve.bundle import FORMAT_VERSION, MANIFEST, Manifest, ManifestError, as_manifest, load, read, write
from attnserve.bundle.normalization import NORMALIZATIONS, SOURCE_FORMS, lowercases, normalizer

REPO = Path(__file__).resolve().parents[2]
V1 = {"format_version": 1, "name": "m", "version": "1", "graphs": {"encoder": "encoder.onnx"},
      "src_vocab": ["<pad>", "<s>", "</s>", "<unk>", "a"], "tgt_vocab": ["<pad>", "<s>", "</s>", "<unk>", "A"],
      "special_ids": {"pad": 0, "bos": 1, "eos": 2, "unk": 3}, "model_config": {"attention": "none"},
      "data": {"corpus": "cmudict", "src_tokens": "chars", "tgt_tokens": "words"}, "metrics": {"dev": {"wer": 0.2}}}


def test_a_format_1_manifest_reads_as_format_2():
    m = as_manifest({**V1, "lowercase_input": True})  # from before source_normalization: lower case
    assert m.format_version == FORMAT_VERSION == 2
    assert (m.source_normalization, m.src_tokenization, m.tgt_tokenization) == ("lower", "chars", "words")
    assert m.language == "en" and not m.has_attention and m.attention_modes == ()  # CMUdict; no attention
    assert m.dev_wer == 0.2 and m.data["corpus"] == "cmudict"  # experiments' keys kept as written
    assert "lowercase_input" not in m.to_dict() and as_manifest(V1).source_normalization == "none"
    stated = as_manifest({**V1, "lowercase_input": True, "source_normalization": "nfc-lower",
                          "text_policy": {"source_normalization": "nfc-lower", "why": "w"}})
    assert stated.source_normalization == "nfc-lower" and stated.extra["text_policy"] == {"why": "w"}


def test_every_shipped_manifest_reads_and_states_its_normalization_once():
    for path in sorted(REPO.glob("models/*/*/manifest.json")):
        on_disk = json.loads(path.read_text(encoding="utf-8"))
        m = read(path.parent)
        assert m.source_normalization == on_disk["source_normalization"], path
        if "lowercase_input" in on_disk:  # format 1's; format 2 states the normalization alone
            assert lowercases(m.source_normalization) == on_disk["lowercase_input"], path
        d = m.to_dict()
        assert "lowercase_input" not in d and "source_normalization" not in d.get("text_policy", {}), path


def test_an_unknown_format_is_refused_by_name(tmp_path):
    (tmp_path / MANIFEST).write_text(json.dumps({**V1, "format_version": 7}))
    with pytest.raises(ManifestError, match="format_version 7 is unknown"):
        load(tmp_path)


def test_write_writes_format_2_and_load_reads_it_back(tmp_path):
    (tmp_path / "encoder.onnx").write_bytes(b"graph")
    written = write(tmp_path, V1)
    on_disk = json.loads((tmp_path / MANIFEST).read_text())
    assert on_disk["format_version"] == 2 and on_disk["src_tokenization"] == "chars" and "files" in on_disk
    assert load(tmp_path) == written and written["files"] == on_disk["files"]  # also a Mapping of its JSON
    assert load(tmp_path).replace(language="fr").language == "fr"
    (tmp_path / "encoder.onnx").write_bytes(b"changed")
    with pytest.raises(ManifestError, match="sha256 mismatch for 'encoder.onnx'"):
        load(tmp_path)


def test_a_manifest_outside_the_contract_is_refused():
    with pytest.raises(ValueError, match="not one of"):
        as_manifest({**V1, "source_normalization": "upper"})
    with pytest.raises(ValueError, match="tokenization 'bytes'"):
        as_manifest({**V1, "data": {**V1["data"], "src_tokens": "bytes"}})
    with pytest.raises(ValueError, match="has no name"):
        Manifest.from_dict({k: v for k, v in as_manifest(V1).to_dict().items() if k != "name"})


def test_one_table_of_normalizations_for_training_and_serving():
    assert set(SOURCE_FORMS) <= set(NORMALIZATIONS)  # training's forms are entries of the served table
    assert normalizer("nfkd-strip-accents-lower")("Ångström") == "angstrom"
    with pytest.raises(ValueError, match="'as-written' is not one of"):
        normalizer("as-written")


def test_a_homograph_s_context_is_read_alike_in_training_and_serving(tmp_path):
    from attnserve.bundle.homographs import context_source, read_table

    text = "In 1999 the Lead singer’s band, as I’ve read, played on."
    start = text.index("Lead")
    assert context_source(text, start, start + 4, 3) == "in 0 the [lead] ^ singer' band ,"
    start = text.index("read")
    assert context_source(text, start, start + 4, 2) == "as i've [read] , played"
    assert context_source("read", 0, 4, 5) == "[read]"  # nothing around it
    source = context_source("Lead pipes and glasses: the lives of 1990s singers", 0, 4, 9)
    assert source == "[lead] ^ pipe and glasse : the live of 0s singer"
    assert normalizer("context-words")(source) == source  # the server normalizes the source again: a no-op
    m = as_manifest({**V1, "homographs": {"model": "ctx", "file": "homographs.tsv", "made_by": "x"},
                     "context": {"window": 5}})
    assert (m.homographs.model, m.homographs.file, m.homographs.extra, m.context.window) == \
           ("ctx", "homographs.tsv", {"made_by": "x"}, 5)
    assert as_manifest(m.to_dict()) == m  # written and read back the same
    table = tmp_path / "homographs.tsv"
    table.write_text("# comment\nread\tread_past\tR EH1 D\nRead\tread_present\tR IY1 D\n", encoding="utf-8")
    assert read_table(table) == {"read": {"read_past": "R EH1 D", "read_present": "R IY1 D"}}
    table.write_text("read\tread_past\tR EH1 D\nread\tread_past\tR IY1 D\n", encoding="utf-8")
    with pytest.raises(ValueError, match=":2: wordid 'read_past' is listed twice"):
        read_table(table)
