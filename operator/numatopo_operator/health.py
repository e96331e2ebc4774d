"""Probes and metrics over HTTP: `/healthz`, `/readyz`, `/metrics` (aiohttp, I/O).

/healthz  200 while the process serves (liveness: restart only a hung process)
/readyz   200 only on the replica that decides with a complete ledger; the others
          answer 503, so the extender Service sends the scheduler to the active one
/metrics  Prometheus text format
"""

from __future__ import annotations

from aiohttp import web

from numatopo_operator.runtime import Runtime

__all__ = ["build_app"]

RUNTIME_KEY: web.AppKey[Runtime] = web.AppKey("runtime", Runtime)


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME_KEY]
    if not runtime.indexed.is_set():
        return web.Response(status=503, text="listing pods and Numatopologies\n")
    if not runtime.active.is_set():
        return web.Response(status=503, text="standing by: another replica is active\n")
    return web.Response(text="ok\n")


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
