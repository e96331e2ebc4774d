"""The GPU/NIC connection matrix, laid out like `nvidia-smi topo -m`. Pure.

Cells, closest first: `X` (self), `NV#` (# bonded NVLinks) or `XGMI`, then the PCIe path classes PIX
< PXB < PHB < NODE < SYS. A pair the spec says nothing about is `SYS` when the two devices sit on
different known NUMA nodes (that is what SYS means) and `-` otherwise.
"""

from __future__ import annotations

from numatopo_cli.render import text
from numatopo_engine.model import NumatopologySpec, PathType

SELF = "X"

# Colours: direct links green, same PCIe switch cyan, through the CPU yellow, across
# sockets red; the eye finds the good pairs before reading a single label.
_CELL_COLORS = {"PIX": "36", "PXB": "36", "PHB": "33", "NODE": "33", "SYS": "31"}


def render_matrix(spec: NumatopologySpec, *, color: bool = False) -> list[str]:
    """The matrix of the spec's GPUs (by index) then NICs (in spec order), each row with its
    CPU and NUMA affinity, as lines of text, a legend and the NIC names; empty without
    GPUs/NICs."""
    gpus = sorted(spec.gpus, key=lambda gpu: gpu.index)
    links = {(link.a, link.b): text.link_label(link) for link in spec.gpu_links}
    gpu_paths = {(path.a, path.b): path.path.value for path in spec.gpu_paths}
    nic_paths = {(path.gpu, path.nic): path.path.value for path in spec.pci_paths}
    numa_cpus: dict[int | None, str] = {
        node.id: str(node.cpus) or text.UNKNOWN for node in spec.numa_nodes
    }

    # (kind, key, numa): key is the GPU index or the NIC name.
    devices: list[tuple[str, int | str, int | None]] = [
        ("GPU", gpu.index, gpu.numa) for gpu in gpus
    ] + [("NIC", nic.name, nic.numa) for nic in spec.nics]
    if not devices:
        return []
    labels = [f"GPU{gpu.index}" for gpu in gpus] + [f"NIC{i}" for i in range(len(spec.nics))]

    def between(a: tuple[str, int | str, int | None], b: tuple[str, int | str, int | None]) -> str:
        if a is b:
            return SELF
        found: str | None = None
        if a[0] == "GPU" and b[0] == "GPU":
            pair = (min(int(a[1]), int(b[1])), max(int(a[1]), int(b[1])))
            found = links.get(pair) or gpu_paths.get(pair)
        elif a[0] == "GPU" and b[0] == "NIC":
            found = nic_paths.get((int(a[1]), str(b[1])))
        elif a[0] == "NIC" and b[0] == "GPU":
            found = nic_paths.get((int(b[1]), str(a[1])))
        if found is not None:
            return found
        if a[2] is not None and b[2] is not None and a[2] != b[2]:
            return PathType.SYS.value
        return text.UNKNOWN

    rows = [["", *labels, "CPU Affinity", "NUMA Affinity"]]
    for label, device in zip(labels, devices, strict=True):
        numa = device[2]
        affinity = [numa_cpus.get(numa, text.UNKNOWN), text.UNKNOWN if numa is None else str(numa)]
        rows.append([label, *(between(device, other) for other in devices), *affinity])

    def style(row: int, column: int, cell: str) -> str:
        if row == 0 or column == 0:
            return text.paint(cell, "1", color=color)
        if column > len(labels):
            return cell
        if cell == SELF:
            return text.paint(cell, "2", color=color)
        if cell.startswith(("NV", "XGMI")):
            return text.paint(cell, "32", color=color)
        return text.paint(cell, _CELL_COLORS.get(cell, "0"), color=color)

    lines = text.align_rows(rows, style=style)
    lines += [
        "",
        "Legend:",
        "  X    = self",
        "  NV#  = a bonded set of # NVLinks       XGMI = AMD Infinity Fabric link",
        "  PIX  = at most one PCIe bridge         PXB  = several PCIe bridges, no host bridge",
        "  PHB  = through a PCIe host bridge      NODE = across host bridges in one NUMA node",
        "  SYS  = across the link between NUMA nodes (QPI/UPI)",
        f"  {text.UNKNOWN}    = not reported by the sources",
    ]
    if spec.nics:
        lines += ["", "NIC Legend:", ""]
        lines += [f"  NIC{i}: {nic.name}" for i, nic in enumerate(spec.nics)]
    return lines
