"""Udev events become one debounced rescan; metrics are served over HTTP."""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass

import aiohttp
import pytest

from numatopo_exporter.daemon import udev
from numatopo_exporter.daemon.metrics import ExporterMetrics, start_metrics_server


@dataclass
class FakeDevice:
    subsystem: str
    action: str
    sys_path: str = "/sys/devices/x"


class FakeMonitor:
    """A pyudev Monitor stand-in: a pipe the event loop can watch, and queued devices."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.queue: list[FakeDevice] = []

    def start(self) -> None:
        pass

    def fileno(self) -> int:
        return self.read_fd

    def send(self, *devices: FakeDevice) -> None:
        self.queue.extend(devices)
        os.write(self.write_fd, b"x")

    def poll(self, timeout: float = 0) -> FakeDevice | None:
        if not self.queue:
            os.read(self.read_fd, 4096)
            return None
        return self.queue.pop(0)


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
        os.close(monitor.read_fd)
        os.close(monitor.write_fd)

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
