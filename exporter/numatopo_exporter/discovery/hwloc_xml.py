"""`lstopo --of xml` (hwloc 2.x, and the old 1.x distances) -> `NumatopologySpec`.

What is read from the object tree:
  NUMANode   os_index, local_memory, huge pages (every `page_type` but the smallest: the base page)
             and its CPUs. hwloc gives a memory node the cpuset of the CPUs near it, so on KNL
             (MCDRAM beside DDR) or with Optane PMem several nodes share one cpuset; like the
             kernel, each CPU goes to the lowest-numbered node covering it (others stay CPU-less).
  PU         one `Cpu`: core = lowest PU os_index in its Core (1.x Core os_index is per package,
             like sysfs core_id), socket = its Package (1.x `Socket`) os_index.
  distances  `distances2` of type NUMANode (os or gp indexing), named NUMALatency or unnamed; the
             1.x `<distances latency_base=...>` form scaled by its base.
  PCIDev     GPUs: what a default accelerator rule matches (an AMD display function only with a
             compute OS device under it), in PCI bus order (NVML's, CUDA_DEVICE_ORDER=PCI_BUS_ID's).
  OSDev      OpenFabrics devices (mlx5_0, ...) are the NICs, Network devices under the same PCI
             function their netdevs.
  NVLinkBandwidth (distances2hetero): GPU pairs and GPU-to-NVSwitch links (`nvlink`); links =
             bandwidth / the model's per-link rate.

An I/O object's locality is the nodeset of its nearest non-I/O ancestor; the PCIe path class of two
devices comes from their lowest common ancestor, for every GPU pair (NVLinked ones too: their PCIe
path exists) and GPU/NIC pair.
"""

from __future__ import annotations

import gzip
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from numatopo_engine.accelerators import DEFAULT_ACCELERATORS, AcceleratorRule, match_accelerator
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import (
    Cpu,
    Gpu,
    GpuLink,
    GpuPath,
    Nic,
    NumaNode,
    NumatopologySpec,
    PathType,
    PciPath,
)
from numatopo_exporter.discovery.errors import DiscoveryError, read_saved
from numatopo_exporter.discovery.nvlink import link_gbps, nvlinks
from numatopo_exporter.discovery.sysfs import hugepage_size_key

SOURCE = "hwloc-xml"

_GZIP_MAGIC = b"\x1f\x8b"
# ElementTree expands internal entities (exponential "billion laughs" input), so any
# document declaring one, or carrying an internal DTD subset, is refused up front.
_UNSAFE_PROLOG = re.compile(rb"<!ENTITY|<!DOCTYPE[^>\[]*\[", re.IGNORECASE)
_PCI_TYPE = re.compile(r"^(?P<cls>[0-9a-f]{4}) \[(?P<vendor>[0-9a-f]{4}):(?P<device>[0-9a-f]{4})\]")
_COMPUTE_OSDEV = re.compile(r"^(cuda|opencl|nvml|rsmi|ze)\d", re.IGNORECASE)
_OSDEV_NETWORK, _OSDEV_OPENFABRICS = "2", "3"  # hwloc 2.x hwloc_obj_osdev_type_t values


@dataclass(eq=False)
class _Obj:
    """One `<object>` with its parent link, the tree walked once."""

    type: str
    attrib: dict[str, str]
    info: dict[str, str]
    parent: _Obj | None
    pages: list[tuple[int, int]] = field(default_factory=list)
    children: list[_Obj] = field(default_factory=list)

    def int_attr(self, name: str, default: int = 0) -> int:
        return int(self.attrib.get(name, default))

    def ancestors(self) -> list[_Obj]:
        out: list[_Obj] = []
        node = self.parent
        while node is not None:
            out.append(node)
            node = node.parent
        return out


def read_hwloc_xml(path: Path) -> NumatopologySpec:
    """Read an hwloc XML file, gzip-compressed or not; errors name the file."""
    return read_saved(path, "hwloc XML", parse_hwloc_xml)


def parse_hwloc_xml(data: bytes) -> NumatopologySpec:
    """Parse the bytes of an hwloc XML export (gzip is detected by its magic bytes)."""
    if data.startswith(_GZIP_MAGIC):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise DiscoveryError(f"corrupt gzip data: {exc}") from exc
    if _UNSAFE_PROLOG.search(data[:4096]) or b"<!ENTITY" in data:
        raise DiscoveryError("refusing XML with a DTD subset or entity declarations")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise DiscoveryError(f"not well-formed XML: {exc}") from exc
    if root.tag != "topology":
        raise DiscoveryError(f"not an hwloc topology: the root element is <{root.tag}>")
    top = root.find("object")
    if top is None:
        raise DiscoveryError("hwloc topology has no <object> (empty or truncated export)")
    objects: list[_Obj] = []
    _walk(top, None, objects)
    try:
        return _build(root, objects)
    except (ValueError, KeyError) as exc:
        raise DiscoveryError(f"inconsistent hwloc topology: {exc}") from exc


