"""A bundle's manifest: the typed, versioned contract between the training that writes a bundle and the
server that reads it (docs/bundle.md).

A bundle is `models/<name>/<version>/`: ONNX graphs, the files its rules read (lexicon, hints, prosody
memory) and manifest.json, which lists the sha256 of every other file. `load` reads a manifest of any
known format_version, migrates it to this one (migrate.py, the one place older bundles are understood),
checks every file against its sha256 and returns a `Manifest`; `write` hashes the files and writes the
current format. What the server and the export read is a typed attribute; what only experiments read
(training history, task scores, metrics beyond the dev WER) stays in `extra`, as written.

Torch-free and server-free: training and serving both import it.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from attnserve.bundle.migrate import FORMAT_VERSION, upgrade
from attnserve.bundle.homographs import ContextSpec, HomographsSpec
from attnserve.bundle.normalization import normalizer

MANIFEST = "manifest.json"
TOKENIZATIONS = ("chars", "words")  # a sequence is its characters, or its space-separated words


class ManifestError(ValueError):
    """A manifest that cannot be read, or files that do not match it. `where` is the path, `reason` what is
    wrong without it (what a client may be told)."""

    def __init__(self, where: Path | str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where, self.reason = where, reason


def _spec(cls, value: Mapping | None, where: str):
    """A nested dataclass from its JSON object: its typed fields, the other keys kept in `extra`."""
    if not value:
        return None
    names = {f.name for f in fields(cls)} - {"extra"}
    try:
        return cls(**{k: v for k, v in value.items() if k in names},
                   extra={k: v for k, v in value.items() if k not in names})
    except TypeError as e:
        raise ValueError(f"{where}: {e}") from None


def _json(spec) -> dict | None:
    if spec is None:
        return None
    out = {f.name: getattr(spec, f.name) for f in fields(spec) if f.name != "extra"}
    return {**{k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}, **spec.extra}


@dataclass(frozen=True)
class SpecialIds:
    pad: int = 0
    bos: int = 1
    eos: int = 2
    unk: int = 3


@dataclass(frozen=True)
class SourceHints:
    """`source_hints` (attnserve/bundle/hints.py): a word's hint is read after its own symbols."""
    file: str
    separator: str
    hint_only_symbols: tuple[str, ...] = ()  # symbols only hints bring: not a served word's
    extra: Mapping[str, Any] = field(default_factory=dict)  # words, trained_with

    def __post_init__(self):
        object.__setattr__(self, "hint_only_symbols", tuple(self.hint_only_symbols))


@dataclass(frozen=True)
class ProsodyMemorySpec:
    """`prosody_memory` (attnserve/bundle/prosody.py): a mark decided by the words a word begins like."""
    mark: str
    prefixes: tuple[int, ...]
    file: str
    pairs: Mapping[str, str] = field(default_factory=dict)  # bare -> marked segments beyond the mark alone
    extra: Mapping[str, Any] = field(default_factory=dict)  # trained_words, entries, why

    def __post_init__(self):
        object.__setattr__(self, "prefixes", tuple(self.prefixes))


@dataclass(frozen=True)
class LexiconSpec:
    """`lexicon`: word<TAB>output lines the server answers before the model (training/lexicon.py)."""
    file: str
    extra: Mapping[str, Any] = field(default_factory=dict)  # sources, entries, from, left_out


