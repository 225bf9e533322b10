"""The garbage collector kept off the models' long-lived objects.

A loaded model is a great many Python objects that live as long as it does (its lexicon, a string and
bytes per word; vocabularies, text rules), and CPython's cyclic collector walks every one of them at
each full collection, holding the event loop meanwhile: under load those walks were the tail of the
latency. gc.freeze() moves every object alive into a generation the collector never walks; objects
made later are collected as before.

A frozen object is still freed when its last reference goes; only cycles among frozen objects are
never collected. A model version's answering stages make no cycle (joined by data, none refers
back to the answerer: tests/repository/test_heap.py), so what they hold is freed by its references alone.
Still, once a version is let go the heap is unfrozen, collected and frozen again: a cycle its
objects may yet be part of (a stored exception's traceback, a callback) is collected, and the
version loaded since, alive now, joins the frozen generation.
Off until the server process turns it on (tests that load models in their own process keep the
collector as it is).
"""
from __future__ import annotations

import gc

_on = False


def freeze_loaded() -> None:
    """The process's models are loaded: freeze what is alive, and again whenever a version is let go."""
    global _on
    _on = True
    _refreeze()


def released() -> None:
    """A model version was let go (replaced and drained, or unloaded): its cycles are collected."""
    if _on:
        _refreeze()


def stop() -> None:
    """Back to the collector as it was (tests)."""
    global _on
    _on = False
    gc.unfreeze()


def _refreeze() -> None:
    gc.unfreeze()
    gc.collect()
    gc.freeze()
