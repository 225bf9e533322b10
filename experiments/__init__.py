"""Experiments run with the library (training/, service/): importable from the repository's root, not installed.
The library never imports them."""
