"""`read_sysfs` agrees with hwloc's lstopo on every real tree we have.

lstopo is an independent reader of the same files. Where the two legitimately differ,
the comparison below narrows to what both must agree on and says why:

* cgroup-restricted trees: lstopo shows only the CPUs and NUMA nodes the gathering
  process's cpuset allowed (the Machine's `allowed_cpuset`/`allowed_nodeset`); the
  exporter describes the whole node, so our sets are compared after intersecting with
  what lstopo was allowed to see.
* NUMA nodes without memory: hwloc drops them (a CPU-only node is merged into its
  package), we keep them with `memoryBytes: 0` because the kernel numbers them.
* memory-only NUMA nodes (NVM, CXL, HBM): hwloc hangs them under the CPUs of their
  initiator; the kernel's `cpulist` for them is empty and so is ours.
* PCI devices on a multi-node machine that lstopo attaches to the whole Machine have
  no locality to compare; ours may still know better (a `numa_node` file) and must
  then be one of the Machine's nodes.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import NumatopologySpec
from numatopo_exporter.discovery.hostroot import HostRoot
from numatopo_exporter.discovery.pci import PciTree
from numatopo_exporter.discovery.sysfs import read_sysfs

pytestmark = pytest.mark.lstopo

TreeOf = Callable[[str], Path]
XmlOf = Callable[[str], bytes]

# lstopo's I/O objects; every other object carries the nodeset of its CPU side.
IO_TYPES = frozenset({"Bridge", "PCIDev", "OSDev", "Misc"})


def hwloc_set(text: str) -> frozenset[int]:
    """hwloc's bitmap text: 32-bit hex words, most significant first, '' for a zero word."""
    ids: set[int] = set()
    for position, word in enumerate(reversed(text.split(","))):
        value = int(word, 16) if word else 0
        ids.update(position * 32 + bit for bit in range(32) if value >> bit & 1)
    return frozenset(ids)


@dataclass
class Lstopo:
    """What the cross-check needs from one lstopo XML, as sets of OS indices."""

    allowed_cpus: frozenset[int] = frozenset()
    allowed_nodes: frozenset[int] = frozenset()
    numa_cpus: dict[int, frozenset[int]] = field(default_factory=dict)
    numa_memory: dict[int, int] = field(default_factory=dict)
    cores: set[frozenset[int]] = field(default_factory=set)
    packages: set[frozenset[int]] = field(default_factory=set)
    pci_nodes: dict[str, frozenset[int]] = field(default_factory=dict)
    """PCI bus id -> nodeset of the nearest CPU-side object the device hangs under."""


def parse_lstopo(xml: bytes) -> Lstopo:
    machine = ET.fromstring(xml).find("object")
    assert machine is not None
    assert "Machine" == machine.get("type")
    out = Lstopo(
        allowed_cpus=hwloc_set(machine.get("allowed_cpuset", "0x0")),
        allowed_nodes=hwloc_set(machine.get("allowed_nodeset", "0x0")),
    )

    def walk(element: ET.Element, nodeset: frozenset[int]) -> None:
        for child in element.findall("object"):
            kind = child.get("type", "")
            cpuset = hwloc_set(child.get("cpuset", "0x0"))
            if kind == "NUMANode":
                numa = int(child.get("os_index", "-1"))
                out.numa_cpus[numa] = cpuset
                if "local_memory" in child.attrib:
                    out.numa_memory[numa] = int(child.attrib["local_memory"])
            elif kind == "Core":
                out.cores.add(cpuset)
            elif kind == "Package":
                out.packages.add(cpuset)
            elif kind == "PCIDev":
                out.pci_nodes[child.get("pci_busid", "")] = nodeset
            below = nodeset if kind in IO_TYPES else hwloc_set(child.get("nodeset", "0x0"))
            walk(child, below)

    walk(machine, hwloc_set(machine.get("nodeset", "0x0")))
    return out


@pytest.fixture
def ours(tree_id: str, sysfs_tree: TreeOf) -> NumatopologySpec:
    return read_sysfs(HostRoot(sysfs_tree(tree_id)))


@pytest.fixture
def theirs(tree_id: str, lstopo_reference: XmlOf) -> Lstopo:
    return parse_lstopo(lstopo_reference(tree_id))


def grouped(spec: NumatopologySpec, key: str, allowed: frozenset[int]) -> set[frozenset[int]]:
    """Online CPUs grouped by `core` or `socket`, as far as lstopo was allowed to see."""
    groups: dict[int, set[int]] = {}
    for cpu in spec.cpus:
        if cpu.online and cpu.id in allowed:
            groups.setdefault(getattr(cpu, key), set()).add(cpu.id)
    return {frozenset(group) for group in groups.values()}


def test_numa_node_set(ours: NumatopologySpec, theirs: Lstopo) -> None:
    """lstopo's nodes are ours; ours beyond them have no memory or were hidden by a cgroup."""
    extra = {node.id for node in ours.numa_nodes} - set(theirs.numa_cpus)
    unexplained = {
        numa
        for numa in extra
        if ours.numa_node(numa).memory_bytes > 0 and numa in theirs.allowed_nodes
    }

    assert set(theirs.numa_cpus) <= {node.id for node in ours.numa_nodes}
    assert set() == unexplained


def test_numa_node_cpus(ours: NumatopologySpec, theirs: Lstopo) -> None:
    expected = {numa: cpus for numa, cpus in theirs.numa_cpus.items() if ours.numa_node(numa).cpus}
    actual = {
        numa: ours.numa_node(numa).cpus.ids & theirs.allowed_cpus
        for numa in theirs.numa_cpus
        if ours.numa_node(numa).cpus
    }

    assert expected == actual


