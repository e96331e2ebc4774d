"""Polling with a bounded deadline (no fixed sleeps in tests)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def eventually(
    predicate: Callable[[], object], *, timeout: float = 2.0, interval: float = 0.005
) -> None:
    """Wait until `predicate()` is truthy; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        await asyncio.sleep(interval)
