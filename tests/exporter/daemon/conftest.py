"""The API emulator (kmock) set up like a cluster with the numatopo CRD installed, and a
stand-in for pyudev's monitor (no uevents can be generated without root and real
hardware, so tests feed the loop through the monitor's interface instead)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import kmock

# The cluster set-up lives one folder up (the agent and command tests share it).
from ..conftest import NODE, NODE_UID, register_cluster  # noqa: F401

# The real sysfs trees' fixtures, shared with this folder's tests.
from ..sysfs.conftest import sysfs_tree, tree_copy  # noqa: F401


class Outage:
    """A kmock criterion that matches the next `count` requests, then none."""

    def __init__(self, count: int) -> None:
        self.left = count

    def __call__(self, request: kmock.Request) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True


def writes(emulator: kmock.KubernetesEmulator) -> int:
    """Requests that change something (everything but GET)."""
    return sum(1 for r in emulator if r.method != kmock.method.GET)


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

    def close(self) -> None:
        os.close(self.read_fd)
        os.close(self.write_fd)


# -- hot-unplugs in a sysfs tree -----------------------------------------------------------


def unplug_pci(root: Path, address: str) -> None:
    """Remove a PCI device as the kernel does: its directory and every link into it."""
    device = (root / "sys" / "bus" / "pci" / "devices" / address).resolve()
    for directory, subdirs, files in os.walk(root / "sys"):
        for name in subdirs + files:
            link = Path(directory, name)
            if link.is_symlink() and link.resolve().is_relative_to(device):
                link.unlink()
    shutil.rmtree(device)


def take_offline(root: Path, cpu: int) -> None:
    """Offline a CPU as `echo 0 > cpuN/online` shows it in sysfs."""
    cpus = root / "sys" / "devices" / "system" / "cpu"
    present = sorted(int(p.name[3:]) for p in cpus.glob("cpu[0-9]*"))
    online = ",".join(str(c) for c in present if c != cpu)
    changes = {
        cpus / f"cpu{cpu}" / "online": "0",
        cpus / "online": online,
        cpus / "offline": str(cpu),
    }
    for path, text in changes.items():
        # Replace, never write through: the tree's files may be hard links (tree_copy).
        path.unlink(missing_ok=True)
        path.write_text(text + "\n")
