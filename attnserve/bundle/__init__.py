"""The bundle contract, torch-free and server-free: what training writes and the server reads.

manifest.py: the typed, versioned Manifest, `load` (migrated, every file's sha256 checked) and `write`;
migrate.py: older formats read as the current one; normalization.py: the one table of source
normalizations; text_policy.py: which one a model declares; hints.py and prosody.py: the bundle's own
rules applied around the model. docs/bundle.md describes the format.
"""
from attnserve.bundle.manifest import (FORMAT_VERSION, MANIFEST, Manifest, ManifestError, as_manifest, load,
                                       read, sha256_file, write)

__all__ = ["FORMAT_VERSION", "MANIFEST", "Manifest", "ManifestError", "as_manifest", "load", "read", "sha256_file", "write"]
