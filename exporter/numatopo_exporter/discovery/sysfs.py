"""The sysfs reader: NUMA nodes, CPUs, GPUs and RDMA NICs of a node from `/sys` (+ `/proc`).

It needs no driver (GPU models, UUIDs and NVLinks come from NVML) and reads

    devices/system/node/nodeN/{cpulist|cpumap, cpuM links, meminfo, distance,
                               hugepages/hugepages-<size>kB/nr_hugepages}
    devices/system/cpu/{online|cpuN/online}, cpuN/topology/{physical_package_id,
                               thread_siblings_list|thread_siblings, core_siblings_list}
    bus/pci/devices/*          -> class, vendor, device, numa_node, local_cpulist (pci.py)
    class/infiniband/<name>/{device, ports/1/link_layer, device/net/*}
    /proc/meminfo, kernel/mm/hugepages/*   only on a machine without NUMA directories

Rules:
* NUMA node ids are the kernel's (not always 0..N-1); a node may have memory and no CPUs. Without
  `devices/system/node/node*` (older kernels, some arches) the machine is one NUMA node 0 holding
  every CPU and /proc/meminfo's memory.
* `NumaNode.cpus` holds online CPUs only. An offline CPU is in `cpus` with `online: false`, on the
  NUMA node of its `nodeN/cpuM` link, in the one socket of that node's online CPUs (else 0), as its
  own core.
* A CPU is on the NUMA node whose `cpulist` (or `cpuM` link) names it, never a guessed one. CPUs of
  an offline or absent node are in `cpus` without `numa`, in no `NumaNode.cpus` (never handed out;
  the kubelet and lstopo leave them out too), and named in `ignored` (the exporter's `Degraded`).
* `Cpu.core` is the lowest CPU id among the thread siblings, unique node-wide; a core's files are
  read once, for its first sibling. `physical_package_id` -1 (POWER, some ARM) numbers sockets by
  the distinct `core_siblings` groups, lowest CPU first, as hwloc does.
* `distances` are keyed by node id (the kernel writes a row in increasing node id order); huge pages
  by `hugepage_size_key`.
* Accelerators (`gpus[]`) are the PCI functions an accelerator rule (`numatopo_engine.accelerators`)
  matches by vendor, class and device id; each gets its rule's vendor and resource, and `model`
  "vendor:device" (NVML names NVIDIA GPUs better). `index` is the PCI bus-id order within a vendor
  (CUDA_DEVICE_ORDER=PCI_BUS_ID's and nvidia-smi's); indices are unique, so on a mixed node vendors
  are numbered one after another in rule order.
* `gpu_paths` (every GPU pair) and `pci_paths` (every GPU x NIC) use pci.py's PCIe path class.

Broken input: guessing CPU and NUMA facts would place pods on the wrong cores, so an unreadable or
unparsable CPU or NUMA file (garbage in a cpulist, a directory where a file should be, a dangling
symlink, a truncated number) raises a `DiscoveryError` naming the file. A missing optional file
(`distance`, `hugepages`, `meminfo` on old kernels) leaves that field empty. A PCI or RDMA device
that cannot be read is skipped with a logged warning: one bad device must not hide the node.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from numatopo_engine.accelerators import DEFAULT_ACCELERATORS, AcceleratorRule, match_accelerator
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import Cpu, Gpu, GpuPath, Nic, NumaNode, NumatopologySpec, PciPath
from numatopo_exporter.discovery.errors import DiscoveryError
from numatopo_exporter.discovery.hostroot import HostRoot
from numatopo_exporter.discovery.pci import PciDevice, PciTree, path_class
from numatopo_exporter.discovery.sysfs_files import (
    list_dir,
    parse_cpus,
    read_cpus,
    read_int,
    read_optional,
    read_text,
)

logger = logging.getLogger(__name__)

_NODE = re.compile(r"^node(\d+)$")
_CPU = re.compile(r"^cpu(\d+)$")
_HUGEPAGES = re.compile(r"^hugepages-(\d+)kB$")
_MEMTOTAL = re.compile(r"MemTotal:\s*(\d+)\s*kB")


@dataclass(frozen=True)
class SysfsReading:
    spec: NumatopologySpec
    ignored: list[str] = field(default_factory=list)
    """What was left out or worked around to publish the rest (see "Broken input")."""


def read_sysfs(
    root: HostRoot, accelerators: Sequence[AcceleratorRule] = DEFAULT_ACCELERATORS
) -> NumatopologySpec:
    """Read the node's topology from `root/sys` (and `root/proc`); see the module docstring."""
    return read_sysfs_checked(root, accelerators).spec


