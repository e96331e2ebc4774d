"""A self-contained SVG diagram of one node. Pure: spec in, SVG text out, no dependency.

Top to bottom: the title (node name, sources, counts); one box per socket holding its NUMA nodes
(CPUs, cores, memory); NICs, then GPUs, under their NUMA node (devices of unknown NUMA get a column
of their own); the GPU links, as an "NVSwitch" bar joined to every GPU when every GPU pair has the
same direct link (28 crossing lines say less than one bar), else one arc per linked pair, wider
with bandwidth (or link count); the legend. GPU-NIC pairs on the same PCIe switch (PIX) are thin
dashed lines, PXB dotted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar
from xml.sax.saxutils import escape

from numatopo_cli.render import text
from numatopo_engine.model import (
    Gpu,
    GpuLink,
    LinkType,
    Nic,
    NumaNode,
    Numatopology,
    NumatopologySpec,
    PathType,
)

K = TypeVar("K")

# Geometry in px. Device boxes fit "GPU12" plus a model name such as "H100 80GB HBM3"
# at 11 px; the pitch leaves room for the attach points of up to 6 arcs per GPU.
MARGIN = 24
TITLE_HEIGHT = 60
SOCKET_PAD = 12
SOCKET_LABEL = 24
NUMA_HEIGHT = 92
NUMA_MIN_WIDTH = 236
BARE_NUMA_WIDTH = 176  # a NUMA node with no devices: many-node CPU servers stay narrower
COLUMN_GAP = 12
GROUP_GAP = 28
PITCH = 128
GPU_WIDTH, GPU_HEIGHT = 116, 64
NIC_WIDTH, NIC_HEIGHT = 116, 44
ROW_GAP = 40
BAR_HEIGHT = 28
LEGEND_HEIGHT = 64
MIN_WIDTH = 760
CHAR_WIDTH = 0.64  # average glyph width per px of font size in a sans-serif face
# The y of the horizontal bands every node has, top down.
TOP = MARGIN + TITLE_HEIGHT
NUMA_TOP = TOP + SOCKET_LABEL
SOCKET_BOTTOM = NUMA_TOP + NUMA_HEIGHT + SOCKET_PAD
NIC_TOP = SOCKET_BOTTOM + ROW_GAP

STYLE = """
text { font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; fill: #1f2937; }
.title { font-size: 18px; font-weight: bold; }
.subtitle, .small { font-size: 11px; fill: #4b5563; }
.label { font-size: 12px; }
.name { font-size: 13px; font-weight: bold; }
.socket { fill: #f3f4f6; stroke: #9ca3af; stroke-width: 1; }
.socket-label { font-size: 12px; font-weight: bold; fill: #6b7280; }
.numa { fill: #dbeafe; stroke: #3b82f6; stroke-width: 1.5; }
.numa-unknown { fill: #f9fafb; stroke: #9ca3af; stroke-width: 1.5; stroke-dasharray: 6 4; }
.band { fill: #eff6ff; }
.gpu rect { fill: #dcfce7; stroke: #16a34a; stroke-width: 1.5; }
.nic rect { fill: #fef3c7; stroke: #d97706; stroke-width: 1.5; }
.nvlink { fill: none; stroke: #16a34a; stroke-opacity: 0.85; stroke-linecap: round; }
.xgmi { fill: none; stroke: #dc2626; stroke-opacity: 0.85; stroke-linecap: round; }
.switch { fill: #166534; }
.switch-label { font-size: 12px; font-weight: bold; fill: #ffffff; }
.link-label { font-size: 10px; fill: #166534; stroke: #ffffff; stroke-width: 3px;
              paint-order: stroke; }
.pix { stroke: #b45309; stroke-width: 1.5; stroke-dasharray: 5 4; fill: none; }
.pxb { stroke: #b45309; stroke-width: 1.5; stroke-dasharray: 1.5 3; fill: none; }
"""


@dataclass
class _Column:
    """One NUMA node (or the devices of unknown NUMA) and what hangs off it."""

    numa: int | None
    node: NumaNode | None
    socket: int | None
    gpus: list[Gpu]
    nics: list[Nic]
    x: float = 0
    width: float = 0


@dataclass
class _Canvas:
    parts: list[str] = field(default_factory=list)

    def add(self, element: str) -> None:
        self.parts.append(element)

    def text(self, x: float, y: float, content: str, css: str, anchor: str = "start") -> None:
        self.add(
            f'<text x="{x:.1f}" y="{y:.1f}" class="{css}" text-anchor="{anchor}">'
            f"{escape(content)}</text>"
        )


def render_svg(topology: Numatopology) -> str:
    """The SVG document (UTF-8 text) for `topology`."""
    spec = topology.spec
    columns = _columns(spec)
    sockets = _place_columns(columns)
    # The rows below the sockets: NICs if any, then GPUs.
    gpu_top = NIC_TOP + (NIC_HEIGHT + ROW_GAP if spec.nics else 0)
    gpu_bottom = gpu_top + GPU_HEIGHT
    devices_bottom = NIC_TOP + NIC_HEIGHT if spec.nics else SOCKET_BOTTOM
    if spec.gpus:
        devices_bottom = gpu_bottom
    gpu_boxes: dict[int, float] = {}
    nic_boxes: dict[str, float] = {}
    for column in columns:
        gpu_boxes |= _slots(column, [gpu.index for gpu in column.gpus])
        nic_boxes |= _slots(column, [nic.name for nic in column.nics])

    canvas = _Canvas()
    _draw_title(canvas, topology)
    for column in columns:
        if column.gpus or column.nics:
            # A pale band carries the NUMA box down over its devices.
            band_top = NUMA_TOP + NUMA_HEIGHT - 8
            canvas.add(
                f'<rect class="band" x="{column.x:.1f}" y="{band_top:.1f}" '
                f'width="{column.width:.1f}" height="{devices_bottom + 14 - band_top:.1f}" '
                'rx="8"/>'
            )
    for socket_id, (left, right) in sockets.items():
        canvas.add(
            f'<rect class="socket" x="{left:.1f}" y="{TOP:.1f}" width="{right - left:.1f}" '
            f'height="{SOCKET_BOTTOM - TOP:.1f}" rx="10"/>'
        )
        canvas.text(left + 10, TOP + 16, f"Socket {socket_id}", "socket-label")
    for column in columns:
        _draw_numa(canvas, column, spec, NUMA_TOP)

    links_bottom: float = gpu_bottom
    if spec.gpu_links:
        links_bottom = _draw_links(canvas, spec, gpu_boxes, gpu_bottom)
    for path in spec.pci_paths:
        if path.path in (PathType.PIX, PathType.PXB) and path.nic in nic_boxes:
            nic_x = nic_boxes[path.nic] + NIC_WIDTH / 2
            gpu_x = gpu_boxes[path.gpu] + GPU_WIDTH / 2
            canvas.add(
                f'<line class="{path.path.value.lower()}" x1="{nic_x:.1f}" '
                f'y1="{NIC_TOP + NIC_HEIGHT:.1f}" x2="{gpu_x:.1f}" y2="{gpu_top:.1f}"/>'
            )
    for nic_index, nic in enumerate(spec.nics):
        _draw_nic(canvas, nic, nic_index, nic_boxes[nic.name], NIC_TOP)
    for gpu in spec.gpus:
        _draw_gpu(canvas, gpu, gpu_boxes[gpu.index], gpu_top)

    right_edge = max((column.x + column.width for column in columns), default=MARGIN)
    width = max(MIN_WIDTH, right_edge + SOCKET_PAD + MARGIN)
    legend_top = max(links_bottom, devices_bottom, SOCKET_BOTTOM) + 36
    height = legend_top + LEGEND_HEIGHT + MARGIN

    _draw_legend(canvas, legend_top)
    title = f"numatopo: topology of node {topology.metadata.name}"
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img">\n'
        f"<title>{escape(title)}</title>\n"
        f"<style>{STYLE}</style>\n"
        '<rect width="100%" height="100%" fill="#ffffff"/>\n'
        + "\n".join(canvas.parts)
        + "\n</svg>\n"
    )


def _columns(spec: NumatopologySpec) -> list[_Column]:
    """Columns ordered by socket then NUMA id; NUMA nodes without CPUs and devices of
    unknown NUMA come last, as they belong to no socket."""
    nodes: dict[int | None, NumaNode] = {node.id: node for node in spec.numa_nodes}
    socket_of: dict[int | None, int] = {}
    for cpu in spec.cpus:
        if cpu.numa is None:
            continue
        socket_of[cpu.numa] = min(cpu.socket, socket_of.get(cpu.numa, cpu.socket))
    gpus = sorted(spec.gpus, key=lambda gpu: gpu.index)
    columns = [
        _Column(
            numa=numa,
            node=nodes.get(numa),
            socket=socket_of.get(numa),
            gpus=[gpu for gpu in gpus if gpu.numa == numa],
            nics=[nic for nic in spec.nics if nic.numa == numa],
        )
        for numa in [*text.numa_ids(spec), None]
    ]
    columns = [c for c in columns if c.numa is not None or c.gpus or c.nics]
    columns.sort(key=lambda c: (c.socket is None, c.socket or 0, c.numa is None, c.numa or 0))
    return columns


def _place_columns(columns: list[_Column]) -> dict[int, tuple[float, float]]:
    """Set each column's x and width; return each known socket's left and right edge."""
    sockets: dict[int, tuple[float, float]] = {}
    x: float = MARGIN
    previous: int | None = None
    for column in columns:
        devices = max(len(column.gpus), len(column.nics))
        column.width = max(NUMA_MIN_WIDTH if devices else BARE_NUMA_WIDTH, devices * PITCH)
        same_socket = column.socket is not None and column.socket == previous
        if same_socket:
            x += COLUMN_GAP
        elif column is not columns[0]:
            x += GROUP_GAP + (SOCKET_PAD if previous is not None else 0)
        if column.socket is not None and not same_socket:
            x += SOCKET_PAD
        column.x = x
        x += column.width
        if column.socket is not None:
            left = sockets.get(column.socket, (column.x - SOCKET_PAD, 0))[0]
            sockets[column.socket] = (left, x + SOCKET_PAD)
        previous = column.socket
    return sockets


def _slots(column: _Column, keys: list[K]) -> dict[K, float]:
    """Left x of one device box per key, the boxes centred in the column."""
    start = column.x + (column.width - len(keys) * PITCH) / 2 + (PITCH - GPU_WIDTH) / 2
    return {key: start + i * PITCH for i, key in enumerate(keys)}


def _fit(content: str, width: float, font_px: float) -> str:
    """Cut `content` with an ellipsis so that it fits `width` px."""
    limit = int(width / (font_px * CHAR_WIDTH))
    return content if len(content) <= limit else content[: max(limit - 1, 1)] + "\u2026"


def _draw_title(canvas: _Canvas, topology: Numatopology) -> None:
    spec = topology.spec
    capacity = spec.capacity
    facts = [
        f"sources: {text.format_ids(spec.sources)}",
        text.count(capacity.numa_nodes, "NUMA node"),
        text.count(capacity.cpus, "CPU"),
        text.count(capacity.gpus, "GPU"),
        text.count(capacity.nics, "NIC"),
    ]
    if capacity.memory_bytes:
        facts.append(f"{text.format_bytes(capacity.memory_bytes)} memory")
    policy = spec.policies.topology_manager_policy
    if policy != "none":
        facts.append(f"topology manager: {policy}")
    canvas.text(MARGIN, MARGIN + 18, f"Node {topology.metadata.name}", "title")
    canvas.text(MARGIN, MARGIN + 38, " \u00b7 ".join(facts), "subtitle")


def _draw_numa(canvas: _Canvas, column: _Column, spec: NumatopologySpec, top: float) -> None:
    node = column.node
    css = "numa" if column.numa is not None else "numa-unknown"
    canvas.add(
        f'<rect class="{css}" x="{column.x:.1f}" y="{top:.1f}" width="{column.width:.1f}" '
        f'height="{NUMA_HEIGHT}" rx="8"/>'
    )
    x, inner = column.x + 12, column.width - 24
    if column.numa is None:
        canvas.text(x, top + 22, "NUMA unknown", "name")
        canvas.text(
            x, top + 42, _fit("devices the sources place on no NUMA node", inner, 11), "small"
        )
        return
    canvas.text(x, top + 22, f"NUMA {column.numa}", "name")
    cpus = node.cpus if node else None
    canvas.text(x, top + 42, _fit(f"CPUs {cpus or text.UNKNOWN}", inner, 12), "label")
    counts = f"{len(cpus)} CPUs" if cpus else "no CPUs"
    if cores := {cpu.core for cpu in spec.cpus if cpu.numa == column.numa and cpu.online}:
        counts += f" \u00b7 {len(cores)} cores"
    canvas.text(x, top + 60, _fit(counts, inner, 11), "small")
    memory = (
        f"memory {text.format_bytes(node.memory_bytes)}"
        if node and node.memory_bytes
        else "memory not reported"
    )
    if node and text.format_hugepages(node.hugepages) != text.UNKNOWN:
        memory += f" \u00b7 hugepages {text.format_hugepages(node.hugepages)}"
    canvas.text(x, top + 78, _fit(memory, inner, 11), "small")


def _draw_gpu(canvas: _Canvas, gpu: Gpu, x: float, top: float) -> None:
    facts = [text.format_bytes(gpu.memory_bytes)] if gpu.memory_bytes else []
    facts += [text.short_pci(gpu)] if gpu.pci_bus_id else []
    lines = [short for short in (text.short_model(gpu), " \u00b7 ".join(facts)) if short]
    canvas.add(f'<g class="gpu" id="gpu{gpu.index}">')
    canvas.add(
        f'<rect x="{x:.1f}" y="{top:.1f}" width="{GPU_WIDTH}" height="{GPU_HEIGHT}" rx="6"/>'
    )
    baseline = top + (GPU_HEIGHT - 16 * len(lines)) / 2 + 12
    centre = x + GPU_WIDTH / 2
    canvas.text(centre, baseline, f"GPU{gpu.index}", "name", anchor="middle")
    for offset, line in enumerate(lines, start=1):
        shown = _fit(line, GPU_WIDTH - 8, 11)
        canvas.text(centre, baseline + 16 * offset, shown, "small", anchor="middle")
    canvas.add("</g>")


def _draw_nic(canvas: _Canvas, nic: Nic, nic_index: int, x: float, top: float) -> None:
    details = " \u00b7 ".join(
        p for p in (f"NIC{nic_index}", text.short_pci(nic), nic.link_layer) if p
    )
    canvas.add(f'<g class="nic" id="nic{nic_index}">')
    canvas.add(
        f'<rect x="{x:.1f}" y="{top:.1f}" width="{NIC_WIDTH}" height="{NIC_HEIGHT}" rx="6"/>'
    )
    centre = x + NIC_WIDTH / 2
    canvas.text(centre, top + 18, _fit(nic.name, NIC_WIDTH - 8, 13), "name", anchor="middle")
    canvas.text(centre, top + 34, _fit(details, NIC_WIDTH - 8, 11), "small", anchor="middle")
    canvas.add("</g>")


def _link_weight(links: list[GpuLink]) -> dict[tuple[int, int], float]:
    """Each link's share of the strongest, 0..1: bandwidth when every link has one,
    else the number of bonded links."""
    use_bandwidth = all(link.bandwidth_g_bps > 0 for link in links)
    raw = {
        (link.a, link.b): link.bandwidth_g_bps if use_bandwidth else float(link.links or 1)
        for link in links
    }
    strongest = max(raw.values())
    return {pair: value / strongest for pair, value in raw.items()}


def _stroke(weight: float) -> float:
    return 1.2 + 3.8 * weight


def _draw_links(
    canvas: _Canvas, spec: NumatopologySpec, boxes: dict[int, float], gpu_bottom: float
) -> float:
    """Draw the GPU links under the GPU row; return the lowest y drawn."""
    count = len(spec.gpus)
    kinds = {(link.type, link.links) for link in spec.gpu_links}
    if count >= 3 and len(spec.gpu_links) == count * (count - 1) // 2 and len(kinds) == 1:
        # Every pair of GPUs has the same direct link.
        return _draw_switch(canvas, spec, boxes, gpu_bottom)
    weights = _link_weight(spec.gpu_links)
    centre = {index: x + GPU_WIDTH / 2 for index, x in boxes.items()}
    attach = _attach_points(spec.gpu_links, centre)
    lowest = gpu_bottom
    # Longest arcs first, so that short ones (drawn later) stay visible on top.
    for link in sorted(spec.gpu_links, key=lambda x: -abs(centre[x.a] - centre[x.b])):
        xa, xb = attach[(link.a, link.b)], attach[(link.b, link.a)]
        span = abs(centre[link.b] - centre[link.a]) / PITCH
        depth = 28 + 30 * span
        css = "nvlink" if link.type is LinkType.NVLINK else "xgmi"
        canvas.add(
            f'<path class="{css}" stroke-width="{_stroke(weights[(link.a, link.b)]):.1f}" '
            f'd="M{xa:.1f},{gpu_bottom:.1f} C{xa:.1f},{gpu_bottom + depth:.1f} '
            f'{xb:.1f},{gpu_bottom + depth:.1f} {xb:.1f},{gpu_bottom:.1f}"/>'
        )
        apex = gpu_bottom + 0.75 * depth
        canvas.text((xa + xb) / 2, apex + 4, text.link_label(link), "link-label", anchor="middle")
        lowest = max(lowest, apex + 8)
    return lowest


def _attach_points(links: list[GpuLink], centre: dict[int, float]) -> dict[tuple[int, int], float]:
    """x where the arc (gpu, partner) leaves `gpu`: spread over the box bottom, ordered
    by where the partner sits, so arcs leave toward their partner and rarely cross."""
    partners: dict[int, list[int]] = {}
    for link in links:
        partners.setdefault(link.a, []).append(link.b)
        partners.setdefault(link.b, []).append(link.a)
    points = {}
    spread = GPU_WIDTH * 0.6
    for gpu, others in partners.items():
        ordered = sorted(others, key=lambda other: centre[other])
        for rank, other in enumerate(ordered):
            share = 0.5 if len(ordered) == 1 else rank / (len(ordered) - 1)
            points[(gpu, other)] = centre[gpu] - spread / 2 + spread * share
    return points


def _draw_switch(
    canvas: _Canvas, spec: NumatopologySpec, boxes: dict[int, float], gpu_bottom: float
) -> float:
    link = spec.gpu_links[0]
    left = min(boxes.values()) - 8
    right = max(boxes.values()) + GPU_WIDTH + 8
    bar_top = gpu_bottom + ROW_GAP
    stroke = _stroke(1.0)  # every link is as strong as the strongest
    css = "nvlink" if link.type is LinkType.NVLINK else "xgmi"
    for x in boxes.values():
        centre = x + GPU_WIDTH / 2
        canvas.add(
            f'<line class="{css}" stroke-width="{stroke:.1f}" x1="{centre:.1f}" '
            f'y1="{gpu_bottom:.1f}" x2="{centre:.1f}" y2="{bar_top:.1f}"/>'
        )
    name = "NVSwitch" if link.type is LinkType.NVLINK else "xGMI all-to-all"
    per_pair = text.link_label(link)
    if link.bandwidth_g_bps:
        per_pair += f" ({link.bandwidth_g_bps:g} GB/s)"
    label = f"{name} \u00b7 {per_pair} between every pair of GPUs"
    canvas.add(
        f'<rect class="switch" x="{left:.1f}" y="{bar_top:.1f}" width="{right - left:.1f}" '
        f'height="{BAR_HEIGHT}" rx="6"><title>{escape(label)}</title></rect>'
    )
    shown = _fit(label, right - left - 16, 12)
    canvas.text((left + right) / 2, bar_top + 18, shown, "switch-label", anchor="middle")
    return bar_top + BAR_HEIGHT


def _draw_legend(canvas: _Canvas, top: float) -> None:
    x = MARGIN
    canvas.text(x, top, "Legend", "name")
    row = top + 22
    line = f'x1="{x}" y1="{row}" x2="{x + 34}" y2="{row}"/>'
    switch = f'<rect class="switch" x="{x}" y="{row - 7}" width="34" height="14" rx="3"/>'
    items = [
        (f'<line class="nvlink" stroke-width="6" {line}', "NVLink (width \u221d bandwidth)"),
        (switch, "NVSwitch (every GPU to every GPU)"),
        (f'<line class="pix" {line}', "GPU\u2013NIC on one PCIe switch (PIX)"),
        (f'<line class="pxb" {line}', "GPU\u2013NIC across PCIe bridges (PXB)"),
    ]
    column_width = 300
    for i, (swatch, label) in enumerate(items):
        dx, dy = (i % 2) * column_width, (i // 2) * 22
        canvas.add(f'<g transform="translate({dx},{dy})">{swatch}</g>')
        canvas.text(x + 44 + dx, row + 4 + dy, label, "label")
