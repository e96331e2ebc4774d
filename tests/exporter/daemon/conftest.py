"""The API emulator (kmock) set up like a cluster with the numatopo CRD installed, and a
stand-in for pyudev's monitor (no uevents can be generated without root and real
hardware, so tests feed the loop through the monitor's interface instead)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import kmock
import pytest

from numatopo_exporter.kube import KubeClient

# The real sysfs trees' fixtures, shared with this folder's tests.
from ..sysfs.conftest import sysfs_tree, tree_copy  # noqa: F401

NODE = "node-a"
NODE_UID = "5d0c1e2f-0000-4000-8000-00000000000a"


def register_cluster(emulator: kmock.KubernetesEmulator) -> None:
    """Discovery entries for what the node processes (and kopf) ask for, plus the Node."""
    resources = emulator.resources
    resources["v1/namespaces"] = kmock.ResourceInfo(namespaced=False, kind="Namespace")
    resources["v1/nodes"] = kmock.ResourceInfo(namespaced=False, kind="Node")
    resources["v1/pods"] = kmock.ResourceInfo(namespaced=True, kind="Pod", subresources={"status"})
    resources["v1/events"] = kmock.ResourceInfo(namespaced=True, kind="Event")
    resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = kmock.ResourceInfo(
        namespaced=False, kind="CustomResourceDefinition"
    )
    resources["numatopo.io/v1alpha1/numatopologies"] = kmock.ResourceInfo(
        namespaced=False, kind="Numatopology", subresources={"status"}
    )
    emulator.objects["v1/nodes", None, NODE] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "uid": NODE_UID},
    }


class Outage:
    """A kmock criterion that matches the next `count` requests, then none."""

    def __init__(self, count: int) -> None:
        self.left = count

    def __call__(self, request: kmock.Request) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True


@pytest.fixture
async def cluster(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    register_cluster(kmock)
    return kmock


@pytest.fixture
async def client(cluster: kmock.KubernetesEmulator) -> AsyncIterator[KubeClient]:
    async with KubeClient(str(cluster.url), request_timeout_seconds=5) as kube_client:
        yield kube_client


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