@dataclass(frozen=True)
class Manifest(Mapping):
    """A bundle's manifest, format FORMAT_VERSION. As a Mapping it reads as its JSON object (`to_dict`),
    for experiments' own keys; the typed attributes are what a reader of the contract uses."""

    name: str
    version: str
    graphs: Mapping[str, str]  # role ("encoder", "decoder_step", "encoder.int8", ...) -> file
    src_vocab: tuple[str, ...]
    tgt_vocab: tuple[str, ...]
    src_tokenization: str  # TOKENIZATIONS: how a source is split into symbols
    tgt_tokenization: str  # how an output's symbols are joined ("chars": no space)
    source_normalization: str = "none"  # normalization.NORMALIZATIONS: applied to every served source
    special_ids: SpecialIds = SpecialIds()
    language: str = ""  # the tag its running text is read in (service/answering/textrules.py); "" unknown
    max_output_len: int | None = None
    has_attention: bool = True
    attention_modes: tuple[str, ...] = ("soft",)  # what DecodeOptions.attention_mode may ask for
    source_hints: SourceHints | None = None
    prosody_memory: ProsodyMemorySpec | None = None
    lexicon: LexiconSpec | None = None
    homographs: HomographsSpec | None = None  # a G2P bundle's: the context model and its table (homographs.py)
    context: ContextSpec | None = None  # a context model's: how it reads a homograph's sentence
    files: Mapping[str, str] = field(default_factory=dict)  # file -> sha256, every file but the manifest
    format_version: ClassVar[int] = FORMAT_VERSION  # migrate.upgrade brings an older one here
    extra: Mapping[str, Any] = field(default_factory=dict)  # what experiments record: data, training, metrics, int8, ...

    def __post_init__(self):
        normalizer(self.source_normalization)  # ValueError naming the known ones
        for kind in (self.src_tokenization, self.tgt_tokenization):
            if kind not in TOKENIZATIONS:
                raise ValueError(f"tokenization {kind!r} is not one of {TOKENIZATIONS}")

    @classmethod
    def from_dict(cls, d: Mapping) -> "Manifest":
        """From a JSON object of the current format (migrate.upgrade turns an older one into it)."""
        typed = {f.name for f in fields(cls)} - {"extra"}
        if d.get("format_version", FORMAT_VERSION) != FORMAT_VERSION:
            raise ValueError(f"format_version {d['format_version']!r}, not {FORMAT_VERSION}: migrate.upgrade it first")
        missing = [k for k in ("name", "version", "graphs", "src_tokenization", "tgt_tokenization") if k not in d]
        if missing:
            raise ValueError(f"the manifest has no {', '.join(missing)}")
        return cls(
            name=d["name"], version=str(d["version"]), graphs=dict(d["graphs"]),
            src_vocab=tuple(d.get("src_vocab", ())), tgt_vocab=tuple(d.get("tgt_vocab", ())),
            src_tokenization=d["src_tokenization"], tgt_tokenization=d["tgt_tokenization"],
            source_normalization=d.get("source_normalization", "none"),
            special_ids=SpecialIds(**d.get("special_ids", {})), language=d.get("language", ""),
            max_output_len=d.get("max_output_len"), has_attention=bool(d.get("has_attention", True)),
            attention_modes=tuple(d.get("attention_modes", ("soft",))),
            source_hints=_spec(SourceHints, d.get("source_hints"), "source_hints"),
            prosody_memory=_spec(ProsodyMemorySpec, d.get("prosody_memory"), "prosody_memory"),
            lexicon=_spec(LexiconSpec, d.get("lexicon"), "lexicon"),
            homographs=_spec(HomographsSpec, d.get("homographs"), "homographs"),
            context=_spec(ContextSpec, d.get("context"), "context"), files=dict(d.get("files", {})),
            extra={k: v for k, v in d.items() if k not in typed | {"format_version"}})

    def to_dict(self) -> dict:
        """The JSON object written to manifest.json (empty optional parts left out)."""
        out = {"format_version": self.format_version, "name": self.name, "version": self.version,
               "graphs": dict(self.graphs), "src_vocab": list(self.src_vocab), "tgt_vocab": list(self.tgt_vocab),
               "special_ids": asdict(self.special_ids),
               "src_tokenization": self.src_tokenization, "tgt_tokenization": self.tgt_tokenization,
               "source_normalization": self.source_normalization}
        if self.language:
            out["language"] = self.language
        if self.max_output_len is not None:
            out["max_output_len"] = self.max_output_len
        out |= {"has_attention": self.has_attention, "attention_modes": list(self.attention_modes)}
        for key in ("source_hints", "prosody_memory", "lexicon", "homographs", "context"):
            if getattr(self, key) is not None:
                out[key] = _json(getattr(self, key))
        return {**out, **self.extra, "files": dict(self.files)}

    def replace(self, **changes) -> "Manifest":
        """A copy with these JSON keys changed (typed or not); a key given None is removed."""
        d = {**self.to_dict(), **changes}
        return Manifest.from_dict({k: v for k, v in d.items() if not (k in changes and v is None)})

    @cached_property
    def _as_json(self) -> dict:  # the Mapping view's, built once: read it, never change it
        return self.to_dict()

    def __getitem__(self, key: str) -> Any:
        return self._as_json[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._as_json)

    def __len__(self) -> int:
        return len(self._as_json)

    __hash__ = None  # mutable mappings inside: compared by value, never hashed

    @property
    def data(self) -> Mapping:
        """The training run's description of its data (training/data.py load_described reads it back)."""
        return self.extra.get("data", {})

    @property
    def metrics(self) -> Mapping:
        """What the export measured, split -> {wer, per, ...}."""
        return self.extra.get("metrics", {})

    @property
    def int8(self) -> Mapping:
        """What `make quantize` measured of the int8 graphs ({} before it ran)."""
        return self.extra.get("int8", {})

    @property
    def dev_wer(self) -> float | None:
        return self.metrics.get("dev", {}).get("wer")

    @property
    def int8_dev_wer(self) -> float | None:
        return self.int8.get("metrics", {}).get("dev", {}).get("wer")

    @property
    def int8_over_fp32(self) -> float:
        """int8's time over fp32's where it was timed (0.0: not timed)."""
        return self.int8.get("speed", {}).get("int8_over_fp32", 0.0)

    @property
    def int8_batch_independent(self) -> bool:
        return self.int8.get("batch_independence", {}).get("independent") is True