def _walk(element: ET.Element, parent: _Obj | None, out: list[_Obj]) -> _Obj:
    info = {i.get("name", ""): i.get("value", "") for i in element.findall("info")}
    pages = [
        (int(p.get("size", "0")), int(p.get("count", "0"))) for p in element.findall("page_type")
    ]
    obj = _Obj(element.get("type", ""), dict(element.attrib), info, parent, pages)
    out.append(obj)
    for child in element.findall("object"):
        obj.children.append(_walk(child, obj, out))
    return obj


def _bitmap(text: str | None) -> set[int]:
    """hwloc's bitmap: comma-separated 32-bit hex words, most significant first."""
    if not text:
        return set()
    words = text.split(",")
    out: set[int] = set()
    for position, word in enumerate(reversed(words)):
        value = int(word.removeprefix("0x") or "0", 16) if word.strip() else 0
        out.update(position * 32 + bit for bit in range(32) if value >> bit & 1)
    return out


def _build(root: ET.Element, objects: list[_Obj]) -> NumatopologySpec:
    numa_objs = sorted(
        (o for o in objects if o.type == "NUMANode"), key=lambda o: o.int_attr("os_index")
    )
    pus = sorted((o for o in objects if o.type == "PU"), key=lambda o: o.int_attr("os_index"))

    owner: dict[int, int] = {}
    for node in numa_objs:
        for cpu in sorted(_bitmap(node.attrib.get("cpuset"))):
            owner.setdefault(cpu, node.int_attr("os_index"))
    # A PU under no NUMA node (its node offline) stays NUMA-less, as in the sysfs reader;
    # only a 1.x export of a non-NUMA machine puts every PU on the implicit node 0.
    cpus = [_cpu(pu, owner, None if numa_objs else 0) for pu in pus]
    cpu_ids = {c.id for c in cpus}
    distances = _numa_distances(root, objects, numa_objs)
    numa_nodes = [
        NumaNode(
            id=node.int_attr("os_index"),
            cpus=CPUSet(
                c for c, n in owner.items() if n == node.int_attr("os_index") and c in cpu_ids
            ),
            memory_bytes=node.int_attr("local_memory"),
            hugepages=_hugepages(node),
            distances=distances.get(node.int_attr("os_index"), {}),
        )
        for node in numa_objs
    ]
    if not numa_nodes and cpus:  # a 1.x export of a non-NUMA machine: one implicit node
        numa_nodes = [NumaNode(id=0, cpus=CPUSet(c.id for c in cpus))]

    gpu_objs = sorted(
        (o for o in objects if _accelerator(o) is not None), key=lambda o: o.attrib["pci_busid"]
    )
    gpus = [_gpu(i, o) for i, o in enumerate(gpu_objs)]
    nic_objs = [o for o in objects if _is_openfabrics(o)]
    nics = [_nic(o) for o in nic_objs]

    pci_paths = [
        PciPath(gpu=i, nic=n.attrib.get("name", ""), path=_path_class(g, n))
        for i, g in enumerate(gpu_objs)
        for n in nic_objs
        if n.parent is not None
    ]
    gpu_paths = [
        GpuPath(a=i, b=j, path=_path_class(gpu_objs[i], gpu_objs[j]))
        for i in range(len(gpu_objs))
        for j in range(i + 1, len(gpu_objs))
    ]
    return NumatopologySpec(
        numa_nodes=numa_nodes,
        cpus=cpus,
        gpus=gpus,
        gpu_links=_nvlinks(root, objects, gpu_objs, gpus),
        gpu_paths=gpu_paths,
        nics=nics,
        pci_paths=pci_paths,
        sources=[SOURCE],
    )


def _cpu(pu: _Obj, owner: dict[int, int], unowned: int | None) -> Cpu:
    cpu_id = pu.int_attr("os_index")
    ancestors = pu.ancestors()
    core = next((a for a in ancestors if a.type == "Core"), None)
    core_id = min(_bitmap(core.attrib.get("cpuset"))) if core is not None else cpu_id
    package = next((a for a in ancestors if a.type in ("Package", "Socket")), None)
    socket = package.int_attr("os_index") if package is not None else 0
    return Cpu(id=cpu_id, core=core_id, socket=socket, numa=owner.get(cpu_id, unowned))


