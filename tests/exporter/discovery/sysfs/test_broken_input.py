"""Broken trees: a `DiscoveryError` naming the file, or the documented degradation.

Each case breaks a private copy of a real tree (ghw's snapshot of a Xeon VM with an
NVIDIA GPU, or hwloc's tree of a Xeon with an InfiniBand HCA). Running as root, a
chmod 000 file stays readable, so unreadable files are simulated the ways sysfs
really fails: a directory where a file should be, or a dangling symlink.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from numatopo_engine.model import NumatopologySpec
from numatopo_exporter.discovery.errors import DiscoveryError
from numatopo_exporter.discovery.hostroot import HostRoot
from numatopo_exporter.discovery.sysfs import read_sysfs

CopyOf = Callable[[str], Path]

GPU_TREE = "linux-amd64-accel-nvidia"
IB_TREE = "32em64t-2n8c+dax+nvme+mic+dimms"
NODE0 = "sys/devices/system/node/node0"
CPU0 = "sys/devices/system/cpu/cpu0"
GPU = "sys/devices/pci0000:00/0000:00:01.5/0000:06:00.0"
HCA = "sys/devices/pci0000:80/0000:80:02.2/0000:82:00.0"


def write(relative: str, content: str | bytes) -> Callable[[Path], None]:
    def mutate(tree: Path) -> None:
        path = tree / relative
        path.unlink()
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)

    return mutate


def make_directory(relative: str) -> Callable[[Path], None]:
    def mutate(tree: Path) -> None:
        (tree / relative).unlink()
        (tree / relative).mkdir()

    return mutate


def dangle(relative: str, target: str = "/nonexistent/numatopo-test") -> Callable[[Path], None]:
    def mutate(tree: Path) -> None:
        path = tree / relative
        if path.is_symlink() or path.is_file():
            path.unlink()
        else:
            shutil.rmtree(path)
        path.symlink_to(target)

    return mutate


def remove(relative: str) -> Callable[[Path], None]:
    def mutate(tree: Path) -> None:
        path = tree / relative
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()

    return mutate


def empty_directory(relative: str) -> Callable[[Path], None]:
    def mutate(tree: Path) -> None:
        shutil.rmtree(tree / relative)
        (tree / relative).mkdir()

    return mutate


def forget_cpus_4_to_7(tree: Path) -> None:
    """node0 lists only CPUs 0-3 (cpulist, cpumap and cpuN links) of the 8 the tree has."""
    node = tree / NODE0
    for cpu in range(4, 8):
        (node / f"cpu{cpu}").unlink()
    for name, content in (("cpulist", "0-3\n"), ("cpumap", "0f\n")):
        (node / name).unlink()
        (node / name).write_text(content)


@pytest.mark.parametrize(
    ("tree", "mutate", "names", "why"),
    [
        pytest.param(
            GPU_TREE,
            write(f"{NODE0}/cpulist", "0-3,zz\n"),
            f"{NODE0}/cpulist",
            "is not N or N-M",
            id="garbage-in-node-cpulist",
        ),
        pytest.param(
            GPU_TREE,
            make_directory(f"{NODE0}/cpulist"),
            f"{NODE0}/cpulist",
            "cannot read",
            id="directory-where-cpulist-should-be",
        ),
        pytest.param(
            GPU_TREE,
            empty_directory(NODE0),
            f"{NODE0}/cpulist",
            "is missing",
            id="node-directory-emptied",
        ),
        pytest.param(
            GPU_TREE,
            write(f"{CPU0}/topology/physical_package_id", "0x\n"),
            f"{CPU0}/topology/physical_package_id",
            "expected an integer",
            id="garbage-package-id",
        ),
        pytest.param(
            GPU_TREE,
            dangle(f"{CPU0}/topology/thread_siblings_list"),
            f"{CPU0}/topology/thread_siblings_list",
            "dangling symlink",
            id="dangling-thread-siblings",
        ),
        pytest.param(
            GPU_TREE,
            write(f"{CPU0}/topology/thread_siblings_list", b"0-\xff\n"),
            f"{CPU0}/topology/thread_siblings_list",
            "not text",
            id="binary-garbage-in-siblings",
        ),
        pytest.param(
            GPU_TREE,
            write("sys/devices/system/cpu/cpu1/online", "yes\n"),
            "sys/devices/system/cpu/cpu1/online",
            "expected 0 or 1",
            id="cpu-online-not-a-flag",
        ),
        pytest.param(
            GPU_TREE,
            write(f"{NODE0}/distance", "10 2O\n"),
            f"{NODE0}/distance",
            "expected distances (numbers)",
            id="garbage-in-distance",
        ),
        pytest.param(
            GPU_TREE,
            write(f"{NODE0}/meminfo", "Node 0 MemTot"),
            f"{NODE0}/meminfo",
            "no 'MemTotal",
            id="truncated-meminfo",
        ),
        pytest.param(
            GPU_TREE,
            write(f"{NODE0}/hugepages/hugepages-2048kB/nr_hugepages", "lots\n"),
            f"{NODE0}/hugepages/hugepages-2048kB/nr_hugepages",
            "expected an integer",
            id="hugepage-count-not-a-number",
        ),
        pytest.param(
            GPU_TREE,
            remove("sys/devices/system/cpu"),
            "sys/devices/system/cpu",
            "no cpuN directories",
            id="no-cpu-directory",
        ),
        pytest.param(
            IB_TREE,
            write("sys/devices/system/cpu/online", "0-15,x\n"),
            "sys/devices/system/cpu/online",
            "is not N or N-M",
            id="garbage-in-cpu-online",
        ),
    ],
)
def test_refused_with_the_file_named(
    tree: str, mutate: Callable[[Path], None], names: str, why: str, tree_copy: CopyOf
) -> None:
    root = tree_copy(tree)
    mutate(root)

    with pytest.raises(DiscoveryError) as caught:
        read_sysfs(HostRoot(root))

    assert str(root / names) in str(caught.value)
    assert why in str(caught.value)


def gpu_numa(spec: NumatopologySpec) -> list[tuple[str, int | None]]:
    return [(g.pci_bus_id, g.numa) for g in spec.gpus]


@pytest.mark.parametrize(
    ("breakage", "fact", "expected", "warning"),
    [
        pytest.param(
            (GPU_TREE, write(f"{GPU}/numa_node", "zero\n")),
            gpu_numa,
            [("0000:06:00.0", None)],
            f"{GPU}/numa_node",
            id="gpu-numa-node-not-an-integer-keeps-gpu-unplaced",
        ),
        pytest.param(
            (GPU_TREE, make_directory(f"{GPU}/class")),
            gpu_numa,
            [],
            f"{GPU}/class",
            id="gpu-class-unreadable-skips-the-device",
        ),
        pytest.param(
            (
                GPU_TREE,
                dangle(
                    "sys/bus/pci/devices/0000:06:00.0",
                    "../../../devices/pci0000:00/0000:00:01.5/0000:99:00.0",
                ),
            ),
            gpu_numa,
            [],
            "dangling symlink",
            id="dangling-pci-link-skips-the-device",
        ),
        pytest.param(
            (IB_TREE, make_directory("sys/class/infiniband/mlx4_0/ports/1/link_layer")),
            lambda s: [n.name for n in s.nics],
            [],
            "ports/1/link_layer",
            id="unreadable-link-layer-skips-the-nic",
        ),
        pytest.param(
            (IB_TREE, write(f"{HCA}/numa_node", "-1\n")),
            lambda s: [(n.name, n.numa) for n in s.nics],
            [("mlx4_0", 1)],
            "",
            id="numa-node-minus-one-falls-back-to-local-cpulist",
        ),
        pytest.param(
            (GPU_TREE, forget_cpus_4_to_7),
            lambda s: (str(s.numa_node(0).cpus), {c.id: c.numa for c in s.cpus}),
            ("0-3", {0: 0, 1: 0, 2: 0, 3: 0, 4: None, 5: None, 6: None, 7: None}),
            "CPUs 4-7 are in no NUMA node's cpulist",
            id="cpus-in-no-node-stay-numa-less",
        ),
        pytest.param(
            (GPU_TREE, remove(f"{NODE0}/distance")),
            lambda s: s.numa_node(0).distances,
            {},
            "",
            id="missing-distance-leaves-distances-empty",
        ),
        pytest.param(
            (GPU_TREE, write(f"{NODE0}/distance", "10 20\n")),
            lambda s: s.numa_node(0).distances,
            {},
            f"{NODE0}/distance is empty or has no entry per node of [0]",
            id="distance-row-matching-no-node-list-is-left-out",
        ),
        pytest.param(
            (GPU_TREE, write(f"{CPU0}/topology/physical_package_id", "")),
            lambda s: sorted({c.socket for c in s.cpus}),
            [0],
            "physical_package_id is empty for CPUs 0",
            id="empty-package-id-numbers-sockets-by-core-siblings",
        ),
        pytest.param(
            (GPU_TREE, remove(f"{NODE0}/hugepages")),
            lambda s: s.numa_node(0).hugepages,
            {},
            "",
            id="missing-hugepages-leaves-hugepages-empty",
        ),
    ],
)
def test_degrades_as_documented(
    *,
    breakage: tuple[str, Callable[[Path], None]],
    fact: Callable[[NumatopologySpec], Any],
    expected: Any,
    warning: str,
    tree_copy: CopyOf,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tree, mutate = breakage
    root = tree_copy(tree)
    mutate(root)
    caplog.set_level(logging.WARNING, logger="numatopo_exporter.discovery.sysfs")

    spec = read_sysfs(HostRoot(root))

    assert expected == fact(spec)
    assert warning in caplog.text