def as_manifest(manifest: Manifest | Mapping) -> Manifest:
    """A Manifest, from itself or from a manifest's JSON object of any known format (migrate.upgrade)."""
    if isinstance(manifest, Manifest):
        return manifest
    return Manifest.from_dict(upgrade(manifest))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read(path: Path) -> Manifest:
    """The manifest of the bundle directory `path`, migrated to the current format, without checking files."""
    path = Path(path)
    try:
        d = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ManifestError(path / MANIFEST, f"cannot read the manifest ({type(e).__name__})") from e
    if not isinstance(d, dict):
        raise ManifestError(path / MANIFEST, "the manifest is not a JSON object")
    try:
        return Manifest.from_dict(upgrade(d))
    except (ValueError, TypeError, KeyError) as e:
        raise ManifestError(path, f"manifest refused: {e}") from None


def load(path: Path) -> Manifest:
    """The bundle's manifest, after checking that every graph is listed in `files` and every file listed
    there has its sha256: a bundle that does not match is refused before onnxruntime reads it."""
    path = Path(path)
    manifest = read(path)
    for role, name in manifest.graphs.items():
        if name not in manifest.files:
            raise ManifestError(path, f"graph {role!r} file {name!r} has no sha256 in the manifest")
    for name, expected in manifest.files.items():
        file = path / name
        if not file.is_file():
            raise ManifestError(path, f"file {name!r} listed in the manifest is missing")
        actual = sha256_file(file)
        if actual != expected:
            raise ManifestError(path, f"sha256 mismatch for {name!r}: manifest says {expected[:12]}..., "
                                f"file has {actual[:12]}... — the bundle is corrupt or was modified; refusing it")
    return manifest


def write(path: Path, manifest: Manifest | Mapping) -> Manifest:
    """Hash every file in the bundle directory (but the manifest) and write the manifest in the current
    format; a mapping is taken as a manifest's JSON object of any known format (migrate.upgrade). Returns
    what was written."""
    path = Path(path)
    files = {p.name: sha256_file(p) for p in sorted(path.iterdir()) if p.is_file() and p.name != MANIFEST}
    manifest = as_manifest(manifest).replace(files=files)
    (path / MANIFEST).write_text(json.dumps(manifest.to_dict(), indent=2) + "\n", encoding="utf-8")
    return manifest
