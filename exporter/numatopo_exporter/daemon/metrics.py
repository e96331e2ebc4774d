"""Prometheus metrics of the exporter, and the HTTP endpoint both node processes serve.

Each process owns a `CollectorRegistry` (never the global one), so tests can build as
many daemons as they like and read their counters without interference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

__all__ = ["ExporterMetrics", "start_metrics_server"]


@dataclass
class ExporterMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.scans = Counter(
            "numatopo_exporter_scans_total",
            "Topology scans, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self.scan_duration = Histogram(
            "numatopo_exporter_scan_duration_seconds",
            "Time to read the node's topology.",
            # sysfs on a large node takes tens of ms; NVML initialisation up to seconds.
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.publishes = Counter(
            "numatopo_exporter_publishes_total",
            "Writes of the Numatopology spec (only when its content changed).",
            registry=self.registry,
        )
        self.publish_errors = Counter(
            "numatopo_exporter_publish_errors_total",
            "Failed API calls while publishing (each is retried with backoff).",
            registry=self.registry,
        )
        self.gpus = Gauge(
            "numatopo_exporter_gpus", "GPUs in the last scan.", registry=self.registry
        )
        self.last_scan = Gauge(
            "numatopo_exporter_last_scan_timestamp_seconds",
            "Unix time of the last successful scan.",
            registry=self.registry,
        )

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """A sample's current value (0 when absent), for tests and health checks."""
        found = self.registry.get_sample_value(name, labels or {})
        return 0.0 if found is None else found


async def start_metrics_server(
    registry: CollectorRegistry, *, host: str = "0.0.0.0", port: int
) -> web.AppRunner:
    """Serve `/metrics` and `/healthz` on `host:port`; the caller calls `cleanup()`."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
