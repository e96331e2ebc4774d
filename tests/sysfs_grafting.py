"""Graft accelerator PCI functions into a copy of a real sysfs tree (see
tests/fixtures/sysfs/accelerators/README.md for the ids and where they come from)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

GRAFTS = Path(__file__).resolve().parent / "fixtures" / "sysfs" / "accelerators" / "grafts.json"


def graft_names() -> list[str]:
    return sorted(json.loads(GRAFTS.read_text())["trees"])


def grafted_tree(name: str, real_tree: Callable[[str], Path], dest: Path) -> Path:
    """A copy of the base tree with the functions of `grafts.json` tree `name` added."""
    data = json.loads(GRAFTS.read_text())
    # Hard links: the graft only adds files and links, it never writes into copied ones.
    root = Path(
        shutil.copytree(real_tree(data["base"]), dest / name, symlinks=True, copy_function=os.link)
    )
    sys_dir = root / "sys"
    for device in data["trees"][name]:
        _graft(sys_dir, device)
    return root


def _node_cpus(sys_dir: Path, numa: int) -> list[int]:
    text = (sys_dir / "devices" / "system" / "node" / f"node{numa}" / "cpulist").read_text()
    cpus: list[int] = []
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def _graft(sys_dir: Path, device: dict[str, object]) -> None:
    bus, port, numa = str(device["bus"]), str(device["port"]), int(str(device["numa"]))
    vendor, device_id = str(device["id"]).split(":")
    port_dir = sys_dir / "devices" / port
    assert port_dir.is_dir(), f"{port} is not a bridge of the base tree"
    function = port_dir / bus
    function.mkdir()
    cpus = _node_cpus(sys_dir, numa)
    mask = sum(1 << c for c in cpus)
    files = {
        "vendor": f"0x{vendor}",
        "device": f"0x{device_id}",
        "class": str(device["class"]),
        "numa_node": str(numa),
        "local_cpulist": ",".join(map(str, cpus)),
        "local_cpus": f"{mask:08x}",
        "subsystem_vendor": f"0x{vendor}",
        "subsystem_device": f"0x{device_id}",
    }
    for name, text in files.items():
        (function / name).write_text(text + "\n")
    link = sys_dir / "bus" / "pci" / "devices" / bus
    os.symlink(os.path.relpath(function, link.parent), link)
