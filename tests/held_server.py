"""`attnserve-server` whose engines, once warmed up, hold every encoder run until a line (or EOF)
arrives on its stdin: a test's calls are then provably in flight, however fast the machine, until
the test releases them (tests/live.py spawn_server(held=True), release()).

    python -m tests.held_server <attnserve-server flags>

The server, its batcher and its engine are the real ones; only the wait is added, as
tests/scheduling/test_cancellation.py paces the real engine in-process. One process (--workers 1 unless the
flags say otherwise): a supervisor's workers would be plain servers, not held.
"""
from __future__ import annotations

import sys
import threading

from service.engine.engine import Engine
from service.server import main

HOLD_S = 300  # bounds a hang only: a test that never releases its calls fails after this

released = threading.Event()
_warm_up, _encode = Engine.warm_up, Engine.encode


def warm_up(self: Engine, sources) -> None:
    _warm_up(self, sources)
    self.held = True  # the warm-up itself is not held: the server must load and say SERVING


def encode(self: Engine, *args, **kwargs):
    if getattr(self, "held", False) and not released.wait(HOLD_S):
        raise TimeoutError(f"the test never released the engine ({HOLD_S} s)")
    return _encode(self, *args, **kwargs)


def _release_on_stdin() -> None:
    sys.stdin.readline()
    released.set()


if __name__ == "__main__":
    Engine.warm_up, Engine.encode = warm_up, encode
    threading.Thread(target=_release_on_stdin, name="release-on-stdin", daemon=True).start()
    main(["--workers", "1", *sys.argv[1:]])
