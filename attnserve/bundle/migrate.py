"""Older manifests read as the current format: the one place a bundle from before a field is understood.

Format 1 (every bundle written before the typed manifest; the shipped ones are still on disk so) stated a
source's normalization up to three times (`source_normalization`, `text_policy.source_normalization`,
`lowercase_input`; bundles from before the first read `lowercase_input` alone), kept the tokenization
kinds inside the training run's `data` as `src_tokens` / `tgt_tokens`, left out `language` for CMUdict
models (English) and `has_attention` / `attention_modes` for models from before the attention-free
variants (all of which have soft attention). Format 2 states each once, typed (manifest.py).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

FORMAT_VERSION = 2  # what manifest.py's Manifest is and `write` writes


def v1_to_v2(d: Mapping) -> dict:
    d = dict(d)
    lowercase = bool(d.pop("lowercase_input", False))
    d.setdefault("source_normalization", "lower" if lowercase else "none")
    if isinstance(d.get("text_policy"), Mapping):  # its source_normalization is the top-level one
        d["text_policy"] = {k: v for k, v in d["text_policy"].items() if k != "source_normalization"}
    data = d.get("data") if isinstance(d.get("data"), Mapping) else {}
    for kind in ("src", "tgt"):
        if f"{kind}_tokenization" not in d and f"{kind}_tokens" in data:
            d[f"{kind}_tokenization"] = data[f"{kind}_tokens"]
    if not d.get("language") and data.get("corpus") == "cmudict":
        d["language"] = "en"
    if "has_attention" not in d:
        d["has_attention"] = (d.get("model_config") or {}).get("attention") != "none"
    d.setdefault("attention_modes", ["soft"] if d["has_attention"] else [])
    d["format_version"] = 2
    return d


# format_version -> the step to the next one
STEPS: dict[int, Callable[[Mapping], dict]] = {1: v1_to_v2}


def known_version(d: Mapping) -> int:
    """A manifest's format_version; a JSON object without one (what scripts assemble and hand to
    `write`) is taken as format 1 unless it has format 2's fields."""
    if "format_version" in d:
        return d["format_version"]
    return 2 if "src_tokenization" in d else 1


def upgrade(d: Mapping) -> dict:
    """The JSON object in format FORMAT_VERSION; ValueError naming a format this code does not know."""
    version = known_version(d)
    if version not in STEPS and version != FORMAT_VERSION:
        raise ValueError(f"manifest format_version {version!r} is unknown: this code reads "
                         f"{sorted({*STEPS, FORMAT_VERSION})}")
    d = dict(d)
    while version != FORMAT_VERSION:
        d = STEPS[version](d)
        version = d["format_version"]
    return d