def read_sysfs_checked(
    root: HostRoot, accelerators: Sequence[AcceleratorRule] = DEFAULT_ACCELERATORS
) -> SysfsReading:
    """`read_sysfs`, also saying what it ignored (each item is logged as a warning too)."""
    ignored: list[str] = []
    sys_dir = str(root.path / "sys")
    cpu_dir = os.path.join(sys_dir, "devices", "system", "cpu")
    cpu_ids = sorted(int(m.group(1)) for m in map(_CPU.match, list_dir(cpu_dir)) if m)
    if not cpu_ids:
        raise DiscoveryError("no cpuN directories: not a sysfs tree?", cpu_dir)
    online = _online_cpus(cpu_dir, cpu_ids, ignored)
    nodes = _read_numa_nodes(sys_dir, str(root.path / "proc"), cpu_ids, ignored)
    cpus = _read_cpus(cpu_dir, cpu_ids, online, nodes, ignored)
    numa_nodes = [
        NumaNode(
            id=node.id,
            cpus=CPUSet(node.cpus & online),
            memory_bytes=node.memory_bytes,
            hugepages=node.hugepages,
            distances=node.distances,
        )
        for node in nodes
    ]
    online_by_node = {node.id: node.cpus for node in numa_nodes}
    pci = PciTree(sys_dir)
    for bus_id, why in pci.skipped.items():
        logger.warning("PCI device %s skipped: %s", bus_id, why)
    gpus = _read_gpus(pci, online_by_node, accelerators)
    nics = _read_nics(sys_dir, pci, online_by_node)
    gpu_paths = [
        GpuPath(a=a.index, b=b.index, path=path_class(a_device, b_device, a.numa, b.numa))
        for (a, a_device), (b, b_device) in combinations(gpus, 2)
    ]
    pci_paths = [
        PciPath(
            gpu=gpu.index, nic=nic.name, path=path_class(gpu_device, nic_device, gpu.numa, nic.numa)
        )
        for gpu, gpu_device in gpus
        for nic, nic_device in nics
    ]
    spec = NumatopologySpec(
        numa_nodes=numa_nodes,
        cpus=cpus,
        gpus=[gpu for gpu, _ in gpus],
        gpu_paths=gpu_paths,
        nics=[nic for nic, _ in nics],
        pci_paths=pci_paths,
        sources=["sysfs"],
    )
    for item in ignored:
        logger.warning("%s", item)
    return SysfsReading(spec=spec, ignored=ignored)


def hugepage_size_key(size_kib: int) -> str:
    """`2048` -> "2Mi", `1048576` -> "1Gi": the largest binary unit dividing the size."""
    for unit, suffix in ((1 << 30, "Ti"), (1 << 20, "Gi"), (1 << 10, "Mi")):
        if size_kib % unit == 0:
            return f"{size_kib // unit}{suffix}"
    return f"{size_kib}Ki"


# -- CPUs -----------------------------------------------------------------------------


def _online_cpus(cpu_dir: str, cpu_ids: list[int], ignored: list[str]) -> frozenset[int]:
    """`cpu/online` when the kernel has it, else each `cpuN/online` (absent = online). An empty
    file says nothing: an empty `cpu/online` falls back to the per-CPU files, an empty `cpuN/online`
    counts as online, as hwloc counts it (only an explicit 0 takes a CPU away)."""
    listed = os.path.join(cpu_dir, "online")
    if os.path.lexists(listed):
        if whole := read_text(listed):
            return parse_cpus(whole, listed).ids
        ignored.append(f"{listed} is empty; read each cpuN/online instead")
    online: set[int] = set()
    unknown: set[int] = set()
    for cpu in cpu_ids:
        path = os.path.join(cpu_dir, f"cpu{cpu}", "online")
        text = read_optional(path)
        if text is None or text == "1":
            online.add(cpu)
        elif text == "":
            online.add(cpu)
            unknown.add(cpu)
        elif text != "0":
            raise DiscoveryError(f"expected 0 or 1, found {text[:40]!r}", path)
    if unknown:
        ignored.append(
            f"cpuN/online is empty for CPUs {CPUSet(unknown)} under {cpu_dir}; counted online"
        )
    return frozenset(online)


