"""One asyncio helper the server's long-running loops share (batch loop, version and repository polling)."""
from __future__ import annotations

import asyncio
import contextlib


async def cancel_and_wait(task: asyncio.Task | None) -> None:
    """Cancel a background task and wait until it has ended; None is a task never started."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
