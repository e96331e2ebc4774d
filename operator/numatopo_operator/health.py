"""Probes and metrics over HTTP: `/healthz`, `/readyz`, `/metrics` (aiohttp, I/O).

/healthz  200 while the process serves (liveness: restart only a hung process)
/readyz   200 once the replica knows its role and, if active, its ledger is current
          (`handover`); a standby is Ready too, so rolling updates and disruption
          budgets progress (the extender Service selects the holder by its label)
/metrics  Prometheus text format

A connection gets `HEAD_SECONDS` per request head and is closed after as long idle: a slow
client of this plain-HTTP port holds a socket no longer (as the node processes' metrics
port, `numatopo_exporter.metrics`).
"""

from __future__ import annotations

from aiohttp import web

from numatopo_operator.runtime import Runtime

RUNTIME_KEY: web.AppKey[Runtime] = web.AppKey("runtime", Runtime)
# Probes and Prometheus send a whole head at once; what repeats a scrape reconnects.
HEAD_SECONDS = 10.0


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def readiness(runtime: Runtime) -> tuple[bool, str]:
    """(ready, what to say): the `/readyz` answer."""
    if not runtime.role_known.is_set():
        return False, "reading the Lease: holder or standby is not known yet"
    if not runtime.active.is_set():
        return True, "ok: standing by, another replica is active"
    if not runtime.indexed.is_set():
        return False, "active: listing pods and Numatopologies"
    if not runtime.ledger_current.is_set():
        return False, "active: making the ledger current (pod watch catching up, or a list)"
    return True, "ok: active"


async def _readyz(request: web.Request) -> web.Response:
    ready, text = readiness(request.app[RUNTIME_KEY])
    return web.Response(status=200 if ready else 503, text=text + "\n")


async def _metrics(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME_KEY]
    runtime.metrics.ledger_pods.set(len(runtime.ledger))
    return web.Response(
        body=runtime.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4"}
    )


def build_app(runtime: Runtime) -> web.Application:
    app = web.Application()
    app[RUNTIME_KEY] = runtime
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    return app
