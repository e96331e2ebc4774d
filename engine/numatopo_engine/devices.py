"""The accelerators a node hands out: whole GPUs and MIG devices in one index space (pure;
docs/DESIGN.md, "Accelerators of any vendor and MIG devices"). A GPU whose MIG mode is on but whose
MIG devices are unknown hands out nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from numatopo_engine.model import NumatopologySpec


@dataclass(frozen=True, slots=True)
class Device:
    index: int
    numa: int | None
    resource: str
    name: str
    """What assignments call it: UUID, else PCI bus id, else `GPU-<index>`; a MIG device
    without a UUID is `<parent name>/mig-<index>`."""
    parent: int | None = None
    """The GPU a MIG device belongs to; None for a whole GPU."""


def schedulable_devices(spec: NumatopologySpec) -> list[Device]:
    """Whole GPUs not in MIG mode, then the MIG devices of those in MIG mode."""
    whole: list[Device] = []
    mig: list[Device] = []
    for gpu in spec.gpus:
        name = gpu.uuid or gpu.pci_bus_id or f"GPU-{gpu.index}"
        if not gpu.mig_mode:
            whole.append(Device(gpu.index, gpu.numa, gpu.resource, name))
            continue
        for device in gpu.mig_devices or ():
            mig.append(
                Device(
                    device.index,
                    gpu.numa,
                    device.resource,
                    device.uuid or f"{name}/mig-{device.index}",
                    parent=gpu.index,
                )
            )
    return whole + mig
