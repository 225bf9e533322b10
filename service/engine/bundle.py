"""A model bundle on disk: `models/<name>/<version>/` with ONNX graphs and manifest.json.

The manifest (attnserve/bundle: the typed contract training writes) lists the sha256 of every file; a
bundle whose files do not match is refused before onnxruntime ever reads them. Here: which version
directory a model directory serves, and the contract's errors as the server's BundleError.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from attnserve.bundle import MANIFEST, Manifest, ManifestError, load, write
from service.domain import BundleError, VersionNotFound


@dataclass(frozen=True)
class Bundle:
    path: Path
    manifest: Manifest

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> str:
        return self.manifest.version

    def graph_path(self, role: str) -> Path:
        graphs = self.manifest.graphs
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
    """The bundle, its manifest migrated to the current format and every file checked (attnserve.bundle.load)."""
    path = resolve(model_dir, version)
    try:
        return Bundle(path=path, manifest=load(path))
    except ManifestError as e:
        raise BundleError(e.where, e.reason) from e


def write_manifest(path: Path, manifest: Manifest | Mapping) -> Manifest:
    """Hash every file in the bundle directory (but the manifest) and write the manifest (attnserve.bundle.write)."""
    return write(path, manifest)
