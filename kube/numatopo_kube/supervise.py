"""Long-running loops that outlive their own bugs: `keep_running`, for the node side and
the operator (why: docs/DESIGN.md and docs/operations.md, "Background tasks"). Loops handle
the API's errors themselves; what reaches here is a bug, and starting over from what is
kept outside the loop fits them all."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from numatopo_kube.backoff import Backoff

logger = logging.getLogger(__name__)

# A loop that ran this long before it failed failed anew: it restarts after the shortest
# delay again, not after the delay its failures of an hour ago had reached.
STEADY_SECONDS = 60.0


async def keep_running(
    name: str,
    loop: Callable[[], Awaitable[None]],
    *,
    crashed: Callable[[], None],
    backoff: Backoff | None = None,
    log: logging.Logger = logger,
) -> None:
    """Run `loop()` until it returns or is cancelled; after each exception, log it (with
    traceback), call `crashed` (a metric), wait `backoff`'s delay and run it again."""
    backoff = backoff or Backoff(1.0, 60.0)
    while True:
        started = time.monotonic()
        try:
            await loop()
            return
        except Exception:
            if time.monotonic() - started >= STEADY_SECONDS:
                backoff.reset()
            delay = backoff.next_delay()
            log.exception("background task %r failed; running it again in %.1f s", name, delay)
            crashed()
        await asyncio.sleep(delay)
