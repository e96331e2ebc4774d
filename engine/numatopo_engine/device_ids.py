"""Device plugin IDs <-> the GPUs of an assignment and of a topology (pure).

NVIDIA's device plugin names a GPU by its UUID (`--device-id-strategy=uuid`, the default) or index
(`index`), with a replica suffix under time-slicing (`GPU-...::3`); an assignment names its GPUs by
UUID (or PCI bus id) and index, so either maps back. One rule serves the steering answer (assigned
-> device IDs) and Follow (held IDs -> assigned or not).

RDMA plugins name a NIC by what they were configured with: the SR-IOV plugin by PCI address, others
by the RDMA device or netdev name. An ID names a NIC when it is one of those; a shared-device pool's
IDs (`rdma/hca_shared_devices_a`) name none.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from numatopo_engine.model import Gpu, Nic

REPLICA_SEPARATOR = "::"


def base_id(device_id: str) -> str:
    """The device ID without a time-slicing replica suffix."""
    return device_id.split(REPLICA_SEPARATOR, 1)[0]


def _key(name: str) -> str:
    # UUIDs are compared without case; a PCI bus id also without NVML's 8-digit domain.
    text = base_id(name).strip().lower()
    if text.startswith("0000") and text.count(":") == 2 and len(text.split(":")[0]) == 8:
        text = text[4:]
    return text


def same_gpu(device_id: str, gpu_name: str, gpu_index: int | None) -> bool:
    """Whether the plugin's `device_id` is the GPU `gpu_name` (UUID or bus id) at `gpu_index`."""
    key = _key(device_id)
    if gpu_name and key == _key(gpu_name):
        return True
    return gpu_index is not None and key == str(gpu_index)


def device_ids_for(
    gpu_names: Sequence[str], gpu_indices: Sequence[int], available: Iterable[str]
) -> list[str] | None:
    """The IDs in `available` of the assigned GPUs, in assignment order; None if one is missing."""
    # Each ID keyed once, not once per GPU: a kubelet may offer thousands (replicas).
    keyed = [(d, _key(d)) for d in dict.fromkeys(available)]
    chosen: list[str] = []
    for position, name in enumerate(gpu_names):
        index = gpu_indices[position] if position < len(gpu_indices) else None
        wanted = {_key(name)} if name else set()
        if index is not None:
            wanted.add(str(index))
        found = next((d for d, key in keyed if key in wanted and d not in chosen), None)
        if found is None:
            return None
        chosen.append(found)
    return chosen


def gpu_indices(device_ids: Iterable[str], gpus: Iterable[Gpu]) -> list[int] | None:
    """The node's device indices (a whole GPU's, or a MIG device's by its `MIG-...` UUID) the
    plugin's `device_ids` name, in order; None when one names neither (or the topology is stale)."""
    known = list(gpus)
    # (name, index an ID may also be, the device index it names): GPUs first, then MIG devices.
    aliases = [
        (name, at, g.index) for g in known for name, at in ((g.uuid, g.index), (g.pci_bus_id, None))
    ]
    aliases += [(m.uuid, None, m.index) for g in known for m in g.mig_devices or () if m.uuid]
    found: list[int] = []
    for device_id in device_ids:
        index = next((i for name, at, i in aliases if same_gpu(device_id, name, at)), None)
        if index is None:
            return None
        found.append(index)
    return found


def nic_names(device_ids: Iterable[str], nics: Iterable[Nic]) -> list[str] | None:
    """The NICs the plugin's `device_ids` name, in order, once each; None if one names none."""
    known = {
        _key(alias): nic.name
        for nic in nics
        for alias in (nic.name, nic.pci_bus_id, *nic.netdevs)
        if alias
    }
    found: list[str] = []
    for device_id in device_ids:
        name = known.get(_key(device_id))
        if name is None:
            return None
        if name not in found:
            found.append(name)
    return found
