"""The API emulator (kmock) set up like a cluster with the numatopo CRD installed, and a
stand-in for pyudev's monitor (no uevents can be generated without root and real
hardware, so tests feed the loop through the monitor's interface instead)."""

from __future__ import annotations

import asyncio
import copy
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attrs
import kmock
import yaml
from aiohttp import web

from numatopo_kube import APPLY

# The cluster set-up lives one folder up (the agent and command tests share it).
from ..conftest import NODE, NODE_UID, register_cluster  # noqa: F401

# The real sysfs trees' fixtures, shared with this folder's tests.
from ..discovery.sysfs.conftest import sysfs_tree, tree_copy  # noqa: F401


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


# -- server-side apply of map lists ------------------------------------------------------

CRD = Path(__file__).resolve().parents[3] / "crds" / "numatopology.yaml"
ListPath = tuple[str, ...]


def list_maps(schema: dict[str, Any], path: ListPath = ()) -> dict[ListPath, list[str]]:
    """Where `schema` declares `x-kubernetes-list-type: map`, with the key fields."""
    found: dict[ListPath, list[str]] = {}
    if schema.get("x-kubernetes-list-type") == "map":
        found[path] = list(schema["x-kubernetes-list-map-keys"])
    for name, sub in (schema.get("properties") or {}).items():
        found.update(list_maps(sub, (*path, name)))
    return found


def _at(body: Any, path: ListPath) -> Any:
    for name in path:
        if not isinstance(body, dict):
            return None
        body = body.get(name)
    return body


@attrs.define(kw_only=True)
class ApplyingEmulator(kmock.KubernetesEmulator):
    """kmock's emulator, plus what a real API server does with server-side apply
    (`application/apply-patch+yaml`) of a list the CRD marks as a map list.

    kmock merges every PATCH as a JSON merge patch, so a list in the body replaces the
    stored list whole: under that rule no writer can keep another's condition without
    a read-modify-write. A real API server merges an applied map list by its keys:
    entries of other managers stay, an entry the same manager applied before and now
    leaves out is removed. This class does that for the map lists declared in the
    checked-in CRD (read from crds/, so a CRD that loses the markers fails the tests),
    and nothing more: other lists stay atomic, as they are on a real server.
    """

    _owners: dict[tuple[Any, ListPath, str], set[tuple[Any, ...]]] = attrs.field(
        factory=dict, init=False
    )
    _applying: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)

    async def _handle(self, request: kmock.Request) -> web.StreamResponse:
        content_type = {k.lower(): v for k, v in request.headers.items()}.get("content-type", "")
        if request.action != kmock.action.UPDATE or not content_type.startswith(APPLY):
            return await super()._handle(request)
        # One apply at a time, from reading the stored lists to storing the merge.
        async with self._applying:
            key = (request.resource, request.namespace, request.name)
            stored = self._objects[key].raw if key in self._objects else {}
            manager = request.params.get("fieldManager", "")
            # The request is frozen, its parsed body is not: the merge goes in there, and
            # kmock's own merge-patch then stores the merged lists.
            self._merge(key, manager, stored, request.data)
            return await super()._handle(request)

    def _merge(self, key: Any, manager: str, stored: Any, merged: Any) -> None:
        applied = copy.deepcopy(merged)
        schema = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]
        for path, keys in list_maps(schema["openAPIV3Schema"]).items():
            entries = _at(applied, path)
            if not isinstance(entries, list):
                continue  # this apply does not speak about the list

            def ident(entry: dict[str, Any], keys: list[str] = keys) -> tuple[Any, ...]:
                return tuple(entry.get(name) for name in keys)

            new = {ident(entry): entry for entry in entries}
            before = self._owners.get((key, path, manager), set())
            others = set().union(
                *(
                    ids
                    for (k, p, m), ids in self._owners.items()
                    if (k, p) == (key, path) and m != manager
                )
            )
            old = _at(stored, path) or []
            result = []
            for entry in old:
                entry_id = ident(entry)
                if entry_id in new:
                    result.append(new.pop(entry_id))
                elif entry_id not in before or entry_id in others:
                    result.append(entry)
            result.extend(new.values())
            self._owners[(key, path, manager)] = {ident(entry) for entry in entries}
            parent = merged
            for name in path[:-1]:
                parent = parent.setdefault(name, {})
            parent[path[-1]] = result
