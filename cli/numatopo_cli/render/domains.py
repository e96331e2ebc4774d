"""`numatopo domains` views: the domain tree as a table and as an SVG picture. Pure.

Both show, per domain (and per node with `nodes=True`), how many nodes and GPUs it has and how many
GPUs are free; the table ends with each level's domain fragmentation (`numatopo_engine.domains`). A
group placement, when given, marks its nodes with the ranks they hold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from numatopo_cli.render.text import Column, align_rows, column_rows
from numatopo_cli.reports.domains import DomainRow
from numatopo_engine.domains import (
    ANYWHERE,
    DomainTree,
    GroupPlacement,
    NodeCandidate,
    describe_domain,
    domain_fragmentation,
)

Path = tuple[str, ...]


def domain_rows(
    tree: DomainTree,
    candidates: Mapping[str, NodeCandidate],
    *,
    nodes: bool,
    placement: GroupPlacement | None = None,
) -> list[DomainRow]:
    """Rows in tree order: each domain (depth 0 for the widest level), then (with `nodes`) its
    nodes (level "node", one below their deepest domain, with the ranks they hold)."""
    ranks = _ranks_by_node(placement)
    rows: list[DomainRow] = []

    def row(depth: int, level: str, name: str, inside: list[str], held: list[int]) -> DomainRow:
        known = [candidates[n] for n in inside if n in candidates]
        gpus = sum(len(c.topology.gpus) for c in known)
        free = sum(c.state.free_gpu_count() for c in known)
        return DomainRow(
            depth=depth, level=level, name=name, nodes=len(inside), gpus=gpus, free=free, ranks=held
        )

    def walk(domain: Path) -> None:
        for child in tree.children.get(domain, []):
            depth = len(child) - 1
            rows.append(row(depth, tree.levels[depth], child[-1], tree.members[depth][child], []))
            walk(child)
        if nodes and domain != ANYWHERE:
            rows.extend(
                row(len(domain), "node", n, [n], ranks.get(n, []))
                for n in tree.direct.get(domain, [])
            )

    walk(ANYWHERE)
    loose = [*tree.direct.get(ANYWHERE, []), *sorted(n for n in candidates if n not in tree.paths)]
    if loose:
        rows.append(row(0, "(no domain)", "-", loose, []))
        if nodes:
            rows.extend(row(1, "node", n, [n], ranks.get(n, [])) for n in loose)
    return rows


COLUMNS: tuple[Column[DomainRow], ...] = (
    ("DOMAIN", lambda row: "  " * row.depth + row.name),
    ("LEVEL", lambda row: row.level),
    ("NODES", lambda row: str(row.nodes)),
    ("GPUS", lambda row: str(row.gpus)),
    ("FREE", lambda row: str(row.free)),
    ("USED", lambda row: f"{100 * (1 - row.free / row.gpus):.0f}%" if row.gpus else "-"),
    ("RANKS", lambda row: _ranks(row.ranks)),
)


def render_table(
    tree: DomainTree,
    candidates: Mapping[str, NodeCandidate],
    *,
    nodes: bool = False,
    placement: GroupPlacement | None = None,
) -> str:
    rows = domain_rows(tree, candidates, nodes=nodes, placement=placement)
    lines = align_rows(column_rows(COLUMNS, rows), right=range(2, 6))
    fragmentation = domain_fragmentation(tree, candidates)
    lines.append("")
    lines += [f"fragmentation {level}: {value:.3f}" for level, value in fragmentation.items()]
    if placement is not None:
        where = describe_domain(placement.level, placement.path)
        lines.append(
            f"group placed in {where}: {len(placement.order)} members on "
            f"{len({a.node for a in placement.assignments.values()})} nodes, "
            f"mean hops between neighbouring ranks {placement.neighbour_hops:.2f}"
        )
    return "\n".join(lines) + "\n"


def _ranks(ranks: Sequence[int]) -> str:
    if not ranks:
        return ""
    if list(ranks) == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(str(r) for r in ranks)


# -- SVG --------------------------------------------------------------------------------

CELL = 26  # a node's square
GAP = 6
PAD = 10
LABEL = 18
MARGIN = 16
MAX_COLUMNS = 16  # nodes per row inside a narrowest domain

STYLE = """
text { font: 11px sans-serif; fill: #222 }
.title { font: bold 14px sans-serif }
.domain { fill: none; stroke: #7a8797; stroke-width: 1.2 }
.node { stroke: #445; stroke-width: 0.8 }
.rank { font: bold 10px sans-serif; fill: #000 }
"""


def _colour(free: int, gpus: int) -> str:
    """White when every GPU is free, dark blue when none is."""
    if gpus == 0:
        return "#eeeeee"
    used = 1 - free / gpus
    shade = int(235 - 170 * used)
    return f"rgb({shade},{shade + 10 if shade < 245 else 255},255)"


@dataclass
class _Box:
    width: float
    height: float
    parts: list[str]


def render_svg(
    tree: DomainTree,
    candidates: Mapping[str, NodeCandidate],
    *,
    placement: GroupPlacement | None = None,
) -> str:
    """Nested boxes, widest level outside; a square per node, darker the more of its
    GPUs are in use, with the ranks of `placement` written on it."""
    ranks = _ranks_by_node(placement)
    unlabelled = sorted(n for n in candidates if n not in tree.paths)

    def cell(node: str, x: float, y: float) -> str:
        candidate, held = candidates.get(node), ranks.get(node)
        gpus = len(candidate.topology.gpus) if candidate else 0
        free = candidate.state.free_gpu_count() if candidate else 0
        parts = [
            f'<rect class="node" x="{x:.0f}" y="{y:.0f}" width="{CELL}" height="{CELL}" '
            f'fill="{_colour(free, gpus)}"><title>{escape(node)}: {free}/{gpus} GPUs free'
            "</title></rect>"
        ]
        if held:
            parts.append(
                f'<text class="rank" x="{x + CELL / 2:.0f}" y="{y + CELL / 2 + 4:.0f}" '
                f'text-anchor="middle">{escape(_ranks(held))}</text>'
            )
        return "".join(parts)

    root = _layout(tree, unlabelled, cell, ANYWHERE, "")
    width = root.width + 2 * MARGIN
    height = root.height + 2 * MARGIN + 30
    heading = f"{len(candidates)} nodes, levels: {' > '.join(tree.levels)}"
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}">'
        f"<style>{STYLE}</style>"
        f'<rect x="0" y="0" width="{width:.0f}" height="{height:.0f}" fill="white"/>'
        f'<text class="title" x="{MARGIN}" y="{MARGIN + 8}">{escape(heading)}</text>'
        f'<g transform="translate({MARGIN},{MARGIN + 24})">{"".join(root.parts)}</g>'
        "</svg>\n"
    )


def _ranks_by_node(placement: GroupPlacement | None) -> dict[str, list[int]]:
    ranks: dict[str, list[int]] = {}
    if placement is not None:
        for rank, key in enumerate(placement.order):
            ranks.setdefault(placement.assignments[key].node, []).append(rank)
    return ranks


def _layout(
    tree: DomainTree,
    unlabelled: list[str],
    cell: Callable[[str, float, float], str],
    domain: Path,
    name: str,
) -> _Box:
    """Domain `domain`'s box: its own nodes in rows, then its children side by side."""
    children = [_layout(tree, unlabelled, cell, c, c[-1]) for c in tree.children.get(domain, [])]
    direct = list(tree.direct.get(domain, []))
    if domain == ANYWHERE:
        direct += unlabelled
    parts: list[str] = []
    top = LABEL if name else 0
    x: float = PAD
    y: float = top + PAD
    row_height, width = 0.0, 0.0
    for index, node in enumerate(direct):
        if index and index % MAX_COLUMNS == 0:
            x, y = PAD, y + CELL + GAP
        parts.append(cell(node, x, y))
        x += CELL + GAP
        width = max(width, x)
        row_height = y + CELL + GAP
    if direct:
        x, y = PAD, row_height
    # Children side by side; wrap when the row gets wider than ~1200 px.
    row_top, row_bottom = y, y
    for child in children:
        if x > PAD and x + child.width > 1200:
            x, row_top = PAD, row_bottom + GAP
        parts.append(f'<g transform="translate({x:.0f},{row_top:.0f})">{"".join(child.parts)}</g>')
        x += child.width + GAP
        width = max(width, x)
        row_bottom = max(row_bottom, row_top + child.height)
    height = max(row_bottom, y) + PAD
    width = max(width + PAD - GAP, 60.0)
    if name:
        parts.insert(
            0,
            f'<rect class="domain" x="0" y="0" width="{width:.0f}" height="{height:.0f}" '
            'rx="6"/>'
            f'<text x="6" y="13">{escape(name)}</text>',
        )
    return _Box(width, height, parts)
