"""A model bundle on disk: `models/<name>/<version>/` with ONNX graphs and manifest.json.

The manifest lists the sha256 of every file; a bundle whose files do not match
is refused before onnxruntime ever reads them.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from service.domain import BundleError, VersionNotFound

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class Bundle:
    path: Path
    manifest: dict

    @property
    def name(self) -> str:
        return self.manifest["name"]

    @property
    def version(self) -> str:
        return str(self.manifest["version"])

    def graph_path(self, role: str) -> Path:
        graphs = self.manifest["graphs"]
        if role not in graphs:
            raise BundleError(self.path, f"no {role!r} graph in the manifest (has {sorted(graphs)}); "
                              f"int8 graphs come from `make quantize`")
        return self.path / graphs[role]


def is_version(name: str) -> bool:
    """A version directory's name: ASCII digits (str.isdigit alone admits "²", which int() refuses)."""
    return name.isascii() and name.isdigit()


def resolve(model_dir: Path, version: str = "") -> Path:
    """A bundle directory, or a model directory whose pinned (or else highest numeric) version is taken."""
    model_dir = Path(model_dir)
    if (model_dir / MANIFEST).is_file():
        if version:
            raise VersionNotFound(model_dir, f"a single bundle, not a model directory with version {version!r}")
        return model_dir
    versions = [p for p in model_dir.iterdir() if p.is_dir() and is_version(p.name)] if model_dir.is_dir() else []
    if version:
        # int(): "007" and "7" name the same version, as the numeric ordering below already assumes.
        chosen = [p for p in versions if is_version(version) and int(p.name) == int(version)]
        if not chosen:
            raise VersionNotFound(model_dir, f"no version {version!r} (has {sorted(p.name for p in versions)})")
        return chosen[0]
    if not versions:
        raise BundleError(model_dir, f"no {MANIFEST} and no numeric version directories")
    return max(versions, key=lambda p: int(p.name))


def load_bundle(model_dir: Path, version: str = "") -> Bundle:
    path = resolve(model_dir, version)
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BundleError(path / MANIFEST, f"cannot read the manifest ({type(e).__name__})") from e
    if manifest.get("format_version") != FORMAT_VERSION:
        raise BundleError(path, f"manifest format_version {manifest.get('format_version')!r}, "
                          f"this server reads {FORMAT_VERSION}")
    files = manifest.get("files") or {}
    for role, name in manifest.get("graphs", {}).items():
        if name not in files:
            raise BundleError(path, f"graph {role!r} file {name!r} has no sha256 in the manifest")
    for name, expected in files.items():
        file = path / name
        if not file.is_file():
            raise BundleError(path, f"file {name!r} listed in the manifest is missing")
        actual = sha256_file(file)
        if actual != expected:
            raise BundleError(path, f"sha256 mismatch for {name!r}: manifest says {expected[:12]}..., "
                              f"file has {actual[:12]}... — the bundle is corrupt or was modified; refusing it")
    return Bundle(path=path, manifest=manifest)


def write_manifest(path: Path, manifest: dict) -> None:
    """Hash every file in the bundle directory (but the manifest) and write the manifest."""
    files = {p.name: sha256_file(p) for p in sorted(Path(path).iterdir()) if p.is_file() and p.name != MANIFEST}
    manifest = {**manifest, "format_version": FORMAT_VERSION, "files": files}
    (Path(path) / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
