"""sysfs as real machines write it when firmware or the kernel misbehaves.

Each case is a hand-made tree of a small two-socket machine, changed the way a class of
real machines is: what is read must still be published (with the quirk named in
`ignored`), and what is published must never be wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from numatopo_engine.model import NumatopologySpec
from numatopo_exporter.discovery.hostroot import HostRoot
from numatopo_exporter.discovery.sysfs import read_sysfs_checked

MakeTree = Callable[[Mapping[str, str], Mapping[str, str]], Path]
NODE = "sys/devices/system/node"
CPU = "sys/devices/system/cpu"


def machine(
    nodes: Mapping[int, str] | None = None, **changes: str | None
) -> tuple[dict[str, str], dict[str, str]]:
    """Files and links of 8 CPUs (two threads per core) on NUMA nodes `nodes` (id ->
    cpulist, '' = memory only, 16 GiB each); `changes` replaces (None removes) files,
    keyed by path with '/' written as '__'."""
    nodes = {0: "0-3", 1: "4-7"} if nodes is None else nodes
    files: dict[str, str] = {f"{CPU}/online": "0-7\n", f"{NODE}/online": ""}
    links: dict[str, str] = {}
    ids = sorted(nodes)
    files[f"{NODE}/online"] = ",".join(map(str, ids)) + "\n"
    for numa, cpulist in nodes.items():
        base = f"{NODE}/node{numa}"
        files[f"{base}/cpulist"] = cpulist + "\n"
        files[f"{base}/meminfo"] = f"Node {numa} MemTotal: 16777216 kB\n"
        row = " ".join("10" if other == numa else "20" for other in ids)
        files[f"{base}/distance"] = row + "\n"
    for cpu in range(8):
        topo = f"{CPU}/cpu{cpu}/topology"
        first = cpu - cpu % 2
        files[f"{topo}/physical_package_id"] = f"{cpu // 4}\n"
        files[f"{topo}/thread_siblings_list"] = f"{first}-{first + 1}\n"
        files[f"{topo}/core_siblings_list"] = f"{cpu // 4 * 4}-{cpu // 4 * 4 + 3}\n"
        if cpu:
            files[f"{CPU}/cpu{cpu}/online"] = "1\n"
    for key, value in changes.items():
        path = key.replace("__", "/")
        if value is None:
            files.pop(path)
        else:
            files[path] = value
    return files, links


def facts(spec: NumatopologySpec) -> list[tuple[int, str, int, dict[str, int]]]:
    return [(n.id, str(n.cpus), n.memory_bytes >> 30, n.distances) for n in spec.numa_nodes]


CASES: list[Any] = [
    pytest.param(
        machine({0: "0-7", 1: "0-7"}),
        [(0, "0-7", 32, {"0": 10})],
        "claim the same CPUs 0-7",
        id="every-node-claims-every-cpu-becomes-one-node",
    ),
    pytest.param(
        machine({0: "0-4", 1: "4-7"}),
        [(0, "0-7", 32, {"0": 10})],
        "claim the same CPUs 4",
        id="overlapping-cpulists-become-one-node",
    ),
    pytest.param(
        machine(
            **{
                f"{NODE}/node0/distance": "10 20 30 30\n",
                f"{NODE}/node1/distance": "20 10 30 30\n",
                f"{NODE}/possible": "0-3\n",
            }
        ),
        [(0, "0-3", 16, {"0": 10, "1": 20}), (1, "4-7", 16, {"0": 20, "1": 10})],
        "list the nodes 0-3; kept the columns of the present nodes [0, 1]",
        id="distance-row-per-possible-node",
    ),
    pytest.param(
        machine(**{f"{NODE}/node0/distance": "10 20 30\n"}),
        [(0, "0-3", 16, {}), (1, "4-7", 16, {})],
        "NUMA distances left out",
        id="distance-row-matching-nothing-drops-the-whole-matrix",
    ),
    pytest.param(
        machine(**{f"{CPU}/cpu3/online": "", f"{CPU}/online": None}),
        [(0, "0-3", 16, {"0": 10, "1": 20}), (1, "4-7", 16, {"0": 20, "1": 10})],
        "cpuN/online is empty for CPUs 3",
        id="empty-cpu-online-counts-as-online",
    ),
    pytest.param(
        machine(**{f"{CPU}/online": ""}),
        [(0, "0-3", 16, {"0": 10, "1": 20}), (1, "4-7", 16, {"0": 20, "1": 10})],
        "online is empty; read each cpuN/online instead",
        id="empty-global-online-falls-back-to-each-cpu",
    ),
    pytest.param(
        machine(
            **{
                f"{NODE}/node1/cpulist": "4-7\n\x00",
                f"{CPU}/cpu5/topology/physical_package_id": "1\x00",
            }
        ),
        [(0, "0-3", 16, {"0": 10, "1": 20}), (1, "4-7", 16, {"0": 20, "1": 10})],
        None,
        id="trailing-nul-bytes",
    ),
    pytest.param(
        machine({0: "0-3", 8: "4-7", 252: "", 253: ""}),
        [
            (0, "0-3", 16, {"0": 10, "8": 20, "252": 20, "253": 20}),
            (8, "4-7", 16, {"0": 20, "8": 10, "252": 20, "253": 20}),
            (252, "", 16, {"0": 20, "8": 20, "252": 10, "253": 20}),
            (253, "", 16, {"0": 20, "8": 20, "252": 20, "253": 10}),
        ],
        None,
        id="gpu-memory-nodes-with-sparse-large-ids",
    ),
    pytest.param(
        # A cgroup-restricted view: node 1 and its CPUs hidden, every row still full.
        machine(
            {0: "0-3"},
            **{
                f"{NODE}/node0/distance": "10 20\n",
                f"{NODE}/possible": "0-1\n",
                f"{NODE}/online": "0-1\n",
                **{f"{CPU}/cpu{cpu}/topology/physical_package_id": None for cpu in range(4, 8)},
                **{f"{CPU}/cpu{cpu}/topology/thread_siblings_list": None for cpu in range(4, 8)},
                **{f"{CPU}/cpu{cpu}/topology/core_siblings_list": None for cpu in range(4, 8)},
                **{f"{CPU}/cpu{cpu}/online": None for cpu in range(4, 8)},
            },
        ),
        [(0, "0-3", 16, {"0": 10})],
        "kept the columns of the present nodes [0]",
        id="cgroup-view-hiding-a-node",
    ),
]


@pytest.mark.parametrize(("tree", "expected", "ignored"), CASES)
def test_published_as_far_as_it_can_be_trusted(
    tree: tuple[dict[str, str], dict[str, str]],
    expected: list[Any],
    ignored: str | None,
    make_tree: MakeTree,
) -> None:
    reading = read_sysfs_checked(HostRoot(make_tree(*tree)))

    assert expected == facts(reading.spec)
    if ignored is None:
        assert [] == reading.ignored
    else:
        assert any(ignored in item for item in reading.ignored), reading.ignored
    # Never overlapping NUMA nodes, never a CPU on a node that is not listed.
    owners = [cpu for node in reading.spec.numa_nodes for cpu in node.cpus.ids]
    assert len(owners) == len(set(owners))
    assert {c.numa for c in reading.spec.cpus} <= {n.id for n in reading.spec.numa_nodes}
