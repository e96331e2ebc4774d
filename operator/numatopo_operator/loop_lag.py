"""The event loop's lag, as a gauge: how late a timer fires (I/O-free, one task).

A long GC pause, a big list parsed on the loop or a handler that blocks delays the
watches, the Lease renewals and the extender's answers: a timer that fires late by L
says the loop was held for about L.
"""

from __future__ import annotations

import asyncio

from numatopo_operator.metrics import Metrics

PERIOD_SECONDS = 0.5


async def measure_loop_lag(metrics: Metrics, period: float = PERIOD_SECONDS) -> None:
    """Forever: sleep `period`, record how much later than that the loop woke us."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        await asyncio.sleep(period)
        metrics.loop_lag.set(max(0.0, loop.time() - started - period))
