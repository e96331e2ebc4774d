"""Running the operator: kopf, the extender, probes/metrics and the status writer (I/O).
`serve()` runs everything in the current loop until `stop_flag` is set (tests run it in a
task); `run()` is `numatopo operator`'s process entry point."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable

import kopf
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from numatopo_kube.capped_listener import CappedListener
from numatopo_operator import (
    assigning,
    cluster_feed,
    dra_feed,
    exports,
    extender,
    extender_tls,
    handlers,
    health,
    leadership,
    list_watch,
    pod_feed,
    status,
)
from numatopo_operator.background import supervised
from numatopo_operator.groups import status as group_status
from numatopo_operator.groups import worker as group_worker
from numatopo_operator.metrics import Metrics
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings
from numatopo_operator.signing_keys import load_keys

logger = logging.getLogger(__name__)


METRICS_CONNECTIONS = 64
"""Prometheus and the kubelet's probes hold a few."""
EXTENDER_CONNECTIONS = 128
"""kube-scheduler holds one per call in flight, kept idle for 90 s; at the bound the
oldest that made no request goes first, and one serving a request never
(`CappedListener`)."""


def _asking(listener: CappedListener) -> Middleware:
    """Tells `listener` when a request runs on a connection: one that made a request (on
    the extender's port: one past mutual TLS) goes after those that made none, and one
    serving a request is not cut there."""

    @web.middleware
    async def asking(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        found = transport.get_extra_info("socket") if transport is not None else None
        if found is None:
            return await handler(request)
        descriptor = found.fileno()
        listener.started(descriptor)
        try:
            return await handler(request)
        finally:
            listener.finished(descriptor)

    return asking


class Servers:
    """The two HTTP servers, ports known once `start()` returned (0 = any): the extender's
    HTTPS with client certificates (`extender_tls`) unless plain HTTP is asked by name;
    metrics and probes plain HTTP (the chart's NetworkPolicy limits who may reach them)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.extender_port = 0
        self.metrics_port = 0
        self.extender_tls: extender_tls.RotatingContext | None = None
        self._runners: list[web.AppRunner] = []

    async def _start(
        self,
        app: web.Application,
        port: int,
        tls: extender_tls.RotatingContext | None = None,
        *,
        idle_seconds: float,
        limit: int,
        server: str,
    ) -> int:
        # aiohttp waits for a request head as long as for an idle connection's next
        # request (`keepalive_timeout`, an hour by default): this bounds both.
        shut = self.runtime.metrics.connections_shut.labels(server=server).inc
        listener = CappedListener(
            self.runtime.settings.listen_host, port, limit, shut, keep_busy=tls is not None
        )
        app.middlewares.insert(0, _asking(listener))
        runner = web.AppRunner(app, access_log=None, keepalive_timeout=idle_seconds)
        try:
            await runner.setup()
            site = web.SockSite(runner, listener, ssl_context=tls.listening if tls else None)
            await site.start()
        except BaseException:
            listener.close()
            raise
        self._runners.append(runner)
        return int(listener.getsockname()[1])

    async def start(self) -> None:
        """`ExtenderTlsError` before any port opens, without TLS files or the plain-HTTP switch."""
        settings = self.runtime.settings
        self.extender_tls = extender_tls.extender_context(settings)
        self.metrics_port = await self._start(
            health.build_app(self.runtime),
            settings.metrics_port,
            idle_seconds=health.HEAD_SECONDS,
            limit=METRICS_CONNECTIONS,
            server="metrics",
        )
        self.extender_port = await self._start(
            extender.build_app(self.runtime),
            settings.extender_port,
            self.extender_tls,
            idle_seconds=extender.IDLE_SECONDS,
            limit=EXTENDER_CONNECTIONS,
            server="extender",
        )

    async def stop(self) -> None:
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()


async def freeze_listed_heap(runtime: Runtime) -> None:
    """Once everything is listed, keep the collector from scanning it again: a full collection
    walks its millions of objects holding the GIL (235 ms for 1,000 nodes). It lives as long
    as the process; what of it is dropped is still freed by reference counting (acyclic)."""
    await runtime.indexed.wait()
    gc.freeze()
    logger.info(
        "start-up lists are in: %d objects left out of garbage collection", gc.get_freeze_count()
    )


# How often the loop's lag is sampled (`numatopo_event_loop_lag_seconds`).
LOOP_LAG_PERIOD_SECONDS = 0.5


async def measure_loop_lag(metrics: Metrics, period: float = LOOP_LAG_PERIOD_SECONDS) -> None:
    """Forever: sleep `period`, record how much later the loop woke us: a timer late by L
    says the loop (the watches, Lease renewals, extender answers) was held for about L."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        await asyncio.sleep(period)
        metrics.loop_lag.set(max(0.0, loop.time() - started - period))


@contextlib.asynccontextmanager
async def _background(runtime: Runtime, *, identity: str) -> AsyncIterator[None]:
    # Our pod, from the downward API settings; None outside a pod (nothing to label).
    namespace, name = runtime.settings.pod_namespace, runtime.settings.pod_name
    label = None if namespace is None or name is None else leadership.PodLabel(namespace, name)
    if label is None:
        logger.warning(
            "NUMATOPO_POD_NAME/NUMATOPO_POD_NAMESPACE are not set: this replica cannot label "
            "its pod %s, so an extender Service selecting on that label finds no endpoint",
            leadership.ACTIVE_LABEL,
        )
    elector = leadership.Elector(runtime, identity=identity, label=label)
    loops: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        ("status writer", lambda: status.write_statuses(runtime)),
        ("exports writer", lambda: exports.write_exports(runtime)),
        ("retries", lambda: assigning.run_retries(runtime)),
        ("events", lambda: runtime.events.run(runtime.kube)),
        ("cluster feed", lambda: cluster_feed.follow_cluster(runtime)),
        ("pod feed", lambda: pod_feed.follow_pods(runtime)),
        ("DRA feed", lambda: dra_feed.follow_dra(runtime)),
        ("leadership", elector.run),
        ("heap freeze", lambda: freeze_listed_heap(runtime)),
        ("loop lag", lambda: measure_loop_lag(runtime.metrics)),
    ]
    if runtime.settings.groups:
        loops += [
            ("groups", lambda: group_worker.run_groups(runtime)),
            ("network status", lambda: group_status.write_network_statuses(runtime)),
        ]
    tasks = [
        asyncio.create_task(supervised(runtime.metrics, name, loop), name=f"numatopo {name}")
        for name, loop in loops
    ]
    try:
        yield
    finally:
        await list_watch.stop_all(tasks)
        await elector.stand_down()