def test_numa_node_memory(ours: NumatopologySpec, theirs: Lstopo) -> None:
    actual = {numa: ours.numa_node(numa).memory_bytes for numa in theirs.numa_memory}

    assert theirs.numa_memory == actual


# Trees where hwloc splits what the kernel calls one core. AMD Bulldozer (Opteron 6276)
# pairs two integer cores into a compute unit that shares the FPU and L2; the kernel
# lists the pair as thread siblings (and the kubelet's SMT alignment must not split it),
# hwloc makes one Core per `core_id`. There, every lstopo Core lies inside one of ours.
COMPUTE_UNIT_TREES = frozenset({"64amd64-4s2n4ca2co"})


def test_cores(tree_id: str, ours: NumatopologySpec, theirs: Lstopo) -> None:
    """CPUs that share a `core` are exactly the PUs that share an lstopo Core."""
    actual = grouped(ours, "core", theirs.allowed_cpus)
    if tree_id in COMPUTE_UNIT_TREES:
        merged = {
            frozenset().union(*(core for core in theirs.cores if core <= unit)) for unit in actual
        }

        assert actual == merged
        assert len(theirs.cores) == 2 * len(actual)
    else:
        assert theirs.cores == actual


def test_packages(ours: NumatopologySpec, theirs: Lstopo) -> None:
    # In a cgroup-restricted tree lstopo keeps a Package with no allowed CPU when its
    # memory is allowed; it has nothing to compare.
    expected = {package for package in theirs.packages if package}

    assert expected == grouped(ours, "socket", theirs.allowed_cpus)


def test_pci_locality(
    tree_id: str, sysfs_tree: TreeOf, ours: NumatopologySpec, theirs: Lstopo
) -> None:
    """Every PCI device lstopo places under one NUMA node is on that node for us too."""
    pci = PciTree(os.path.join(sysfs_tree(tree_id), "sys"))
    numa_cpus = {node.id: node.cpus for node in ours.numa_nodes}
    located = {bus: nodes for bus, nodes in theirs.pci_nodes.items() if len(nodes) == 1}
    expected = {bus: next(iter(nodes)) for bus, nodes in located.items()}
    actual = {bus: pci.numa_of(bus, numa_cpus) for bus in located}
    elsewhere = {
        bus: numa
        for bus, nodes in theirs.pci_nodes.items()
        if len(nodes) > 1
        and (numa := pci.numa_of(bus, numa_cpus)) is not None
        and numa not in nodes
    }

    assert expected == actual
    assert {} == elsewhere


def test_gpu_and_nic_locality(ours: NumatopologySpec, theirs: Lstopo) -> None:
    devices = [(g.pci_bus_id, g.numa) for g in ours.gpus] + [
        (n.pci_bus_id, n.numa) for n in ours.nics
    ]
    expected = {
        bus: next(iter(theirs.pci_nodes[bus]))
        for bus, _ in devices
        if len(theirs.pci_nodes[bus]) == 1
    }
    actual = {bus: numa for bus, numa in devices if bus in expected}

    assert expected == actual


def test_offline_cpus_are_listed_but_not_in_any_node(
    ours: NumatopologySpec, theirs: Lstopo
) -> None:
    """lstopo leaves offline CPUs out; we list them with online=false, outside NumaNode.cpus."""
    offline = {cpu.id for cpu in ours.cpus if not cpu.online}
    in_nodes = CPUSet()
    for node in ours.numa_nodes:
        in_nodes = in_nodes | node.cpus

    assert set() == offline & set().union(*theirs.numa_cpus.values())
    assert set() == offline & in_nodes.ids


def test_reference_means_what_lstopo_prints(
    tree_id: str, lstopo_reference: XmlOf, lstopo_live: XmlOf
) -> None:
    """The checked-in reference still says what the installed lstopo says about the tree.

    Compared as facts (NUMA nodes and their CPUs and memory, cores, packages, PCI
    locality, allowed sets), never as bytes: hwloc 2.9 (Debian 12) and 2.12 (Debian 13)
    print the same machine with different attributes (e.g. `CPUModelNumber`), and a
    test of numatopo must not test which hwloc is installed.
    """
    assert parse_lstopo(lstopo_reference(tree_id)) == parse_lstopo(lstopo_live(tree_id))


def test_meaning_ignores_what_differs_between_hwloc_versions(lstopo_reference: XmlOf) -> None:
    """Attributes that change with hwloc's version leave the meaning as it was."""
    xml = lstopo_reference("16amd64-8n2c")
    restyled = (
        xml.replace(b'name="CPUModelNumber" value="17"', b'name="CPUModelNumber" value="1"')
        .replace(b'<topology version="2.0">', b'<topology version="3.0">')
        .replace(b'gp_index="90"', b'gp_index="900"')
    )

    assert xml != restyled
    assert parse_lstopo(xml) == parse_lstopo(restyled)


def test_meaning_sees_a_numa_node_with_other_cpus(lstopo_reference: XmlOf) -> None:
    """A fact that changes (NUMA node 0 losing a CPU) is seen: the comparison can fail."""
    xml = lstopo_reference("16amd64-8n2c")
    changed = xml.replace(
        b'type="NUMANode" os_index="0" cpuset="0x00000003"',
        b'type="NUMANode" os_index="0" cpuset="0x00000001"',
    )

    assert xml != changed
    assert parse_lstopo(xml) != parse_lstopo(changed)
