"""A real GPU whose PCI `numa_node` is -1 on a one-NUMA-node machine: it is on node 0.

The machine: one H200 in a Firecracker VM (tests/fixtures/captured/README.md). The VM's
firmware gives the GPU no proximity domain, so the kernel writes `numa_node` -1, and NVML
answers NotSupported for its NUMA node. The GPU is still local to every CPU: its
`local_cpulist` is 0-15, all of node 0, and node 0 is the only node. numatopo places it
on node 0 (pci.py's locality rules 2, then 4); `nvidia-smi topo -m` on the same machine
says NUMA Affinity 0, and lstopo hangs it under the one node (the lstopo cross-checks
run on this tree like on the others).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from numatopo_exporter.discovery.hostroot import HostRoot
from numatopo_exporter.discovery.nvidia_smi_topo import read_nvidia_smi_topo
from numatopo_exporter.discovery.sysfs import read_sysfs

TreeOf = Callable[[str], Path]
TREE = "16intel64-1n16c+h200+firecracker"
GPU_DIR = "sys/devices/pci0000:00/0000:00:06.0"
TOPO = Path(__file__).resolve().parents[3] / "fixtures" / "topo"


def gpu_numa(root: Path) -> list[tuple[str, int | None]]:
    return [(g.pci_bus_id, g.numa) for g in read_sysfs(HostRoot(root)).gpus]


def test_the_tree_says_minus_one_and_all_cpus(sysfs_tree: TreeOf) -> None:
    """What the cases below start from, as the kernel wrote it."""
    gpu = sysfs_tree(TREE) / GPU_DIR

    assert ("-1", "0-15") == (
        (gpu / "numa_node").read_text().strip(),
        (gpu / "local_cpulist").read_text().strip(),
    )


def test_local_cpulist_places_it_on_node_0(sysfs_tree: TreeOf) -> None:
    assert [("0000:00:06.0", 0)] == gpu_numa(sysfs_tree(TREE))


def test_the_only_node_places_it_without_local_cpus(tree_copy: TreeOf) -> None:
    """Without `local_cpulist`/`local_cpus` (and no host bridge affinity in this tree):
    on a machine with one NUMA node every device is on it."""
    root = tree_copy(TREE)
    for name in ("local_cpulist", "local_cpus"):
        os.unlink(root / GPU_DIR / name)

    assert [("0000:00:06.0", 0)] == gpu_numa(root)


def test_two_nodes_and_no_locality_leave_it_unknown(tree_copy: TreeOf) -> None:
    """The one-node rule is no guess: with a second NUMA node (CPUs 8-15 moved to it)
    and `local_cpulist` 0-15 spanning both, the GPU's node is unknown, not 0."""
    root = tree_copy(TREE)
    nodes = root / "sys/devices/system/node"
    (nodes / "node1").mkdir()
    for cpu in range(8, 16):
        os.unlink(nodes / "node0" / f"cpu{cpu}")
        (nodes / "node1" / f"cpu{cpu}").symlink_to(f"../../cpu/cpu{cpu}")
    for name, text in (
        ("node0/cpulist", "0-7"),
        ("node1/cpulist", "8-15"),
        ("node0/distance", "10 20"),
        ("node1/distance", "20 10"),
        ("online", "0-1"),
    ):
        if (nodes / name).exists():
            os.unlink(nodes / name)  # a hard link into the shared extraction
        (nodes / name).write_text(text + "\n")

    spec = read_sysfs(HostRoot(root))

    assert {0: "0-7", 1: "8-15"} == {n.id: str(n.cpus) for n in spec.numa_nodes}
    assert [("0000:00:06.0", None)] == [(g.pci_bus_id, g.numa) for g in spec.gpus]


def test_nvidia_smi_on_the_same_machine_agrees(sysfs_tree: TreeOf) -> None:
    topo = read_nvidia_smi_topo(TOPO / "h200-1gpu-firecracker_numatopo.txt")

    assert [g.numa for g in topo.gpus] == [numa for _, numa in gpu_numa(sysfs_tree(TREE))]