async def serve(
    runtime: Runtime,
    *,
    servers: Servers | None = None,
    kopf_settings: kopf.OperatorSettings | None = None,
    stop_flag: asyncio.Event | threading.Event | None = None,
) -> None:
    """Run the operator until `stop_flag` is set (or the task is cancelled)."""
    settings = runtime.settings
    servers = servers or Servers(runtime)
    kopf_settings = kopf_settings or kopf.OperatorSettings()
    # We post our own Events (named, one per outcome); kopf's would repeat our log lines.
    kopf_settings.posting.enabled = False
    kopf_settings.persistence.diffbase_storage = handlers.NoDiffBase()
    identity = leadership.lease_identity(settings.pod_name)
    await servers.start()
    logger.info(
        "numatopo operator: extender (%s) on :%d, metrics and probes on :%d, %s",
        "plain HTTP, INSECURE" if servers.extender_tls is None else "HTTPS, client certificates",
        servers.extender_port,
        servers.metrics_port,
        "standalone"
        if settings.standalone
        else f"Lease {settings.lease_namespace_or_default}/{settings.lease_name} as {identity}",
    )
    try:
        async with _background(runtime, identity=identity):
            # kopf peering off: every replica watches (warm standbys); the Lease alone decides.
            await kopf.operator(
                registry=handlers.build_registry(groups=settings.groups),
                settings=kopf_settings,
                memo=runtime,
                standalone=True,
                clusterwide=not settings.namespaces,
                namespaces=list(settings.namespaces),
                stop_flag=stop_flag,
            )
    finally:
        await servers.stop()
        await runtime.kube.close()


class PerEventAtDebug(logging.Filter):
    """Lines logged per watch event or API call (kopf's "Handler ... succeeded.", our
    client's HTTP requests) go out only at DEBUG: at cluster size, thousands a second."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO:
            return True
        if record.name == "kopf.objects" and not record.getMessage().endswith(" succeeded."):
            return True
        vars(record).update(levelno=logging.DEBUG, levelname="DEBUG")
        return logging.getLogger().isEnabledFor(logging.DEBUG)


def run(settings: OperatorSettings) -> int:
    """The process: log to stderr, serve until SIGTERM/SIGINT (kopf handles both)."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for name in ("kopf.objects", "httpx2"):
        logging.getLogger(name).addFilter(PerEventAtDebug())
    signer, verifier = load_keys(settings)  # raises, saying what is missing
    try:
        asyncio.run(serve(Runtime(settings, signer=signer, verifier=verifier)))
    except extender_tls.ExtenderTlsError as exc:
        logger.error("numatopo operator cannot start: %s", exc)
        return 2
    return 0
