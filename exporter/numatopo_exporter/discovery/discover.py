"""Choose the topology sources for one node, read them, and combine them into one spec.

Offline, `--hwloc-xml` and/or `--nvidia-smi-topo` name saved files and the spec comes from them
alone (`merge_offline` when both). Live: sysfs under `--sysfs-root`, then NVML (unless switched
off), then the kubelet's config and CPU manager state under the same root. An absent optional source
(no NVIDIA driver, no kubelet) is a notice, not an error: the CPU and PCI topology is still worth
printing and publishing.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from numatopo_engine.accelerators import DEFAULT_ACCELERATORS, AcceleratorRule
from numatopo_engine.model import Gpu, GpuPath, NumatopologySpec
from numatopo_exporter.discovery.errors import DiscoveryError, SourceUnavailableError
from numatopo_exporter.discovery.hostroot import HostRoot
from numatopo_exporter.discovery.hwloc_xml import read_hwloc_xml
from numatopo_exporter.discovery.kubelet import SOURCE as KUBELET_SOURCE
from numatopo_exporter.discovery.kubelet import KubeletReading, read_kubelet
from numatopo_exporter.discovery.nvidia_smi_topo import read_nvidia_smi_topo
from numatopo_exporter.discovery.nvml import SOURCE as NVML_SOURCE
from numatopo_exporter.discovery.nvml import GpuReading, read_nvml
from numatopo_exporter.discovery.pci import bus_id_key
from numatopo_exporter.discovery.sysfs import SysfsReading, read_sysfs_checked


@dataclass(frozen=True)
class DiscoverOptions:
    """What `numatopo inspect` (or the exporter) was asked to read: the flags the module
    docstring names (`sysfs_root` is a `HostRoot`'s path)."""

    sysfs_root: Path = Path("/")
    hwloc_xml: Path | None = None
    nvidia_smi_topo: Path | None = None
    use_nvml: bool = True
    kubelet_config: Path | None = None
    """The kubelet config file; None = the usual places under `sysfs_root`."""
    kubelet_state: Path | None = None
    """The CPU manager state file; None = the usual place under `sysfs_root`."""
    node_name: str | None = None
    """The Kubernetes node name; None = let the caller decide (hostname, sample name)."""
    accelerators: tuple[AcceleratorRule, ...] = DEFAULT_ACCELERATORS
    """Which PCI functions are accelerators, and their resource names (`--accelerator` rules
    first, then the defaults)."""

    @classmethod
    def from_args(cls, args: argparse.Namespace, **changes: Any) -> DiscoverOptions:
        """The live-node flags `numatopo exporter` and `numatopo inspect` share, with `changes`."""
        return cls(
            sysfs_root=args.sysfs_root,
            use_nvml=not args.no_nvml,
            kubelet_config=args.kubelet_config,
            kubelet_state=args.kubelet_state,
            node_name=args.node_name,
            accelerators=(*args.accelerators, *DEFAULT_ACCELERATORS),
            **changes,
        )

    @property
    def offline(self) -> bool:
        return self.hwloc_xml is not None or self.nvidia_smi_topo is not None


@dataclass(frozen=True)
class Discovery:
    """A node's spec plus what the user should know about how it was obtained."""

    spec: NumatopologySpec
    notices: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    """Input the readers left out to publish the rest (broken firmware tables, files that make no
    sense); also in `notices`. The exporter publishes it as `Degraded`."""


def merge_gpu_reading(base: NumatopologySpec, reading: GpuReading) -> NumatopologySpec:
    """`base` with its GPUs replaced and enriched by NVML's, links from NVML.

    GPUs are matched by PCI bus id, in the one form `pci.bus_id_key` defines. For a matched
    GPU NVML wins on what the driver knows better (index, uuid, model, memory, MIG mode, NUMA on
    coherent platforms) and sysfs fills what NVML lacks (the NUMA node on x86). GPU indices become
    NVML's, so `pciPaths` and `gpuPaths` of the base are renumbered; GPU links come from NVML, the
    only source that sees NVLinks on a live node. A base GPU that NVML does not list (another
    vendor, or a device the driver did not bind) is kept under a fresh index after NVML's."""
    base_by_bus = {bus_id_key(g.pci_bus_id): g for g in base.gpus if g.pci_bus_id}
    renumber: dict[int, int] = {}
    gpus: list[Gpu] = []
    for gpu in reading.gpus:
        bus = bus_id_key(gpu.pci_bus_id)
        known = base_by_bus.get(bus)
        update: dict[str, object] = {"pci_bus_id": bus}
        if known is not None:
            renumber[known.index] = gpu.index
            if gpu.numa is None:
                update["numa"] = known.numa
        gpus.append(gpu.model_copy(update=update))

    # After every NVML index, MIG devices' included: one index space (`devices`).
    taken = [g.index for g in reading.gpus] + [
        m.index for g in reading.gpus for m in g.mig_devices or ()
    ]
    next_index = max(taken, default=-1) + 1
    for gpu in base.gpus:
        if gpu.index not in renumber:
            renumber[gpu.index] = next_index
            gpus.append(gpu.model_copy(update={"index": next_index}))
            next_index += 1

    pci_paths = [p.model_copy(update={"gpu": renumber[p.gpu]}) for p in base.pci_paths]
    nvml_pairs = {(p.a, p.b) for p in reading.gpu_paths}
    gpu_paths = list(reading.gpu_paths)
    for path in base.gpu_paths:
        a, b = sorted((renumber[path.a], renumber[path.b]))
        if (a, b) not in nvml_pairs:
            gpu_paths.append(GpuPath(a=a, b=b, path=path.path))
    return NumatopologySpec.model_validate(
        base.model_copy(
            update={
                "gpus": sorted(gpus, key=lambda g: g.index),
                "gpu_links": sorted(reading.gpu_links, key=lambda x: (x.a, x.b)),
                "gpu_paths": sorted(gpu_paths, key=lambda x: (x.a, x.b)),
                "pci_paths": sorted(pci_paths, key=lambda x: (x.gpu, x.nic)),
                "sources": list(dict.fromkeys([*base.sources, NVML_SOURCE])),
            }
        ).model_dump()
    )


def merge_kubelet(base: NumatopologySpec, reading: KubeletReading) -> NumatopologySpec:
    """`base` with the kubelet's policies and reserved CPUs."""
    return base.model_copy(
        update={
            "policies": reading.policies,
            "reserved_cpus": reading.reserved_cpus,
            "sources": list(dict.fromkeys([*base.sources, KUBELET_SOURCE])),
        }
    )


@dataclass(frozen=True)
class Readers:
    """The sources `discover` calls; tests replace some with fakes (pynvml is imported only when
    `read_nvml` runs)."""

    sysfs: Callable[[HostRoot, Sequence[AcceleratorRule]], NumatopologySpec | SysfsReading] = (
        read_sysfs_checked
    )
    nvml: Callable[[], GpuReading] = read_nvml
    hwloc_xml: Callable[[Path], NumatopologySpec] = read_hwloc_xml
    nvidia_smi_topo: Callable[[Path], NumatopologySpec] = read_nvidia_smi_topo
    kubelet: Callable[[HostRoot, Path | None, Path | None], KubeletReading] = read_kubelet
    merge_gpu_reading: Callable[[NumatopologySpec, GpuReading], NumatopologySpec] = (
        merge_gpu_reading
    )
    merge_kubelet: Callable[[NumatopologySpec, KubeletReading], NumatopologySpec] = merge_kubelet


def discover(options: DiscoverOptions, *, readers: Readers | None = None) -> Discovery:
    """Read the node (or the saved files) that `options` names; `DiscoveryError` (naming the
    file) when a required input is missing or unreadable, absent optional sources in `notices`."""
    readers = readers or Readers()
    notices: list[str] = []
    ignored: list[str] = []
    try:
        if options.offline:
            spec = _discover_offline(options, readers, notices)
        else:
            spec = _discover_live(options, readers, notices, ignored)
        spec = _apply_kubelet(spec, options, readers, notices)
    except ValidationError as error:
        # A reader or merge produced an inconsistent spec: the input contradicts itself.
        first = error.errors()[0]
        raise DiscoveryError(f"inconsistent topology: {first['msg']}") from None
    return Discovery(spec=spec, notices=[*ignored, *notices], ignored=ignored)


def _require_file(path: Path, what: str) -> None:
    if not path.exists():
        raise DiscoveryError(f"no such {what} file", path)
    if not path.is_file():
        raise DiscoveryError(f"not a file (expected a {what} file)", path)


def _discover_offline(
    options: DiscoverOptions, readers: Readers, notices: list[str]
) -> NumatopologySpec:
    hwloc_spec = topo_spec = None
    if options.hwloc_xml is not None:
        _require_file(options.hwloc_xml, "hwloc XML")
        hwloc_spec = readers.hwloc_xml(options.hwloc_xml)
    if options.nvidia_smi_topo is not None:
        _require_file(options.nvidia_smi_topo, "nvidia-smi topo")
        topo_spec = readers.nvidia_smi_topo(options.nvidia_smi_topo)
    if hwloc_spec is not None and topo_spec is not None:
        notices.append(
            "offline analysis: CPUs, NUMA nodes and PCI devices from the hwloc XML; "
            "GPU links and GPU-NIC paths from nvidia-smi topo, matched by GPU index"
        )
        merged, mismatch = merge_offline(hwloc_spec, topo_spec)
        notices.extend(mismatch)
        return merged
    spec = hwloc_spec or topo_spec
    assert spec is not None  # offline means at least one file was given
    return spec


def _discover_live(
    options: DiscoverOptions, readers: Readers, notices: list[str], ignored: list[str]
) -> NumatopologySpec:
    root = options.sysfs_root
    if not root.is_dir():
        raise DiscoveryError("no such directory (expected the root of a node's file system)", root)
    read = readers.sysfs(HostRoot(root), options.accelerators)
    if isinstance(read, NumatopologySpec):
        spec = read
    else:
        spec = read.spec
        ignored.extend(read.ignored)
    if options.use_nvml:
        try:
            reading = readers.nvml()
        except SourceUnavailableError as unavailable:
            notices.append(str(unavailable))
        else:
            notices.extend(reading.notices)
            spec = readers.merge_gpu_reading(spec, reading)
    return spec


def _apply_kubelet(
    spec: NumatopologySpec, options: DiscoverOptions, readers: Readers, notices: list[str]
) -> NumatopologySpec:
    explicit = options.kubelet_config is not None or options.kubelet_state is not None
    # A saved file says nothing about a kubelet; only read one when asked or live.
    if options.offline and not explicit:
        return spec
    try:
        reading = readers.kubelet(
            HostRoot(options.sysfs_root), options.kubelet_config, options.kubelet_state
        )
    except SourceUnavailableError as unavailable:
        if explicit:
            raise
        notices.append(f"{unavailable}; kubelet policies shown as defaults")
        return spec
    notices.extend(reading.notices)
    return readers.merge_kubelet(spec, reading)


def merge_offline(
    hwloc: NumatopologySpec, topo: NumatopologySpec
) -> tuple[NumatopologySpec, list[str]]:
    """A spec read from `nvidia-smi topo -m` merged into one read from hwloc XML, and notices
    about mismatches: hwloc is trusted for CPUs, NUMA nodes, GPUs' PCI identity and NICs,
    nvidia-smi topo for GPU links, GPU-GPU and GPU-NIC paths. GPUs are matched by index; a GPU or
    NIC only one side knows is kept."""
    notices: list[str] = []
    hwloc_gpus = {gpu.index: gpu for gpu in hwloc.gpus}
    topo_gpus = {gpu.index: gpu for gpu in topo.gpus}
    if hwloc.gpus and set(hwloc_gpus) != set(topo_gpus):
        notices.append(
            f"the hwloc XML lists {len(hwloc_gpus)} GPUs and nvidia-smi topo "
            f"{len(topo_gpus)}; GPUs only one of them knows are kept as they are"
        )
    known_numa = {node.id for node in hwloc.numa_nodes}
    gpus = []
    for index in sorted(set(hwloc_gpus) | set(topo_gpus)):
        gpu = hwloc_gpus[index] if index in hwloc_gpus else topo_gpus[index]
        numa = gpu.numa if gpu.numa is not None or index not in topo_gpus else topo_gpus[index].numa
        # nvidia-smi topo's NUMA ids must not invent nodes hwloc does not have.
        if numa is not None and known_numa and numa not in known_numa:
            numa = None
        gpus.append(gpu.model_copy(update={"numa": numa}))
    nic_names = {nic.name for nic in hwloc.nics}
    nics = list(hwloc.nics) + [nic for nic in topo.nics if nic.name not in nic_names]
    merged = NumatopologySpec.model_validate(
        {
            **hwloc.model_dump(by_alias=False),
            "gpus": [gpu.model_dump() for gpu in gpus],
            "nics": [nic.model_dump() for nic in nics],
            "gpu_links": [link.model_dump() for link in topo.gpu_links],
            "gpu_paths": [path.model_dump() for path in topo.gpu_paths] or hwloc.gpu_paths,
            "pci_paths": [path.model_dump() for path in topo.pci_paths] or hwloc.pci_paths,
            "sources": list(dict.fromkeys([*hwloc.sources, *topo.sources])),
        }
    )
    return merged, notices
