"""`numatopo exporter --oneshot --no-publish` on a real GPU machine, replayed.

The machine (one H200 in a Firecracker VM, tests/fixtures/captured/README.md) ran the
exporter once; its output is `captured/h200-1gpu-firecracker/exporter-oneshot.txt`. Here
the same command reads the same machine again: its sysfs tree as gathered there and its
NVML answers as recorded there, through the same discovery, merge and printing. Nothing
but the pynvml module is replaced (in `sys.modules`, where the exporter's import finds
it). Any change in what the readers or the merge say about this machine makes the
printed object differ from the one the machine printed.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from numatopo_cli.main import main
from numatopo_engine.model import Numatopology
from nvml_replay import ReplayNvml

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CAPTURED = FIXTURES / "captured" / "h200-1gpu-firecracker"
RECORDING = FIXTURES / "nvml" / "h200-1gpu-firecracker.json"
TREE = "16intel64-1n16c+h200+firecracker"
NODE = "gpu-h200"  # the NODE_NAME the capture ran with


def captured_run() -> tuple[list[str], dict[str, Any]]:
    """The machine's log messages (without time and level) and the object it printed."""
    text = (CAPTURED / "exporter-oneshot.txt").read_text()
    start = text.index("{")
    logs = [line.split(": ", 1)[1] for line in text[:start].splitlines()]
    obj: dict[str, Any] = json.loads(text[start:])
    return logs, obj


@pytest.fixture
def printed(
    sysfs_tree: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> tuple[list[str], dict[str, Any]]:
    """What the exporter logs and prints reading the captured machine."""
    monkeypatch.setitem(sys.modules, "pynvml", ReplayNvml.load(RECORDING))
    caplog.set_level(logging.INFO, logger="numatopo.exporter")
    root = sysfs_tree(TREE)
    code = main(
        ["exporter", "--oneshot", "--no-publish", f"--sysfs-root={root}", f"--node-name={NODE}"]
    )
    assert 0 == code
    # The machine read its own `/`; here the files it names are under the tree.
    logs = [
        r.getMessage().removeprefix(str(root))
        for r in caplog.records
        if r.name == "numatopo.exporter"
    ]
    return logs, json.loads(capsys.readouterr().out)


def test_prints_what_the_machine_printed(printed: tuple[list[str], dict[str, Any]]) -> None:
    """The whole object, spec hash included, and the same two notices (no kubelet)."""
    logs, obj = printed
    machine_logs, machine_obj = captured_run()

    assert machine_obj == obj
    assert machine_logs == logs


def test_what_the_machine_printed_says() -> None:
    """The facts the object above carries, spelled out: 16 CPUs, each its own core, on one
    socket and NUMA node 0 with 4.3 GiB; one H200 from NVML on NUMA node 0 (from sysfs,
    its `numa_node` being -1) with NVML's uuid and memory, and no NVLink."""
    _, obj = captured_run()
    spec = Numatopology.model_validate(obj).spec

    assert [(0, "0-15", 4659331072, {"0": 10})] == [
        (n.id, str(n.cpus), n.memory_bytes, n.distances) for n in spec.numa_nodes
    ]
    assert [(c, c, 0, 0, True) for c in range(16)] == [
        (c.id, c.core, c.socket, c.numa, c.online) for c in spec.cpus
    ]
    assert [
        (
            0,
            "GPU-e85e6fc9-cfd7-d117-a189-4ceead5d0b22",
            "0000:00:06.0",
            0,
            "NVIDIA H200",
            150754820096,
            "nvidia.com/gpu",
            False,
        )
    ] == [
        (g.index, g.uuid, g.pci_bus_id, g.numa, g.model, g.memory_bytes, g.resource, g.mig_mode)
        for g in spec.gpus
    ]
    assert ([], [], [], []) == (spec.gpu_links, spec.gpu_paths, spec.nics, spec.pci_paths)
    assert ["sysfs", "nvml", "kubelet"] == spec.sources


def test_inspect_prints_what_the_machine_printed(
    sysfs_tree: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`numatopo inspect -o json` there and here: the same object (inspect adds no hash)."""
    monkeypatch.setitem(sys.modules, "pynvml", ReplayNvml.load(RECORDING))
    root = sysfs_tree(TREE)

    code = main(["inspect", "-o", "json", f"--sysfs-root={root}", f"--node-name={NODE}"])

    assert 0 == code
    assert json.loads((CAPTURED / "inspect.json").read_text()) == json.loads(
        capsys.readouterr().out
    )