def _read_cpus(
    cpu_dir: str,
    cpu_ids: list[int],
    online: frozenset[int],
    nodes: list[_RawNode],
    ignored: list[str],
) -> list[Cpu]:
    numa_of = {cpu: node.id for node in nodes for cpu in node.cpus}
    known = set(cpu_ids)
    core_of: dict[int, int] = {}
    socket_of: dict[int, int] = {}
    # Sockets numbered by core_siblings groups, for kernels that say -1.
    group_socket: dict[int, int] = {}
    unknown_package: set[int] = set()
    for cpu in cpu_ids:
        if cpu not in online or cpu in core_of:
            continue
        topology = os.path.join(cpu_dir, f"cpu{cpu}", "topology")
        if not os.path.isdir(topology):
            # Some VMs and arches publish no topology: each CPU is its own core.
            core_of[cpu], socket_of[cpu] = cpu, 0
            continue
        siblings = (_siblings(topology, "thread_siblings") & known & online) | {cpu}
        socket = _package_id(os.path.join(topology, "physical_package_id"))
        if socket is None:
            unknown_package.add(cpu)
            socket = -1
        if socket < 0:
            package = _siblings(topology, "core_siblings") | {cpu}
            socket = group_socket.setdefault(min(package), len(group_socket))
        core = min(siblings)
        for sibling in siblings:
            core_of[sibling], socket_of[sibling] = core, socket
    if unknown_package:
        ignored.append(
            f"physical_package_id is empty for CPUs {CPUSet(unknown_package)} under "
            f"{cpu_dir}; sockets numbered by core_siblings groups, as for -1"
        )
    return [
        Cpu(id=cpu, core=core_of[cpu], socket=socket_of[cpu], numa=numa_of.get(cpu))
        if cpu in online
        else Cpu(
            id=cpu,
            core=cpu,
            socket=_socket_of_node(numa_of.get(cpu), numa_of, socket_of),
            numa=numa_of.get(cpu),
            online=False,
        )
        for cpu in cpu_ids
    ]


def _package_id(path: str) -> int | None:
    """`physical_package_id`; None when the file is empty (unknown, like -1)."""
    text = read_text(path)
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise DiscoveryError(f"expected an integer, found {text[:40]!r}", path) from None


def _siblings(topology: str, name: str) -> set[int]:
    """`<name>_list` (kernel list) or, on older kernels, `<name>` (hex mask)."""
    found = read_cpus(topology, f"{name}_list", name)
    return set() if found is None else set(found.ids)


def _socket_of_node(
    numa: int | None, numa_of: Mapping[int, int], socket_of: Mapping[int, int]
) -> int:
    """The socket an offline CPU most likely sits in: the one socket of its NUMA node."""
    if numa is None:
        return 0
    sockets = {socket for cpu, socket in socket_of.items() if numa_of.get(cpu) == numa}
    return sockets.pop() if len(sockets) == 1 else 0


# -- NUMA nodes -----------------------------------------------------------------------


@dataclass
class _RawNode:
    id: int
    cpus: frozenset[int]
    """Every CPU of the node, online or not."""
    memory_bytes: int = 0
    hugepages: dict[str, int] = field(default_factory=dict)
    distances: dict[str, int] = field(default_factory=dict)


