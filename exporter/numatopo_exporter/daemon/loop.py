"""The exporter loop: scan, publish, wait for a reason to do it again (I/O).

Reasons to scan again: a debounced udev event, or the periodic resync. Reason to publish again
without scanning: the object was edited or deleted (watch). Failures of either step are logged,
counted and retried with capped exponential backoff; nothing short of cancellation ends `run()`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from numatopo_engine.model import NumatopologySpec
from numatopo_exporter.daemon.publishing import Sink
from numatopo_exporter.discovery.discover import Discovery
from numatopo_exporter.discovery.errors import DiscoveryError
from numatopo_exporter.metrics import ExporterMetrics
from numatopo_kube import KubeError
from numatopo_kube.backoff import Backoff

logger = logging.getLogger("numatopo.exporter")


class ScanError(Exception):
    """The scan failed; the previous spec stays published."""


@dataclass
class ExporterLoop:
    scan: Callable[[], NumatopologySpec | Discovery]
    """Reads the node's topology (blocking; run in a thread). A `Discovery` also says
    what input was ignored, which is published as the `Degraded` condition."""
    sink: Sink
    metrics: ExporterMetrics = field(default_factory=ExporterMetrics)
    resync_seconds: float = 300.0
    """Rescan and compare with the published object this often, events or not."""
    backoff: Backoff = field(default_factory=Backoff)
    clock: Callable[[], float] = time.time

    spec: NumatopologySpec | None = field(default=None, init=False)
    ignored: list[str] = field(default_factory=list, init=False)
    scanned_at: float = field(default=0.0, init=False)
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _rescan: bool = field(default=True, init=False)

    def request_rescan(self) -> None:
        """Something in the hardware changed (udev): scan, then publish."""
        self._rescan = True
        self._wake.set()

    def request_republish(self) -> None:
        """The published object changed under us: compare and repair, no rescan."""
        self._wake.set()

    async def scan_once(self) -> NumatopologySpec:
        started = time.perf_counter()
        try:
            found = await asyncio.to_thread(self.scan)
        except (DiscoveryError, OSError, ValueError) as exc:
            self.metrics.scans.labels(outcome="error").inc()
            raise ScanError(f"scan failed: {exc}") from exc
        spec = found.spec if isinstance(found, Discovery) else found
        self.ignored = list(found.ignored) if isinstance(found, Discovery) else []
        self.metrics.scan_duration.observe(time.perf_counter() - started)
        self.metrics.scans.labels(outcome="ok").inc()
        self.metrics.gpus.set(len(spec.gpus))
        self.scanned_at = self.clock()
        self.metrics.last_scan.set(self.scanned_at)
        self.spec = spec
        return spec

    async def step(self) -> bool:
        """One round: scan if asked to, publish the latest spec; True if it succeeded."""
        try:
            if self._rescan or self.spec is None:
                self._rescan = False
                await self.scan_once()
            assert self.spec is not None
            if await self.sink.publish(self.spec, scanned_at=self.scanned_at, ignored=self.ignored):
                self.metrics.publishes.inc()
        except ScanError as exc:
            self._rescan = True
            logger.error("%s", exc)
            return False
        except KubeError as exc:
            self.metrics.publish_errors.inc()
            logger.warning("publishing failed, will retry: %s", exc)
            return False
        return True

    async def run(self) -> None:
        """Forever: step, then wait for a wake-up, the resync period, or the retry delay."""
        while True:
            self._wake.clear()
            succeeded = await self.step()
            if succeeded:
                self.backoff.reset()
            timeout = self.resync_seconds if succeeded else self.backoff.next_delay()
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                # A retry after a failure publishes the spec we have; a resync rescans.
                self._rescan = self._rescan or succeeded