def _hugepages(node: _Obj) -> dict[str, int]:
    """Page sizes (bytes here) keyed as sysfs's are; a size in no whole KiB as a number."""
    if len(node.pages) < 2:
        return {}
    base = min(size for size, _ in node.pages)
    return {
        hugepage_size_key(size >> 10) if size % 1024 == 0 else str(size): count
        for size, count in sorted(node.pages)
        if size != base
    }


def _numa_distances(
    root: ET.Element, objects: list[_Obj], numa_objs: list[_Obj]
) -> dict[int, dict[str, int]]:
    by_gp = {o.attrib.get("gp_index"): o.int_attr("os_index") for o in numa_objs}
    for matrix in root.findall("distances2"):
        if matrix.get("type") != "NUMANode" or matrix.get("name", "NUMALatency") != "NUMALatency":
            continue
        indexes = " ".join(i.text or "" for i in matrix.findall("indexes")).split()
        values = [
            int(v) for v in " ".join(u.text or "" for u in matrix.findall("u64values")).split()
        ]
        ids = [int(i) if matrix.get("indexing") == "os" else by_gp[i] for i in indexes]
        return _square(ids, values)
    for old in root.findall("distances"):  # hwloc 1.x: normalised floats x latency_base
        values_f = [float(v.get("value", "0")) for v in old.findall("latency")]
        base = float(old.get("latency_base", "1"))
        ids = [o.int_attr("os_index") for o in objects if o.type == "NUMANode"]
        if int(old.get("nbobjs", "0")) == len(ids):
            return _square(ids, [round(v * base) for v in values_f])
    return {}


def _square(ids: list[int], values: list[int]) -> dict[int, dict[str, int]]:
    n = len(ids)
    if len(values) != n * n:
        raise ValueError(f"a distance matrix over {n} NUMA nodes holds {len(values)} values")
    return {a: {str(b): values[i * n + j] for j, b in enumerate(ids)} for i, a in enumerate(ids)}


def _pci_ids(obj: _Obj) -> tuple[str, str, str] | None:
    match = _PCI_TYPE.match(obj.attrib.get("pci_type", ""))
    return (match["cls"], match["vendor"], match["device"]) if match else None


def _accelerator(obj: _Obj) -> AcceleratorRule | None:
    """The accelerator rule `obj` matches, or None (not a PCI accelerator)."""
    ids = _pci_ids(obj)
    if obj.type != "PCIDev" or ids is None or obj.attrib.get("subtype") == "NVSwitch":
        return None
    cls, vendor, device = ids
    # hwloc writes the class without its programming-interface byte; the rules take 24 bits.
    rule = match_accelerator(
        DEFAULT_ACCELERATORS, int(vendor, 16), int(cls, 16) << 8, int(device, 16)
    )
    if rule is None or rule.vendor != "amd" or not cls.startswith("03"):
        return rule
    # An AMD display function counts only with a compute device under it (rsmi, opencl):
    # Radeon display chips without a driver loaded are not schedulable GPUs.
    has_compute = any(_COMPUTE_OSDEV.match(c.attrib.get("name", "")) for c in obj.children)
    return rule if has_compute else None


def _is_openfabrics(obj: _Obj) -> bool:
    return obj.type == "OSDev" and (
        obj.attrib.get("osdev_type") == _OSDEV_OPENFABRICS
        or obj.attrib.get("subtype") == "OpenFabrics"
    )


def _gpu(index: int, obj: _Obj) -> Gpu:
    ids = _pci_ids(obj)
    rule = _accelerator(obj)
    assert rule is not None  # only accelerators are passed in
    info: dict[str, str] = {}
    for child in obj.children:
        info.update(child.info)
    model = info.get("GPUModel") or (f"{ids[1]}:{ids[2]}" if ids else "")
    return Gpu(
        index=index,
        uuid=info.get("NVIDIAUUID", ""),
        pci_bus_id=obj.attrib["pci_busid"],
        numa=_locality(obj),
        vendor=rule.vendor,
        model=model,
        resource=rule.resource,
    )