def _read_numa_nodes(
    sys_dir: str, proc_dir: str, cpu_ids: list[int], ignored: list[str]
) -> list[_RawNode]:
    node_dir = os.path.join(sys_dir, "devices", "system", "node")
    entries = list_dir(node_dir)
    ids = sorted(int(m.group(1)) for m in map(_NODE.match, entries) if m)
    if not ids:  # see "Rules": one NUMA node 0
        hugepages = _hugepages(os.path.join(sys_dir, "kernel", "mm", "hugepages"))
        memory = _proc_memtotal(proc_dir)
        return [_RawNode(0, frozenset(cpu_ids), memory, hugepages, distances={"0": 10})]
    known = frozenset(cpu_ids)
    columns = _distance_columns(node_dir, ids)
    nodes: list[_RawNode] = []
    unusable_distances: list[str] = []
    for numa in ids:
        directory = os.path.join(node_dir, f"node{numa}")
        names = list_dir(directory)
        linked = {int(m.group(1)) for m in map(_CPU.match, names) if m}
        found = read_cpus(directory, "cpulist", "cpumap")
        if found is None:
            raise DiscoveryError(
                "is missing (and so is cpumap)", os.path.join(directory, "cpulist")
            )
        node = _RawNode(id=numa, cpus=frozenset((found.ids | linked) & known))
        if "meminfo" in names:
            node.memory_bytes = _memtotal(os.path.join(directory, "meminfo"))
        elif len(ids) == 1:
            # Some kernels publish no per-node meminfo; on one node it is all the memory.
            node.memory_bytes = _proc_memtotal(proc_dir)
        if "hugepages" in names:
            node.hugepages = _hugepages(os.path.join(directory, "hugepages"))
        if "distance" in names:
            path = os.path.join(directory, "distance")
            row = _distances(path, ids, columns)
            if row is None:
                unusable_distances.append(path)
            else:
                node.distances = row
        nodes.append(node)
    if unusable_distances:
        # Half a distance matrix would rank nodes by what happens to be known: none.
        for node in nodes:
            node.distances = {}
        ignored.append(
            f"NUMA distances left out: {', '.join(unusable_distances)} "
            f"{'is' if len(unusable_distances) == 1 else 'are'} empty or "
            f"{'has' if len(unusable_distances) == 1 else 'have'} no entry per node of {ids}"
        )
    elif columns != ids and any(node.distances for node in nodes):
        ignored.append(
            f"NUMA distance rows under {node_dir} list the nodes {CPUSet(columns)}; "
            f"kept the columns of the present nodes {ids}"
        )
    nodes = _unless_overlapping(nodes, ignored)
    if orphans := known.difference(*(node.cpus for node in nodes)):
        # See "Rules": guessing a node would hand them out as local to what they are not.
        ignored.append(
            f"CPUs {CPUSet(orphans)} are in no NUMA node's cpulist (node offline or "
            "absent); published without a NUMA node, never handed out"
        )
    return nodes


def _unless_overlapping(nodes: list[_RawNode], ignored: list[str]) -> list[_RawNode]:
    """`nodes`, or one node holding them all when some CPU is claimed by two of them: a CPU in two
    cpulists comes from broken firmware tables (SRAT/SLIT), and then no cpulist can be trusted.
    Like lstopo, publish one NUMA node with every CPU and all memory: less to align with, but
    nothing wrong to place on."""
    owner: dict[int, int] = {}
    shared: set[int] = set()
    for node in nodes:
        for cpu in node.cpus:
            if cpu in owner:
                shared.add(cpu)
            else:
                owner[cpu] = node.id
    if not shared:
        return nodes
    merged = _RawNode(id=nodes[0].id, cpus=frozenset(owner))
    for node in nodes:
        merged.memory_bytes += node.memory_bytes
        for size, count in node.hugepages.items():
            merged.hugepages[size] = merged.hugepages.get(size, 0) + count
    merged.hugepages = dict(sorted(merged.hugepages.items(), key=lambda i: _size_order(i[0])))
    merged.distances = {str(merged.id): 10}
    ignored.append(
        f"NUMA nodes {[node.id for node in nodes]} claim the same CPUs {CPUSet(shared)} "
        f"(a firmware bug); published as one NUMA node {merged.id} with all CPUs and memory"
    )
    return [merged]


def _proc_memtotal(proc_dir: str) -> int:
    meminfo = os.path.join(proc_dir, "meminfo")
    return _memtotal(meminfo) if os.path.lexists(meminfo) else 0


def _memtotal(path: str) -> int:
    match = _MEMTOTAL.search(read_text(path))
    if match is None:
        raise DiscoveryError("has no 'MemTotal: <n> kB' line", path)
    return int(match.group(1)) * 1024


