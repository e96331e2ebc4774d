"""What `numatopo simulate` (both replays) and `numatopo domains` read and write: the node list,
trace and topology map (the shipped samples by default), Numatopology files, and the figure; and
the steps both replays take alike (`--scorer`, a run with its plot)."""

from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import json
import sys
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from numatopo_engine.model import Numatopology, NumatopologySpec
from numatopo_engine.simulation.layouts import TopologyMap, parse_topology_map
from numatopo_engine.simulation.leafspine import NodeShapeWeight, shapes_from_rows
from numatopo_engine.simulation.trace import NodeRow, parse_node_rows

SAMPLES = "numatopo_cli.samples.simulate"
DEFAULT_NODES = "openb_node_list_gpu_node.csv"
DEFAULT_TRACE = "openb_pod_list_default.csv"
DEFAULT_MAP = "topology-map.json"

Result = TypeVar("Result")


class InputError(Exception):
    """Bad input the user can fix; printed without a traceback."""


def whole_number(text: str) -> int:
    """An argparse type: 0, 1, 2, ..."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def open_text(path: Path | None, sample: str) -> str:
    if path is None:
        return resources.files(SAMPLES).joinpath(sample).read_text(encoding="utf-8")
    try:
        # utf-8-sig: spreadsheet exports start with a byte-order mark, which is no column name.
        return path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def csv_rows(path: Path | None, sample: str) -> tuple[csv.DictReader[str], str]:
    """The rows of a CSV file (`path`, else the shipped `sample`), read as they are parsed (so
    errors name their line), under header names without surrounding blanks; and the file's
    name for errors."""
    # newline="": line breaks inside quoted fields stay in the field, and CRLF is one break.
    rows = csv.DictReader(io.StringIO(open_text(path, sample), newline=""))
    if rows.fieldnames is not None:
        rows.fieldnames = [name.strip() for name in rows.fieldnames]
    return rows, str(path) if path is not None else sample


def read_nodes(path: Path | None) -> list[NodeRow]:
    """The node list CSV (`--nodes`; the shipped one when None)."""
    rows, source = csv_rows(path, DEFAULT_NODES)
    return parse_node_rows(rows, source=source)


def read_topology_map(path: Path | None) -> TopologyMap:
    """The topology map JSON (`--topology-map`; the shipped one when None)."""
    try:
        raw: Any = json.loads(open_text(path, DEFAULT_MAP))
    except json.JSONDecodeError as exc:
        raise InputError(f"--topology-map: not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise InputError("--topology-map: expected a JSON object")
    return parse_topology_map(raw)


def node_shapes(
    nodes: Path | None = None, topology_map: Path | None = None, *, gpus: int = 8
) -> list[NodeShapeWeight]:
    """The node shapes with `gpus` GPUs of the node list, laid out by the topology map
    (the shipped ones by default), weighed by their node counts (multi-node clusters)."""
    rows, layouts = read_nodes(nodes), read_topology_map(topology_map)
    try:
        return shapes_from_rows(rows, layouts, gpus=gpus)
    except ValueError as exc:
        raise InputError(f"--nodes: {exc}") from None


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


def pyplot() -> Any:
    """matplotlib's pyplot, drawing off-screen. Imported when asked: matplotlib is
    optional (the `plot` extra) and slow to import."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> None:
    """Write a simulate plot and free it; a path that cannot be written is InputError."""
    plt = pyplot()
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise InputError(f"--plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def strategy_names(
    values: Sequence[str] | None, known: Sequence[str], *, hint: str = ""
) -> list[str]:
    """`--scorer` (repeatable, comma-separated) as names in the order first given; every
    one of `known` when none is given."""
    if not values:
        return list(known)
    names = [part.strip() for value in values for part in value.split(",")]
    for name in names:
        if name not in known:
            raise InputError(f"--scorer {name!r}: {hint}choose from {', '.join(known)}")
    return list(dict.fromkeys(names))


def run_replay(
    args: argparse.Namespace,
    replay: Callable[[argparse.Namespace], Result],
    plot: Callable[[Result, Path], None],
    errors: tuple[type[Exception], ...],
    show: Callable[[Result], str],
) -> int:
    """`replay(args)`, its figure with `--plot` (whose target is checked first) and `show(result)`
    on stdout: exit status 0; 2 once `errors` (input the user can fix) are printed."""
    try:
        # Fail before a minute of replay, not after it, when the plot cannot be written.
        if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
            raise InputError(
                "--plot needs matplotlib: pip install 'numatopo[plot]' (or drop --plot)"
            )
        if args.plot is not None and not args.plot.parent.is_dir():
            raise InputError(f"--plot: directory {args.plot.parent} does not exist")
        result = replay(args)
        if args.plot is not None:
            plot(result, args.plot)
    except errors as exc:
        print(f"numatopo simulate: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(show(result))
    return 0
