"""`read_sysfs` on real gathered trees: the facts each machine is in the corpus for."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from numatopo_engine.model import NumatopologySpec
from numatopo_exporter.discovery.hostroot import HostRoot
from numatopo_exporter.discovery.sysfs import hugepage_size_key, read_sysfs

TreeOf = Callable[[str], Path]
Fact = Callable[[NumatopologySpec], Any]


def node_cpus(spec: NumatopologySpec) -> dict[int, str]:
    return {node.id: str(node.cpus) for node in spec.numa_nodes}


def offline(spec: NumatopologySpec) -> list[tuple[int, int]]:
    return [(cpu.id, cpu.numa) for cpu in spec.cpus if not cpu.online]


def gpus(spec: NumatopologySpec) -> list[tuple[int, str, int | None, str, str]]:
    return [(g.index, g.pci_bus_id, g.numa, g.vendor, g.resource) for g in spec.gpus]


def nics(spec: NumatopologySpec) -> list[tuple[str, str, int | None, str, list[str]]]:
    return [(n.name, n.pci_bus_id, n.numa, n.link_layer, n.netdevs) for n in spec.nics]


def test_every_tree_reads_as_a_spec(tree_id: str, sysfs_tree: TreeOf) -> None:
    spec = read_sysfs(HostRoot(sysfs_tree(tree_id)))

    assert ["sysfs"] == spec.sources
    assert spec.capacity.cpus > 0
    assert spec.online_cpus().ids == {cpu.id for cpu in spec.cpus if cpu.online}


@pytest.mark.parametrize(
    ("tree", "fact", "expected"),
    [
        pytest.param(
            "16em64t-4s2c2t-offlines",
            offline,
            [(2, 0), (5, 0), (13, 0), (14, 0)],
            id="offline-cpus-listed-on-their-node",
        ),
        pytest.param(
            "16em64t-4s2c2t-offlines",
            node_cpus,
            {0: "0-1,3-4,6-12,15"},
            id="offline-cpus-not-in-node-cpus-old-kernel-cpumap",
        ),
        pytest.param(
            "linux-amd64-offlineCPUs",
            lambda s: (offline(s), node_cpus(s)),
            ([(2, 0), (3, 0)], {0: "0-1"}),
            id="offline-cpus-modern-kernel",
        ),
        pytest.param(
            "256ppc-8n8s4t",
            lambda s: [n.id for n in s.numa_nodes],
            [0, 1, 4, 5, 8, 9, 12, 13],
            id="sparse-numa-node-ids",
        ),
        pytest.param(
            "256ppc-8n8s4t",
            lambda s: s.numa_node(4).distances,
            {"0": 40, "1": 40, "4": 10, "5": 20, "8": 40, "9": 40, "12": 40, "13": 40},
            id="distances-keyed-by-sparse-ids",
        ),
        pytest.param(
            "256ppc-8n8s4t",
            lambda s: (len({c.socket for c in s.cpus}), s.cpus[4].socket, s.cpus[5].core),
            (64, 1, 4),
            id="package-id-minus-one-numbers-sockets-by-core-siblings",
        ),
        pytest.param(
            "fakememinitiators-1np2c+1npp+gi",
            lambda s: [(n.id, str(n.cpus), n.memory_bytes > 0) for n in s.numa_nodes],
            [(0, "0-1", False), (1, "2-3", False), (2, "4-5", False), (3, "6-7", False)]
            + [(4, "", False)]
            + [(numa, "", True) for numa in range(5, 11)],
            id="cpu-only-and-memory-only-nodes",
        ),
        pytest.param(
            "2i386-2t-hugepagesizecount",
            lambda s: [(n.id, str(n.cpus), n.memory_bytes, n.hugepages) for n in s.numa_nodes],
            [(0, "0-1", 400016779264 * 1024, {"2Mi": 1, "16Gi": 1})],
            id="no-numa-dirs-is-one-node-from-proc-meminfo",
        ),
        pytest.param(
            "2arm-2c",
            lambda s: (node_cpus(s), s.numa_node(0).distances),
            ({0: "0-1"}, {"0": 10}),
            id="arm-without-numa-dirs",
        ),
        pytest.param(
            "16amd64-4n4c-cgroup-distance-merge",
            lambda s: s.numa_node(0).hugepages,
            {"2Mi": 512},
            id="per-node-hugepages",
        ),
        pytest.param(
            "linux-amd64-accel-nvidia",
            gpus,
            [(0, "0000:06:00.0", 0, "nvidia", "nvidia.com/gpu")],
            id="nvidia-3d-controller-but-not-virtio-gpu",
        ),
        pytest.param(
            "16intel64-1n16c+h200+firecracker",
            lambda s: (gpus(s), s.numa_node(0).memory_bytes),
            ([(0, "0000:00:06.0", 0, "nvidia", "nvidia.com/gpu")], 4550128 * 1024),
            # The VM's /proc/meminfo says 131981020 kB; node0/meminfo, which the
            # kubelet's memory manager and lstopo read too, says 4550128 kB.
            id="vm-gpu-numa-node-minus-one-and-node-meminfo-not-proc-meminfo",
        ),
        pytest.param(
            "linux-amd64-61797caf7c0b6bca1725ad7975ed4773",
            lambda s: (gpus(s), s.numa_node(0).memory_bytes),
            ([(0, "0000:0a:00.0", 0, "amd", "amd.com/gpu")], 32777916 * 1024),
            id="amd-gpu-and-proc-meminfo-when-node-has-none",
        ),
        pytest.param(
            "linux-amd64-8581cf3a529e5d8b97ea876eade2f60d",
            gpus,
            [],
            id="matrox-bmc-vga-is-no-gpu",
        ),
        pytest.param(
            "32em64t-2n8c+dax+nvme+mic+dimms",
            nics,
            [("mlx4_0", "0000:82:00.0", 1, "InfiniBand", ["ib0"])],
            id="infiniband-hca-but-not-scif",
        ),
        pytest.param(
            "40intel64-2g2n4c+pcilocality",
            nics,
            [("qib0", "0000:43:00.0", 2, "InfiniBand", ["ib0"])],
            id="numa-node-file-beats-machine-wide-local-cpus",
        ),
    ],
)
def test_real_tree_facts(tree: str, fact: Fact, expected: Any, sysfs_tree: TreeOf) -> None:
    spec = read_sysfs(HostRoot(sysfs_tree(tree)))

    assert expected == fact(spec)


def test_core_is_lowest_sibling_and_unique_node_wide(sysfs_tree: TreeOf) -> None:
    """On a 2-socket SMT Xeon the sysfs core_id repeats per socket; `core` does not."""
    spec = read_sysfs(HostRoot(sysfs_tree("linux-amd64-8581cf3a529e5d8b97ea876eade2f60d")))
    cores: dict[int, list[int]] = {}
    for cpu in spec.cpus:
        cores.setdefault(cpu.core, []).append(cpu.id)

    assert {core: min(ids) for core, ids in cores.items()} == {core: core for core in cores}
    assert 12 == len(cores)
    assert all(len(ids) == 2 for ids in cores.values())


@pytest.mark.parametrize(
    ("size_kib", "key"),
    [
        pytest.param(2048, "2Mi", id="x86-2M"),
        pytest.param(1048576, "1Gi", id="x86-1G"),
        pytest.param(64, "64Ki", id="arm64-64K"),
        pytest.param(32768, "32Mi", id="arm64-32M"),
        pytest.param(524288, "512Mi", id="arm64-512M"),
        pytest.param(16777216, "16Gi", id="power-16G"),
        pytest.param(1536, "1536Ki", id="not-a-power-of-two"),
    ],
)
def test_hugepage_size_key(size_kib: int, key: str) -> None:
    assert key == hugepage_size_key(size_kib)