def _hugepages(directory: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in list_dir(directory):
        match = _HUGEPAGES.match(name)
        if match is None:
            continue
        path = os.path.join(directory, name, "nr_hugepages")
        count = read_int(path)
        if count < 0:
            raise DiscoveryError(f"negative page count {count}", path)
        counts[hugepage_size_key(int(match.group(1)))] = count
    return dict(sorted(counts.items(), key=lambda item: _size_order(item[0])))


def _size_order(key: str) -> int:
    scale = {"Ki": 1, "Mi": 1 << 10, "Gi": 1 << 20, "Ti": 1 << 30}[key[-2:]]
    return int(key[:-2]) * scale


def _distance_columns(node_dir: str, ids: list[int]) -> list[int]:
    """The node ids a `distance` row has one entry for: the present `nodeN` directories, normally.
    Some kernels and firmware write one entry per *possible* node, offline and absent ones
    included: a row longer than the directories then matches `node/online` or `node/possible`."""
    for name in ("online", "possible"):
        path = os.path.join(node_dir, name)
        text = read_optional(path)
        if not text:
            continue
        try:
            listed = sorted(parse_cpus(text, path).ids)
        except DiscoveryError:
            continue
        if len(listed) > len(ids) and set(ids) <= set(listed):
            return listed
    return ids


def _distances(path: str, ids: list[int], columns: list[int]) -> dict[str, int] | None:
    """The row of `path` keyed by node id; None when it is empty or its length matches neither
    the present nodes nor `columns`."""
    text = read_text(path)
    fields = text.split()
    if not all(f.isdigit() for f in fields):
        raise DiscoveryError(f"expected distances (numbers), found {text[:80]!r}", path)
    for names in (ids, columns):
        if fields and len(fields) == len(names):
            row = dict(zip(names, fields, strict=True))
            return {str(numa): int(row[numa]) for numa in ids}
    return None


# -- GPUs and NICs --------------------------------------------------------------------


def _read_gpus(
    pci: PciTree, numa_cpus: Mapping[int, CPUSet], rules: Sequence[AcceleratorRule]
) -> list[tuple[Gpu, PciDevice]]:
    by_vendor: dict[str, list[tuple[str, AcceleratorRule, int | None]]] = {}
    # Bridges, NICs and storage are most functions: their vendor files need no reading.
    base_classes = {c >> 8 for rule in rules for c in rule.classes}
    for bus_id in pci.devices:
        try:
            class_code = pci.read_hex(bus_id, "class")
            if class_code >> 16 not in base_classes:
                continue
            device_id = _device_id(pci, bus_id)
            rule = match_accelerator(rules, pci.read_hex(bus_id, "vendor"), class_code, device_id)
        except DiscoveryError as exc:
            logger.warning("PCI device %s skipped: %s", bus_id, exc)
            continue
        if rule is not None:
            by_vendor.setdefault(rule.vendor, []).append((bus_id, rule, device_id))
    gpus: list[tuple[Gpu, PciDevice]] = []
    # Vendors in rule order (NVIDIA first with the defaults), bus-id order within one.
    for vendor_name in dict.fromkeys(r.vendor for r in rules):
        for bus_id, rule, device_id in by_vendor.get(vendor_name, []):
            try:
                numa = pci.numa_of(bus_id, numa_cpus)
            except DiscoveryError as exc:
                logger.warning("accelerator %s: NUMA locality unknown: %s", bus_id, exc)
                numa = None
            gpu = Gpu(
                index=len(gpus),
                pci_bus_id=bus_id,
                numa=numa,
                vendor=vendor_name,
                model="" if device_id is None else f"{rule.vendor_id:04x}:{device_id:04x}",
                resource=rule.resource,
            )
            gpus.append((gpu, pci.devices[bus_id]))
    return gpus


def _device_id(pci: PciTree, bus_id: str) -> int | None:
    """The function's device id; None when `device` is absent (rules naming device ids
    then do not match it)."""
    if not os.path.lexists(os.path.join(pci.devices[bus_id].path, "device")):
        return None
    return pci.read_hex(bus_id, "device")


def _read_nics(
    sys_dir: str, pci: PciTree, numa_cpus: Mapping[int, CPUSet]
) -> list[tuple[Nic, PciDevice]]:
    class_dir = os.path.join(sys_dir, "class", "infiniband")
    nics: list[tuple[Nic, PciDevice]] = []
    for name in sorted(list_dir(class_dir)):
        link = os.path.join(class_dir, name, "device")
        bus_id = os.path.basename(os.path.realpath(link)) if os.path.lexists(link) else ""
        if bus_id not in pci.devices:
            # Software RDMA (rxe, siw) and non-PCI adapters (scif) have no PCI locality.
            logger.info("RDMA device %s skipped: not a PCI device", name)
            continue
        try:
            numa = pci.numa_of(bus_id, numa_cpus)
            layer = read_optional(os.path.join(class_dir, name, "ports", "1", "link_layer"))
            netdevs = sorted(list_dir(os.path.join(link, "net")))
        except DiscoveryError as exc:
            logger.warning("RDMA device %s skipped: %s", name, exc)
            continue
        nic = Nic(name=name, pci_bus_id=bus_id, numa=numa, link_layer=layer or "", netdevs=netdevs)
        nics.append((nic, pci.devices[bus_id]))
    return nics
