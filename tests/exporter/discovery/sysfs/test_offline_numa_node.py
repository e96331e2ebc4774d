"""The online CPUs of an offline NUMA node belong to no NUMA node.

A real machine was seen with node 0 offline: `cpu/online` 4-20, `node1/cpulist` the odd
CPUs, the even ones online and listed by no node. lstopo attaches them to no NUMA node
and the kubelet (cadvisor reads the `nodeN` directories) leaves them out of its topology.
No gathered tree has this, so the tree here is *derived*: hwloc's real tree of a
two-socket Xeon with four interleaved NUMA nodes (`40intel64-2g2n4c+pcilocality`:
node0 = 0,4,...,36, node1 = 1,5,...), with node0 taken offline the way the kernel shows
it (its directory gone, `node/online` and `node/has_cpu` without it) and CPUs 0-3
offline (`cpu/online` 4-39).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.topology_tables import build_tables
from numatopo_exporter.daemon.publishing import degraded_condition
from numatopo_exporter.discovery.hostroot import HostRoot
from numatopo_exporter.discovery.sysfs import read_sysfs_checked

TREE = "40intel64-2g2n4c+pcilocality"
SYSTEM = "sys/devices/system"
# CPUs 0,4,...,36 were node0's; 0 is also offline.
NODE0_ONLINE = CPUSet(range(4, 40, 4))


def replace(path: Path, content: str) -> None:
    path.unlink()  # hard links to the shared extraction: never write through them
    path.write_text(content)


def take_node0_offline(tree: Path) -> None:
    shutil.rmtree(tree / SYSTEM / "node" / "node0")
    for name in ("online", "has_cpu"):
        if (tree / SYSTEM / "node" / name).exists():
            replace(tree / SYSTEM / "node" / name, "1-3\n")
    replace(tree / SYSTEM / "cpu" / "online", "4-39\n")


def test_cpus_of_an_offline_node_are_published_without_a_numa_node(
    tree_copy: Callable[[str], Path],
) -> None:
    tree = tree_copy(TREE)
    take_node0_offline(tree)

    reading = read_sysfs_checked(HostRoot(tree))
    spec = NumatopologySpec.model_validate(reading.spec.to_wire())

    assert [n.id for n in spec.numa_nodes] == [1, 2, 3]
    assert str(spec.numa_node(1).cpus) == str(CPUSet(range(5, 40, 4)))
    numa_less = {c.id for c in spec.cpus if c.numa is None}
    assert numa_less == set(range(0, 40, 4))
    assert {c.id for c in spec.cpus if c.numa is None and c.online} == set(NODE0_ONLINE)
    for node in spec.numa_nodes:
        assert not node.cpus.ids & NODE0_ONLINE.ids, f"node {node.id} claims node0's CPUs"
    # Offline CPUs of online nodes keep their node.
    assert {c.id: c.numa for c in spec.cpus if not c.online} == {0: None, 1: 1, 2: 2, 3: 3}
    # The CPUs' own topology is still read.
    assert {c.socket for c in spec.cpus if c.id in NODE0_ONLINE.ids} <= {0, 1}

    (why,) = [item for item in reading.ignored if "no NUMA node" in item]
    assert str(NODE0_ONLINE) in why
    condition = degraded_condition([], ignored=reading.ignored, now=0.0)
    assert (condition["status"], condition["reason"]) == ("True", "IgnoredInput")
    assert str(NODE0_ONLINE) in condition["message"]

    # Never handed out: the engine's pool is what the NUMA nodes list.
    tables = build_tables(spec)
    pool = set().union(*tables.numa_allocatable.values())
    assert pool == set().union(*(n.cpus.ids for n in spec.numa_nodes))
    assert not pool & NODE0_ONLINE.ids
    assert not set(tables.cpu_numa) & NODE0_ONLINE.ids
