"""Udev events become one debounced rescan; metrics are served over HTTP."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest

from numatopo_exporter.daemon import udev
from numatopo_exporter.metrics import ExporterMetrics, start_metrics_server

from .conftest import FakeDevice, FakeMonitor


@pytest.mark.parametrize(
    ("subsystem", "action", "expected"),
    [
        pytest.param("pci", "remove", True, id="gpu-unplugged"),
        pytest.param("cpu", "offline", True, id="cpu-offlined"),
        pytest.param("memory", "online", True, id="memory-onlined"),
        pytest.param("pci", "bind", False, id="driver-bind-ignored"),
        pytest.param("usb", "add", False, id="other-subsystem-ignored"),
    ],
)
def test_is_topology_event(subsystem: str, action: str, expected: bool) -> None:
    assert expected == udev.is_topology_event(subsystem, action)


async def test_a_burst_of_uevents_is_one_rescan() -> None:
    rescans: list[float] = []
    debouncer = udev.Debouncer(lambda: rescans.append(1.0), delay_seconds=0.05)
    monitor = FakeMonitor()
    watch = udev.UdevWatch(debouncer.trigger, monitor=monitor)
    watch.start()
    try:
        monitor.send(*[FakeDevice("pci", "remove") for _ in range(10)], FakeDevice("usb", "add"))
        await asyncio.sleep(0.02)
        monitor.send(FakeDevice("cpu", "offline"))
        await asyncio.sleep(0.2)
    finally:
        watch.stop()
        monitor.close()

    assert [1.0] == rescans


async def test_metrics_are_served() -> None:
    metrics = ExporterMetrics()
    metrics.gpus.set(8)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    runner = await start_metrics_server(metrics.registry, host="127.0.0.1", port=port)
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/metrics") as response,
        ):
            text = await response.text()
    finally:
        await runner.cleanup()

    assert "numatopo_exporter_gpus 8.0" in text
