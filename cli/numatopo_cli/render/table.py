"""The `numatopo inspect` summary a person reads: node, kubelet policies, one row per NUMA node,
SLIT distances, the GPU/NIC matrix, the DRA devices (given ResourceSlices) and the notices. Pure."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from numatopo_cli.render import matrix, text
from numatopo_engine.model import DraDevices, Gpu, Numatopology, NumatopologySpec, Policies

# The name the kubelet reader gives itself in `spec.sources`.
KUBELET_SOURCE = "kubelet"


def render_table(
    topology: Numatopology, *, notices: Sequence[str] = (), color: bool = False
) -> str:
    """Everything `inspect` knows about the node, as aligned plain text ending in a newline."""
    spec = topology.spec

    def bold(words: str) -> str:
        return text.paint(words, "1", color=color)

    lines = [
        f"{bold('Node ' + topology.metadata.name)}   sources: {text.format_ids(spec.sources)}",
        *_summary(spec),
        "",
        *_numa_rows(spec, color=color),
    ]
    if distances := _distance_rows(spec, color=color):
        lines += ["", bold("NUMA distances"), *distances]
    if accelerators := _accelerator_rows(spec, color=color):
        lines += ["", bold("Accelerators"), *accelerators]
    if topo_lines := matrix.render_matrix(spec, color=color):
        lines += ["", bold("GPU/NIC topology"), *topo_lines]
    dra = topology.status.dra if topology.status is not None else None
    if dra is not None:
        lines += ["", bold("DRA devices") + "   " + dra.summary, *_dra_rows(dra, color=color)]
    if notices:
        lines.append("")
        lines += [text.paint("notice:", "33", color=color) + " " + notice for notice in notices]
    return "\n".join(lines) + "\n"


def _bold_header(color: bool) -> Callable[[int, int, str], str]:
    """The `align_rows` style that paints the header row bold."""
    return lambda row, _column, cell: text.paint(cell, "1", color=color) if row == 0 else cell


def _summary(spec: NumatopologySpec) -> list[str]:
    capacity = spec.capacity
    sockets = {cpu.socket for cpu in spec.cpus}
    counts = [
        text.count(len(sockets), "socket") if sockets else "",
        text.count(capacity.numa_nodes, "NUMA node"),
        text.count(capacity.cpus, "CPU"),
        text.count(capacity.gpus, "GPU"),
        text.count(capacity.nics, "NIC"),
        f"{text.format_bytes(capacity.memory_bytes)} memory" if capacity.memory_bytes else "",
    ]
    return text.align_rows(
        [
            ["Capacity", ", ".join(c for c in counts if c)],
            ["Kubelet", _policies(spec)],
            ["Reserved CPUs", str(spec.reserved_cpus) or text.UNKNOWN],
        ]
    )


def _policies(spec: NumatopologySpec) -> str:
    policies = spec.policies
    if KUBELET_SOURCE not in spec.sources and policies == Policies():
        # Saved files and nodes without a kubelet say nothing about its policies.
        return "not read (no kubelet config among the sources)"
    options = ",".join(
        f"{key}={value}" for key, value in sorted(policies.topology_manager_policy_options.items())
    )
    scope = f"scope {policies.topology_manager_scope}" + (f", {options}" if options else "")
    return (
        f"cpuManagerPolicy {policies.cpu_manager_policy}, "
        f"topologyManagerPolicy {policies.topology_manager_policy} ({scope})"
    )


def _numa_rows(spec: NumatopologySpec, *, color: bool) -> list[str]:
    nodes = {node.id: node for node in spec.numa_nodes}
    rows = [["NUMA", "CPUS", "CORES", "MEMORY", "HUGEPAGES", "GPUS", "NICS"]]
    numa_keys: list[int | None] = list(text.numa_ids(spec))
    if any(gpu.numa is None for gpu in spec.gpus) or any(nic.numa is None for nic in spec.nics):
        numa_keys.append(None)
    for numa in numa_keys:
        node = nodes.get(numa) if numa is not None else None
        gpus = sorted(gpu.index for gpu in spec.gpus if gpu.numa == numa)
        nics = [nic.name for nic in spec.nics if nic.numa == numa]
        cores = {cpu.core for cpu in spec.cpus if cpu.numa == numa and cpu.online}
        rows.append(
            [
                text.UNKNOWN if numa is None else str(numa),
                str(node.cpus) or text.UNKNOWN if node else text.UNKNOWN,
                str(len(cores)) if spec.cpus and numa is not None else text.UNKNOWN,
                text.format_bytes(node.memory_bytes) if node else text.UNKNOWN,
                text.format_hugepages(node.hugepages) if node else text.UNKNOWN,
                text.format_ids(gpus),
                text.format_ids(nics),
            ]
        )
    return text.align_rows(rows, right=(2,), style=_bold_header(color))


def _accelerator_rows(spec: NumatopologySpec, *, color: bool) -> list[str]:
    """One row per accelerator, when the node has any besides whole NVIDIA GPUs (the
    NUMA rows and the GPU matrix already say all there is about those)."""
    if all(gpu.resource == "nvidia.com/gpu" and not gpu.mig_mode for gpu in spec.gpus):
        return []
    rows = [["ID", "RESOURCE", "VENDOR", "MODEL", "PCI", "NUMA", "MIG"]]
    for gpu in spec.gpus:
        rows.append(
            [
                str(gpu.index),
                "(MIG)" if gpu.mig_mode else gpu.resource,
                gpu.vendor,
                text.short_model(gpu) or text.UNKNOWN,
                text.short_pci(gpu) or text.UNKNOWN,
                text.UNKNOWN if gpu.numa is None else str(gpu.numa),
                _mig_summary(gpu),
            ]
        )
    return text.align_rows(rows, style=_bold_header(color))


def _dra_rows(dra: DraDevices, *, color: bool) -> list[str]:
    """One row per GPU, NIC or CPU a DRA driver publishes: which driver, pool and device."""
    rows = [["JOINED", "DRIVER", "POOL", "DEVICE"]]
    for device in dra.devices:
        joined = (
            f"GPU {device.gpu}"
            if device.gpu is not None
            else f"NIC {device.nic}"
            if device.nic is not None
            else f"CPU {device.cpu}"
        )
        rows.append([joined, device.driver, device.pool, device.device])
    return text.align_rows(rows, style=_bold_header(color))


def _mig_summary(gpu: Gpu) -> str:
    """`2x 3g.40gb (8,9)` per profile, in the order NVML lists them; `-` for none."""
    by_profile: dict[str, list[int]] = {}
    for device in gpu.mig_devices or ():
        by_profile.setdefault(device.profile, []).append(device.index)
    return (
        " ".join(
            f"{len(ids)}x {profile} ({text.format_ids(ids)})" for profile, ids in by_profile.items()
        )
        or text.UNKNOWN
    )


def _distance_rows(spec: NumatopologySpec, *, color: bool) -> list[str]:
    """The SLIT matrix, only when there is more than one node and the source reports it."""
    nodes = sorted(spec.numa_nodes, key=lambda node: node.id)
    if len(nodes) < 2 or not any(node.distances for node in nodes):
        return []
    ids = [str(node.id) for node in nodes]
    rows = [["", *ids]] + [
        [str(node.id), *(str(node.distances.get(other, text.UNKNOWN)) for other in ids)]
        for node in nodes
    ]
    return text.align_rows(
        rows,
        right=range(len(ids) + 1),
        style=lambda row, column, cell: (
            text.paint(cell, "1", color=color) if row == 0 or column == 0 else cell
        ),
    )
