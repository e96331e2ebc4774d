"""Kernel device events that change the topology, turned into debounced rescans (I/O).

A GPU falling off the bus, a CPU taken offline or a memory block onlined each emits a uevent;
hot-plugging one device often emits dozens (functions, bridges, drivers binding), so events are
debounced: the rescan runs once the burst has been quiet for `debounce_seconds`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

SUBSYSTEMS = ("pci", "cpu", "memory")
ACTIONS = frozenset({"add", "remove", "online", "offline"})

logger = logging.getLogger("numatopo.exporter")


def is_topology_event(subsystem: str | None, action: str | None) -> bool:
    return subsystem in SUBSYSTEMS and action in ACTIONS


class Debouncer:
    """Calls `callback` once, `delay_seconds` after the last of a burst of `trigger()`s."""

    def __init__(self, callback: Callable[[], None], *, delay_seconds: float) -> None:
        self.callback = callback
        self.delay_seconds = delay_seconds
        self._handle: asyncio.TimerHandle | None = None

    def trigger(self) -> None:
        self.cancel()
        self._handle = asyncio.get_running_loop().call_later(self.delay_seconds, self._fire)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        self.callback()


class UdevWatch:
    """Reads uevents from the kernel's netlink socket on the event loop (no thread)."""

    def __init__(self, on_event: Callable[[], None], *, monitor: Any = None) -> None:
        self.on_event = on_event
        self._monitor = monitor

    def start(self) -> None:
        """Start listening; raises OSError where netlink is not available (no /run/udev)."""
        if self._monitor is None:
            import pyudev  # imported here: only the daemon needs libudev

            context = pyudev.Context()
            self._monitor = pyudev.Monitor.from_netlink(context, source="kernel")
            for subsystem in SUBSYSTEMS:
                self._monitor.filter_by(subsystem)
        self._monitor.start()
        asyncio.get_running_loop().add_reader(self._monitor.fileno(), self._drain)

    def stop(self) -> None:
        if self._monitor is not None:
            asyncio.get_running_loop().remove_reader(self._monitor.fileno())

    def _drain(self) -> None:
        while True:
            device = self._monitor.poll(timeout=0)
            if device is None:
                return
            if is_topology_event(device.subsystem, device.action):
                logger.info("uevent %s %s %s", device.action, device.subsystem, device.sys_path)
                self.on_event()
