"""`nvidia-smi topo -m` text -> `NumatopologySpec`.

The matrix is read as it travels in issues and runbooks: inside markdown fences, after a
`$ nvidia-smi topo -m` prompt, with prose around it and the legend below. It has

    header   GPU0..GPUn, NIC columns (NIC0.. or mlx5_*), `CPU Affinity`,
             `NUMA Affinity` (drivers >= ~450), `GPU NUMA ID` (drivers >= ~535)
    rows     one per GPU, then one per NIC (NIC rows carry no affinity columns)
    legend   `NIC Legend:` lines `NIC0: mlx5_0` give NIC columns their device names

Current drivers underline the header with terminal escape codes even into a file or a pipe; they
are removed. Cells: `X` (self), `NV#` (# bonded NVLinks), `PIX`, `PXB`, `PHB`, `NODE`, `SYS`, and
`SOC` (`SYS` before 2017). What the text cannot say:
  * GPU models: NVLink bandwidth uses 25 GB/s per link and direction (`nvlink`): NV18 -> 450 GB/s.
  * Without a NUMA Affinity column (old drivers) or where it says N/A, each distinct CPU Affinity
    set is one NUMA node (if the sets are disjoint), numbered in order of their lowest CPU.
  * Per-CPU rows (core, socket): `spec.cpus` stays empty, and a NUMA node's `cpus` is the union
    of its GPUs' CPU affinities.
  * A NIC's NUMA node is that of the GPUs it reaches without crossing sockets (a PIX/PXB/PHB/NODE
    cell); a NIC that is SYS to every GPU stays unknown.
  * The PCIe path of an NVLinked GPU pair: it has no `gpuPaths` entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from numatopo_engine.cpuset import CPUSet, CPUSetParseError
from numatopo_engine.model import (
    Gpu,
    GpuLink,
    GpuPath,
    LinkType,
    Nic,
    NumaNode,
    NumatopologySpec,
    PathType,
    PciPath,
)
from numatopo_exporter.discovery.errors import DiscoveryError, read_saved
from numatopo_exporter.discovery.nvlink import link_gbps

SOURCE = "nvidia-smi-topo"

_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_HEADER_TOKEN = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID|\S+")
_GPU_COLUMN = re.compile(r"^GPU(\d+)$")
_NVLINK_CELL = re.compile(r"^NV(\d+)$")
_LEGEND_ENTRY = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_PATH_CELLS = {p.value: p for p in PathType} | {"SOC": PathType.SYS}
_NOT_APPLICABLE = {"N/A", "NA", "-"}
# ANSI select-graphic-rendition sequences (underline on, reset): styling, not content.
_TERMINAL_STYLE = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class _Matrix:
    """The table as printed: the device column names and, per row label, its cells by column
    name (`extras`: those of the affinity columns)."""

    columns: list[str]
    cells: dict[str, dict[str, str]] = field(default_factory=dict)
    extras: dict[str, dict[str, str]] = field(default_factory=dict)
    legend: dict[str, str] = field(default_factory=dict)


def read_nvidia_smi_topo(path: Path) -> NumatopologySpec:
    """Read a file holding `nvidia-smi topo -m` output; errors name the file."""
    return read_saved(
        path,
        "nvidia-smi topo output",
        lambda data: parse_nvidia_smi_topo(data.decode(errors="replace")),
    )


def parse_nvidia_smi_topo(text: str) -> NumatopologySpec:
    """Parse `nvidia-smi topo -m` output (as pasted, fences and prose allowed)."""
    matrix = _find_matrix(_TERMINAL_STYLE.sub("", text))
    gpu_columns = [c for c in matrix.columns if _GPU_COLUMN.match(c)]
    nic_columns = [c for c in matrix.columns if not _GPU_COLUMN.match(c)]
    if missing := [c for c in gpu_columns if c not in matrix.cells]:
        raise DiscoveryError(
            f"nvidia-smi topo -m output is truncated: the header names {len(gpu_columns)} GPUs "
            f"but there is no row for {', '.join(missing)}"
        )
    cells, extras = matrix.cells, matrix.extras
    index = {name: int(name.removeprefix("GPU")) for name in gpu_columns}
    for row, row_cells in cells.items():
        if row_cells.get(row) != "X":
            raise DiscoveryError(
                f"nvidia-smi topo -m row {row} has {row_cells.get(row)!r} where its own "
                "column should say X: the columns are misaligned or the row is damaged"
            )
    affinity = {name: _cpu_affinity(name, extras[name].get("CPU Affinity")) for name in gpu_columns}
    numa = _gpu_numa(gpu_columns, affinity, extras)

    gpus = [Gpu(index=index[name], numa=numa[name]) for name in gpu_columns]
    links: list[GpuLink] = []
    paths: list[GpuPath] = []
    gbps = link_gbps()  # the text names no GPU model
    for i, a in enumerate(gpu_columns):
        for b in gpu_columns[i + 1 :]:
            lo, hi = sorted((index[a], index[b]))
            cell = cells[a][b]
            if nvlink := _NVLINK_CELL.match(cell):
                n = int(nvlink[1])
                link = GpuLink(a=lo, b=hi, type=LinkType.NVLINK, links=n, bandwidth_g_bps=n * gbps)
                links.append(link)
            else:
                paths.append(GpuPath(a=lo, b=hi, path=_path(cell, a, b)))

    nic_names = {col: matrix.legend.get(col, col) for col in nic_columns}
    pci_paths = [
        PciPath(gpu=index[g], nic=nic_names[n], path=_path(cells[g][n], g, n))
        for g in gpu_columns
        for n in nic_columns
    ]
    nics = [
        Nic(name=nic_names[n], numa=_nic_numa(n, gpu_columns, cells, numa)) for n in nic_columns
    ]

    numa_nodes: dict[int, CPUSet] = {}
    for name in gpu_columns:
        node = numa[name]
        if node is not None:
            numa_nodes[node] = numa_nodes.get(node, CPUSet()) | (affinity[name] or CPUSet())
    try:
        return NumatopologySpec(
            numa_nodes=[NumaNode(id=n, cpus=numa_nodes[n]) for n in sorted(numa_nodes)],
            gpus=sorted(gpus, key=lambda g: g.index),
            gpu_links=sorted(links, key=lambda x: (x.a, x.b)),
            gpu_paths=sorted(paths, key=lambda x: (x.a, x.b)),
            nics=nics,
            pci_paths=pci_paths,
            sources=[SOURCE],
        )
    except ValueError as exc:
        raise DiscoveryError(f"nvidia-smi topo -m output is inconsistent: {exc}") from exc


def _find_matrix(text: str) -> _Matrix:
    if "ROCm System Management Interface" in text:
        raise DiscoveryError(
            "not nvidia-smi topo -m output: this is AMD rocm-smi output, which numatopo "
            "does not read yet; on AMD nodes use the live sysfs reader or `--hwloc-xml`"
        )
    lines = text.splitlines()
    for number, line in enumerate(lines):
        tokens = _HEADER_TOKEN.findall(line)
        # A header starts with GPU0 like the first row does, but is not followed by X.
        if tokens[:1] == ["GPU0"] and tokens[1:2] != ["X"]:
            matrix = _read_table(tokens, lines[number + 1 :])
            if matrix.cells:
                return matrix
    raise DiscoveryError(
        "not nvidia-smi topo -m output: no matrix header starting with GPU0 "
        "followed by a GPU0 row was found"
    )


def _read_table(header: list[str], body: list[str]) -> _Matrix:
    devices = [t for t in header if t not in _AFFINITY_COLUMNS]
    extras = [t for t in header if t in _AFFINITY_COLUMNS]
    if header[: len(devices)] != devices:
        raise DiscoveryError(f"unexpected nvidia-smi topo -m header: {' '.join(header)!r}")
    matrix = _Matrix(columns=devices)
    reading_legend = False
    for line in body:
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0] in devices and not reading_legend:
            row = tokens[1:]
            if len(row) < len(devices):
                raise DiscoveryError(
                    f"nvidia-smi topo -m row {tokens[0]} is truncated: "
                    f"{len(row)} cells for {len(devices)} columns"
                )
            matrix.cells[tokens[0]] = dict(zip(devices, row, strict=False))
            matrix.extras[tokens[0]] = dict(zip(extras, row[len(devices) :], strict=False))
        elif line.strip().startswith("NIC Legend"):
            reading_legend = True
        elif reading_legend and (entry := _LEGEND_ENTRY.match(line)):
            matrix.legend[entry[1]] = entry[2]
    return matrix


def _path(cell: str, row: str, column: str) -> PathType:
    try:
        return _PATH_CELLS[cell]
    except KeyError:
        raise DiscoveryError(
            f"nvidia-smi topo -m cell {row}/{column} is {cell!r}; expected X, NV#, PIX, PXB, "
            "PHB, NODE, SYS or SOC"
        ) from None


def _cpu_affinity(gpu: str, value: str | None) -> CPUSet | None:
    if value is None or value in _NOT_APPLICABLE:
        return None
    try:
        return CPUSet.parse(value)
    except CPUSetParseError as exc:
        raise DiscoveryError(f"{gpu}: CPU Affinity {value!r} is not a CPU list ({exc})") from exc


def _gpu_numa(
    gpus: list[str], affinity: dict[str, CPUSet | None], extras: dict[str, dict[str, str]]
) -> dict[str, int | None]:
    printed = {g: extras[g].get("NUMA Affinity", "N/A") for g in gpus}
    # Where the NUMA column is unusable: one node per distinct CPU affinity set, if disjoint.
    distinct = sorted({a for a in affinity.values() if a}, key=lambda s: s.sorted()[0])
    disjoint = all(x.isdisjoint(y) for i, x in enumerate(distinct) for y in distinct[i + 1 :])
    out: dict[str, int | None] = {}
    for g in gpus:
        if printed[g].isdigit():
            out[g] = int(printed[g])
        elif disjoint and (cpus := affinity[g]):
            out[g] = distinct.index(cpus)
        else:
            out[g] = None
    return out


def _nic_numa(
    nic: str, gpus: list[str], cells: dict[str, dict[str, str]], numa: dict[str, int | None]
) -> int | None:
    local = {numa[g] for g in gpus if cells[g][nic] not in ("SYS", "SOC")}
    local.discard(None)
    return local.pop() if len(local) == 1 else None
