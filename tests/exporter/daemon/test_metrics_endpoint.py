"""The node processes' HTTP endpoint (asyncio's server, no framework): /metrics and
/healthz over real sockets, anything else refused, and a client that never finishes
its request holds nothing but its own socket."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest

from metric_samples import sample
from numatopo_exporter.metrics import (
    HEAD_SECONDS,
    MAX_CONNECTIONS,
    ExporterMetrics,
    start_metrics_server,
)


async def test_metrics_and_healthz_are_served_and_the_rest_refused() -> None:
    metrics = ExporterMetrics()
    metrics.gpus.set(4)
    server = await start_metrics_server(metrics.registry, host="127.0.0.1", port=0)
    base = f"http://127.0.0.1:{server.port}"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/metrics?x=1") as response:
                assert response.status == 200
                assert response.headers["Content-Type"].startswith("text/plain; version=")
                assert "numatopo_exporter_gpus 4.0" in await response.text()
            async with session.get(f"{base}/healthz") as response:
                assert (response.status, await response.text()) == (200, "ok")
            async with session.get(f"{base}/other") as response:
                assert response.status == 404
            async with session.post(f"{base}/metrics") as response:
                assert response.status == 405
            async with session.get(f"{base}/healthz", headers={"X-Big": "a" * 9000}) as response:
                assert response.status == 400
    finally:
        await server.cleanup()


async def test_a_stalled_client_does_not_stop_others() -> None:
    server = await start_metrics_server(ExporterMetrics().registry, host="127.0.0.1", port=0)
    try:
        _, stalled = await asyncio.open_connection("127.0.0.1", server.port)
        stalled.write(b"GET /metrics HTTP/1.1\r\n")  # and never the end of its head
        await stalled.drain()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        async with asyncio.timeout(5):
            answer = await reader.read()
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
        assert answer.endswith(b"\r\n\r\nok")
        writer.close()
        stalled.close()
    finally:
        await server.cleanup()


async def test_silent_connections_past_the_limit_are_shut_oldest_first() -> None:
    """100 more connections than the limit, each sending nothing: the oldest 100 are
    ended at once (before, each was held until its 10 s head deadline: a client opening
    them faster ran the process out of file descriptors), the newest are still open, and
    a request made now is answered."""
    metrics = ExporterMetrics()
    server = await start_metrics_server(metrics.registry, host="127.0.0.1", port=0)
    extra = 100
    silent = []
    try:
        for _ in range(MAX_CONNECTIONS + extra):
            silent.append(await asyncio.open_connection("127.0.0.1", server.port))
        async with asyncio.timeout(HEAD_SECONDS / 2):
            for reader, _ in silent[:extra]:
                with contextlib.suppress(ConnectionResetError):
                    assert await reader.read() == b""
        newest, _ = silent[-1]
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await newest.read()
        url = f"http://127.0.0.1:{server.port}/healthz"
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            assert (response.status, await response.text()) == (200, "ok")
        labels = {"server": "metrics"}
        assert sample(metrics, "numatopo_http_connections_shut_total", labels) == extra + 1
    finally:
        for _, writer in silent:
            writer.close()
        await server.cleanup()
