"""A self-contained SVG of a cluster (`kubectl numatopo nodes --svg`): one card per node, NUMA by
NUMA, free of total. Where `svg.render_svg` draws one node's hardware, this draws what is free on
every node: per NUMA node a CPU bar (free share filled), one square per GPU (filled: free) and the
NIC count; a stale node's card is hatched grey and says why. Pure: the report in, SVG text out.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

from numatopo_cli.kubectl.reports import NodeRow, NodesReport

CARD_WIDTH = 300
NUMA_ROW = 34
CARD_HEAD = 40
GAP = 16
COLUMNS = 4
GPU_SIDE = 14

STYLE = """
text { font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; fill: #1f2937; font-size: 11px; }
.name { font-size: 13px; font-weight: bold; }
.card { fill: #f9fafb; stroke: #9ca3af; }
.stale { fill: #e5e7eb; stroke: #6b7280; stroke-dasharray: 5 3; }
.bar { fill: #ffffff; stroke: #3b82f6; }
.cpu-free { fill: #93c5fd; }
.gpu-free { fill: #22c55e; stroke: #15803d; }
.gpu-used { fill: #ffffff; stroke: #15803d; }
"""


def _card_height(node: NodeRow) -> int:
    return CARD_HEAD + NUMA_ROW * max(1, len(node.numa)) + 8


def _card(node: NodeRow, x: float, y: float) -> list[str]:
    css = "card" if node.has_topology and not node.stale else "stale"
    parts = [
        f'<rect x="{x}" y="{y}" width="{CARD_WIDTH}" height="{_card_height(node)}" rx="6" '
        f'class="{css}"/>',
        f'<text x="{x + 10}" y="{y + 18}" class="name">{escape(node.node)}</text>',
    ]
    facts = f"{node.pods} pods, {node.aligned_free_gpus} aligned free GPUs"
    if node.gpu_mode:
        facts += f", {node.gpu_mode}"
    if not node.has_topology or node.stale:
        facts = node.stale or "no Numatopology"
    parts.append(f'<text x="{x + 10}" y="{y + 33}">{escape(facts[:52])}</text>')
    for i, numa in enumerate(node.numa):
        top = y + CARD_HEAD + i * NUMA_ROW
        label = "NUMA ?" if numa.numa is None else f"NUMA {numa.numa}"
        parts.append(f'<text x="{x + 10}" y="{top + 14}">{label}</text>')
        if numa.cpus.total:
            share = numa.cpus.free / numa.cpus.total
            parts += [
                f'<rect x="{x + 64}" y="{top + 4}" width="100" height="12" class="bar"/>',
                f'<rect x="{x + 64}" y="{top + 4}" width="{100 * share:.1f}" height="12" '
                'class="cpu-free"/>',
                f'<text x="{x + 64}" y="{top + 28}">CPUs {numa.cpus.free}/{numa.cpus.total}'
                f"  NICs {numa.nics.free}/{numa.nics.total}</text>",
            ]
        for g in range(numa.gpus.total):
            css = "gpu-free" if g < numa.gpus.free else "gpu-used"
            gx = x + 176 + (g % 7) * (GPU_SIDE + 2)
            parts.append(
                f'<rect x="{gx}" y="{top + 4 + (g // 7) * (GPU_SIDE + 2)}" width="{GPU_SIDE}" '
                f'height="{GPU_SIDE}" class="{css}"/>'
            )
    return parts


def render_cluster_svg(report: NodesReport) -> str:
    parts: list[str] = []
    heights: list[int] = []
    for row in range(0, len(report.nodes), COLUMNS):
        nodes = report.nodes[row : row + COLUMNS]
        top = GAP + sum(heights) + GAP * len(heights) + 30
        for column, node in enumerate(nodes):
            parts += _card(node, GAP + column * (CARD_WIDTH + GAP), top)
        heights.append(max(_card_height(node) for node in nodes))
    width = GAP + min(COLUMNS, max(1, len(report.nodes))) * (CARD_WIDTH + GAP)
    height = 30 + GAP + sum(heights) + GAP * (len(heights) + 1)
    title = (
        f"{len(report.nodes)} nodes: free of total per NUMA node "
        "(CPU bar filled: free; GPU square filled: free)"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}"><style>{STYLE}</style>'
        f'<text x="{GAP}" y="{GAP + 12}" class="name">{escape(title)}</text>'
        + "".join(parts)
        + "</svg>\n"
    )
