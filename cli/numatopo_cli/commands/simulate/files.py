"""What `numatopo simulate` (both replays) and `numatopo domains` read and write: the node
list, trace and topology map (the shipped samples by default), Numatopology files, and
the figure."""

from __future__ import annotations

import csv
import importlib.util
import json
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from numatopo_engine.model import Numatopology, NumatopologySpec
from numatopo_engine.simulation import NodeRow, parse_node_rows, parse_topology_map
from numatopo_engine.simulation.leafspine import NodeShapeWeight, shapes_from_rows

__all__ = [
    "DEFAULT_MAP",
    "DEFAULT_NODES",
    "DEFAULT_TRACE",
    "InputError",
    "check_plot_target",
    "csv_rows",
    "default_shapes",
    "open_text",
    "read_topology_dir",
    "save_figure",
]

SAMPLES = "numatopo_cli.samples.simulate"
DEFAULT_NODES = "openb_node_list_gpu_node.csv"
DEFAULT_TRACE = "openb_pod_list_default.csv"
DEFAULT_MAP = "topology-map.json"


class InputError(Exception):
    """Bad input the user can fix; printed without a traceback."""


def open_text(path: Path | None, sample: str) -> str:
    if path is None:
        return resources.files(SAMPLES).joinpath(sample).read_text(encoding="utf-8")
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(text.splitlines()))


def default_shapes(gpus: int = 8) -> list[NodeShapeWeight]:
    """The node shapes with `gpus` GPUs of the shipped node list, laid out by the
    shipped topology map, weighed by their node counts (multi-node clusters)."""
    rows = parse_node_rows(csv_rows(open_text(None, DEFAULT_NODES)))
    topology_map = parse_topology_map(json.loads(open_text(None, DEFAULT_MAP)))
    return shapes_from_rows(rows, topology_map, gpus=gpus)


def read_topology_dir(directory: Path) -> tuple[list[NodeRow], dict[str, NumatopologySpec]]:
    """Numatopology JSON files (what `numatopo inspect -o json` prints), one node each."""
    files = sorted(directory.glob("*.json")) if directory.is_dir() else []
    if not files:
        raise InputError(f"--topology-dir {directory}: no *.json files there")
    rows: list[NodeRow] = []
    specs: dict[str, NumatopologySpec] = {}
    for path in files:
        try:
            obj = Numatopology.model_validate(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, ValidationError) as exc:
            first = str(exc).splitlines()[0]
            raise InputError(f"{path}: not a Numatopology object ({first})") from None
        spec = obj.spec
        rows.append(
            NodeRow(
                name=obj.metadata.name,
                cpu_milli=spec.capacity.cpus * 1000,
                memory_mib=spec.capacity.memory_bytes >> 20,
                gpus=len(spec.gpus),
                model=spec.gpus[0].model if spec.gpus else "",
            )
        )
        specs[obj.metadata.name] = spec
    return rows, specs


def check_plot_target(path: Path) -> None:
    """Fail before a minute of replay, not after it, when the plot cannot be written."""
    if importlib.util.find_spec("matplotlib") is None:
        raise InputError("--plot needs matplotlib: pip install 'numatopo[plot]' (or drop --plot)")
    if not path.parent.is_dir():
        raise InputError(f"--plot: directory {path.parent} does not exist")


def save_figure(fig: Any, path: Path) -> None:
    """Write a simulate plot and free it; a path that cannot be written is InputError."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise InputError(f"--plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
