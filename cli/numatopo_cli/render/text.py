"""Short texts for table cells and diagram labels, shared by every view. Pure."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from numatopo_engine.model import Gpu, GpuLink, LinkType, Nic, NumatopologySpec

UNKNOWN = "-"

T = TypeVar("T")
Column = tuple[str, Callable[[T], str]]
"""A table column: its header, and its cell for one item."""

_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(size_bytes: int) -> str:
    """`1081172697088` -> `1007 GiB` (at most three significant digits: a summary, not an
    inventory); 0 (not reported) -> `-`."""
    if size_bytes <= 0:
        return UNKNOWN
    value = float(size_bytes)
    unit = 0
    while value >= 1024 and unit < len(_BINARY_UNITS) - 1:
        value /= 1024
        unit += 1
    if value >= 100 or unit == 0:
        return f"{value:.0f} {_BINARY_UNITS[unit]}"
    return f"{value:.3g} {_BINARY_UNITS[unit]}"


def format_hugepages(hugepages: dict[str, int]) -> str:
    """`{"2Mi": 1024, "1Gi": 0}` -> `2Mi:1024`: page size and count, only sizes in use."""
    used = [
        f"{size}:{count}" for size, count in sorted(hugepages.items(), key=_page_order) if count
    ]
    return ",".join(used) or UNKNOWN


def _page_order(item: tuple[str, int]) -> tuple[int, str]:
    size = item[0]
    scale = {"Ki": 1, "Mi": 2, "Gi": 3}.get(size[-2:], 0)
    digits = size[:-2]
    return (scale * 10_000 + (int(digits) if digits.isdigit() else 0), size)


def percent(share: float | None) -> str:
    """`0.4567` -> `45.7%`; None (nothing to share out) -> `-`."""
    return UNKNOWN if share is None else f"{100 * share:.1f}%"


def count(number: int, noun: str) -> str:
    """`count(1, "NIC")` -> `1 NIC`, `count(8, "GPU")` -> `8 GPUs`."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def format_ids(ids: Iterable[int | str]) -> str:
    """`[0, 1, 2]` -> `0,1,2`; nothing -> `-`."""
    return ",".join(str(x) for x in ids) or UNKNOWN


def link_label(link: GpuLink) -> str:
    """A direct GPU link as `nvidia-smi topo -m` prints it: `NV18`; xGMI as `XGMI`."""
    if link.type is LinkType.NVLINK:
        return f"NV{link.links}" if link.links else "NV"
    return "XGMI"


def short_model(gpu: Gpu) -> str:
    """`NVIDIA H100 80GB HBM3` -> `H100 80GB HBM3`: the vendor is said elsewhere."""
    model = gpu.model.strip()
    for prefix in ("NVIDIA ", "Tesla ", "AMD "):
        model = model.removeprefix(prefix)
    return model


def short_pci(device: Gpu | Nic) -> str:
    """`00000000:18:00.0` -> `18:00.0`: the domain is almost always 0 and only adds noise."""
    bus_id = device.pci_bus_id
    parts = bus_id.split(":")
    if len(parts) == 3 and not parts[0].strip("0"):
        return ":".join(parts[1:]).lower()
    return bus_id.lower()


def numa_ids(spec: NumatopologySpec) -> list[int]:
    """Every NUMA id the spec mentions: its nodes, then those only devices name. Sorted."""
    ids = {node.id for node in spec.numa_nodes}
    ids |= {gpu.numa for gpu in spec.gpus if gpu.numa is not None}
    ids |= {nic.numa for nic in spec.nics if nic.numa is not None}
    return sorted(ids)


def align_rows(
    rows: Sequence[Sequence[str]],
    *,
    right: Iterable[int] = (),
    style: Callable[[int, int, str], str] | None = None,
) -> list[str]:
    """Pad cells into columns two spaces apart (left-aligned but the indices in `right`).
    `style(row, column, text)` may colour a cell; widths are measured on the plain text."""
    right_columns = set(right)
    widths = [0] * max(len(row) for row in rows)
    for row in rows:
        for column, cell in enumerate(row):
            widths[column] = max(widths[column], len(cell))
    lines = []
    for row_index, row in enumerate(rows):
        cells = []
        for column, cell in enumerate(row):
            padding = " " * (widths[column] - len(cell))
            shown = style(row_index, column, cell) if style else cell
            cells.append(padding + shown if column in right_columns else shown + padding)
        lines.append("  ".join(cells).rstrip())
    return lines


def column_rows(columns: Sequence[Column[T]], items: Iterable[T]) -> list[list[str]]:
    """The header row of `columns`, then one row of their cells per item (for `align_rows`)."""
    return [[name for name, _ in columns], *([cell(item) for _, cell in columns] for item in items)]


def paint(text: str, code: str, *, color: bool) -> str:
    """Wrap `text` in an SGR colour `code` (e.g. "32" for green) when `color` is on."""
    return f"\x1b[{code}m{text}\x1b[0m" if color and text else text
