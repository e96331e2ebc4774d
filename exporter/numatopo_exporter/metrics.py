"""Prometheus metrics of the node processes (exporter, agent, steering proxy), and the HTTP
endpoint both processes serve.

Each process owns a `CollectorRegistry` (never the global one), so tests can build many daemons and
read their counters without interference. The endpoint answers two GETs (`/metrics`, `/healthz`) on
asyncio's own server: an HTTP framework would cost a node process ~10 MiB of its 80 MiB budget
(`benchmarks/bench_agent_memory.py`). One request per connection, its head bounded in size and
time, so a slow or endless client holds no more than a socket.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from numatopo_kube.capped_listener import CappedListener

HEAD_LIMIT = 8192  # bytes of request line and headers
HEAD_SECONDS = 10.0
MAX_CONNECTIONS = 64
"""Prometheus and the kubelet's probes hold a few; `CappedListener` says why a bound."""


@dataclass
class Registry:
    """The metrics of one node process (or part of one) on their own registry."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)


@dataclass
class ExporterMetrics(Registry):
    def __post_init__(self) -> None:
        counter = partial(Counter, registry=self.registry)
        gauge = partial(Gauge, registry=self.registry)
        self.scans = counter(
            "numatopo_exporter_scans_total", "Topology scans, by outcome.", ["outcome"]
        )
        self.scan_duration = Histogram(
            "numatopo_exporter_scan_duration_seconds",
            "Time to read the node's topology.",
            # sysfs on a large node takes tens of ms; NVML initialisation up to seconds.
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.publishes = counter(
            "numatopo_exporter_publishes_total",
            "Writes of the Numatopology spec (only when its content changed).",
        )
        self.publish_errors = counter(
            "numatopo_exporter_publish_errors_total",
            "Failed API calls while publishing (each is retried with backoff).",
        )
        self.gpus = gauge("numatopo_exporter_gpus", "GPUs in the last scan.")
        self.last_scan = gauge(
            "numatopo_exporter_last_scan_timestamp_seconds",
            "Unix time of the last successful scan.",
        )


@dataclass
class AgentMetrics(Registry):
    def __post_init__(self) -> None:
        counter = partial(Counter, registry=self.registry)
        self.enforcements = counter(
            "numatopo_agent_enforcements_total",
            "Pods whose cpusets were brought to their assignment (first time or restart).",
        )
        self.drift_corrections = counter(
            "numatopo_agent_drift_corrections_total",
            "Pods whose cpusets had drifted from an enforced assignment and were rewritten.",
        )
        self.failures = counter(
            "numatopo_agent_failures_total",
            "Pods that could not be enforced, by reason.",
            ["reason"],
        )
        self.task_restarts = counter(
            "numatopo_agent_task_restarts_total",
            "Watches (pods, the node's Numatopology) that failed with an unexpected error "
            "and were run again, by task.",
            ["task"],
        )
        self.writes = counter(
            "numatopo_agent_cpuset_writes_total", "Single cpuset.cpus / cpuset.mems writes."
        )
        self.gpu_mismatches = counter(
            "numatopo_agent_gpu_mismatches_total",
            "Assignments whose containers were given other GPUs by the kubelet than "
            "assigned (Follow); the operator re-aligns each.",
        )
        self.events_dropped = counter(
            "numatopo_agent_events_dropped_total",
            "Events not posted: their queue was full, or the agent stopped first.",
        )
        self.latency = Histogram(
            "numatopo_agent_assignment_to_enforced_seconds",
            "From the assignment first seen on the watch stream to its cpusets written.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )


@dataclass
class SteeringMetrics(Registry):
    """The steering proxy's, on the registry the caller passes (the agent's, so they are served
    beside its own)."""

    def __post_init__(self) -> None:
        counter = partial(Counter, registry=self.registry)
        self.answers = counter(
            "numatopo_steering_answers_total",
            "Preferred allocations answered, per container request, by whose choice: "
            "steered (the assignment's GPUs), vendor (its own preference), kubelet "
            "(empty answer: the kubelet chooses).",
            ["outcome"],
        )
        self.registrations = counter(
            "numatopo_steering_registrations_total",
            "Registrations with the kubelet, by result.",
            ["result"],
        )
        self.vendor_missing = counter(
            "numatopo_steering_vendor_missing_total",
            "Times the vendor plugin's device stream ended (devices reported Unhealthy "
            "until it is back).",
        )


@dataclass
class MetricsServer:
    """The running endpoint; `cleanup()` stops it."""

    server: asyncio.Server
    connections: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])

    async def cleanup(self) -> None:
        self.server.close()
        # Python 3.11's server leaves open connections be: a client still sending its request
        # would keep its socket past the process's own end.
        for writer in list(self.connections):
            writer.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await self.server.wait_closed()


async def start_metrics_server(
    registry: CollectorRegistry, *, host: str = "0.0.0.0", port: int
) -> MetricsServer:
    """Serve `/metrics` and `/healthz` on `host:port`; the caller calls `cleanup()`."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        running.connections.add(writer)
        try:
            await _answer(reader, writer, registry)
        finally:
            running.connections.discard(writer)
            writer.close()

    shut = Counter(
        "numatopo_http_connections_shut_total",
        "Connections shut down because the port held its limit of open ones.",
        ["server"],
        registry=registry,
    ).labels(server="metrics")
    listener = CappedListener(host, port, MAX_CONNECTIONS, shut.inc)
    try:
        server = await asyncio.start_server(answer, sock=listener, limit=HEAD_LIMIT)
    except BaseException:
        listener.close()
        raise
    running = MetricsServer(server)
    return running


async def _answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, registry: CollectorRegistry
) -> None:
    try:
        async with asyncio.timeout(HEAD_SECONDS):
            head = await reader.readuntil(b"\r\n\r\n")
        status, kind, body = _response(head, registry)
    except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        status, kind, body = "400 Bad Request", "text/plain", b"bad request\n"
    except ConnectionError:
        return
    writer.write(
        f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(ConnectionError):
        await writer.drain()


def _response(head: bytes, registry: CollectorRegistry) -> tuple[str, str, bytes]:
    """(status, content type, body) for a request head."""
    method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
    path = rest.partition(" ")[0].partition("?")[0]
    if method != "GET":
        return "405 Method Not Allowed", "text/plain", b"method not allowed\n"
    if path == "/metrics":
        return "200 OK", CONTENT_TYPE_LATEST, generate_latest(registry)
    if path == "/healthz":
        return "200 OK", "text/plain; charset=utf-8", b"ok"
    return "404 Not Found", "text/plain", b"not found\n"
