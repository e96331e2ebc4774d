"""Pure: fold the NVML and kubelet readings into the spec read from sysfs (or hwloc).

GPUs are matched by PCI bus id, in the one form `pci.normalize_bus_id` defines. For a matched GPU
NVML wins on what the driver knows better (index, uuid, model, memory, MIG mode, NUMA on coherent
platforms) and sysfs fills what NVML lacks (the NUMA node on x86). GPU indices become NVML's, so
`pciPaths` and `gpuPaths` of the base are renumbered; GPU links come from NVML, the only source that
sees NVLinks on a live node. A base GPU that NVML does not list (another vendor, or a device the
driver did not bind) is kept under a fresh index after NVML's.
"""

from __future__ import annotations

from numatopo_engine.model import Gpu, GpuPath, NumatopologySpec
from numatopo_exporter.discovery.kubelet import SOURCE as KUBELET_SOURCE
from numatopo_exporter.discovery.kubelet import KubeletReading
from numatopo_exporter.discovery.nvml import SOURCE as NVML_SOURCE
from numatopo_exporter.discovery.nvml import GpuReading
from numatopo_exporter.discovery.pci import normalize_bus_id


def _bus(bus_id: str) -> str:
    try:
        return normalize_bus_id(bus_id)
    except ValueError:
        return bus_id.strip().lower()


def _add_source(sources: list[str], source: str) -> list[str]:
    return sources if source in sources else [*sources, source]


def merge_gpu_reading(base: NumatopologySpec, reading: GpuReading) -> NumatopologySpec:
    """`base` with its GPUs replaced and enriched by NVML's, links from NVML."""
    base_by_bus = {_bus(g.pci_bus_id): g for g in base.gpus if g.pci_bus_id}
    renumber: dict[int, int] = {}
    gpus: list[Gpu] = []
    for gpu in reading.gpus:
        bus = _bus(gpu.pci_bus_id) if gpu.pci_bus_id else ""
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
                "sources": _add_source(base.sources, NVML_SOURCE),
            }
        ).model_dump()
    )


def merge_kubelet(base: NumatopologySpec, reading: KubeletReading) -> NumatopologySpec:
    """`base` with the kubelet's policies and reserved CPUs."""
    return base.model_copy(
        update={
            "policies": reading.policies,
            "reserved_cpus": reading.reserved_cpus,
            "sources": _add_source(base.sources, KUBELET_SOURCE),
        }
    )