def _nic(obj: _Obj) -> Nic:
    pci = obj.parent if obj.parent is not None and obj.parent.type == "PCIDev" else None
    netdevs = sorted(
        c.attrib.get("name", "")
        for c in (pci.children if pci is not None else [])
        if c.type == "OSDev" and c.attrib.get("osdev_type") == _OSDEV_NETWORK
    )
    return Nic(
        name=obj.attrib.get("name", ""),
        pci_bus_id=pci.attrib.get("pci_busid", "") if pci is not None else "",
        numa=_locality(obj),
        netdevs=netdevs,
    )


def _locality(obj: _Obj) -> int | None:
    """The NUMA node of the nearest non-I/O ancestor, when it is exactly one."""
    for ancestor in obj.ancestors():
        if "nodeset" in ancestor.attrib:
            nodes = _bitmap(ancestor.attrib["nodeset"])
            return nodes.pop() if len(nodes) == 1 else None
    return None


def _is_host_bridge(obj: _Obj) -> bool:
    return obj.type == "Bridge" and obj.attrib.get("bridge_type", "").startswith("0-")


def _switches_on(chain: list[_Obj]) -> set[int]:
    """Upstream ports of the PCIe switches a device-to-ancestor chain passes through: below a
    root port (a bridge whose parent is a host bridge) bridges alternate, a switch's upstream
    port, then its downstream ports, then the next switch."""
    found: set[int] = set()
    for bridge in chain:
        if bridge.type != "Bridge" or _is_host_bridge(bridge):
            continue
        depth = 0
        node: _Obj | None = bridge
        while node is not None and node.type == "Bridge" and not _is_host_bridge(node):
            depth += 1
            node = node.parent
        # depth 1 = root port, 2 = upstream port, 3 = downstream port, 4 = upstream...
        if depth >= 2:
            upstream = bridge if depth % 2 == 0 else bridge.parent
            if upstream is not None:
                found.add(id(upstream))
    return found


def _path_class(a: _Obj, b: _Obj) -> PathType:
    """nvidia-smi's class of the PCIe path between two devices (or their OS devices)."""
    a_up, b_up = [a, *a.ancestors()], [b, *b.ancestors()]
    b_ids = {id(o) for o in b_up}
    common = next(o for o in a_up if id(o) in b_ids)
    if common.type in ("Bridge", "PCIDev") and not _is_host_bridge(common):
        below = a_up[: a_up.index(common) + 1] + b_up[: b_up.index(common)]
        return PathType.PIX if len(_switches_on(below)) <= 1 else PathType.PXB
    if _is_host_bridge(common):
        return PathType.PHB
    numa_a, numa_b = _locality(a), _locality(b)
    return PathType.NODE if numa_a is not None and numa_a == numa_b else PathType.SYS


def _nvlinks(
    root: ET.Element, objects: list[_Obj], gpu_objs: list[_Obj], gpus: list[Gpu]
) -> list[GpuLink]:
    matrix = next(
        (m for m in root.findall("distances2hetero") if m.get("name") == "NVLinkBandwidth"), None
    )
    if matrix is None:
        return []
    by_ref = {f"{o.type}:{o.attrib.get('gp_index')}": o for o in objects}
    gpu_of = {}
    for index, gpu in enumerate(gpu_objs):
        for dev in (gpu, *gpu.children):
            gpu_of[f"{dev.type}:{dev.attrib.get('gp_index')}"] = index
    refs = " ".join(i.text or "" for i in matrix.findall("indexes")).split()
    values = [int(v) for v in " ".join(u.text or "" for u in matrix.findall("u64values")).split()]
    n = len(refs)
    if len(values) != n * n:
        raise ValueError(f"NVLinkBandwidth over {n} objects holds {len(values)} values")
    direct: dict[tuple[int, int], int] = {}
    via_switch: dict[int, int] = {}
    for i, ref in enumerate(refs):
        if ref not in gpu_of:
            continue
        a = gpu_of[ref]
        per_link_mbps = link_gbps(gpus[a].model) * 1000
        for j, other in enumerate(refs):
            mbps = values[i * n + j]
            if i == j or mbps == 0:
                continue
            links = round(mbps / per_link_mbps)
            if other in gpu_of:
                direct[(a, gpu_of[other])] = links
            elif other.startswith("PCIDev:") or (
                other in by_ref and by_ref[other].attrib.get("subtype") == "NVSwitch"
            ):
                via_switch[a] = via_switch.get(a, 0) + links
            # anything else (a Package: POWER's CPU NVLink) is no GPU pair
    return nvlinks(direct, via_switch, {g.index: g.model for g in gpus})
