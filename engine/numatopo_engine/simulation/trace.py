"""Rows of an Alibaba `cluster-trace-gpu-v2023` (openb) trace, and the workload replayed.

Node list columns: `sn,cpu_milli,memory_mib,gpu,model`. Pod list columns:
`name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,...`. A pod with
`num_gpu == 1` and `gpu_milli < 1000` shares one GPU with other pods ("fractional"); every other GPU
pod takes `num_gpu` whole GPUs. Rows the replay could only misread are refused (`TraceError`, naming
the line and column): a GPU pod without a GPU share, a share of several GPUs, blank or non-finite
numbers.

`build_workload` follows the FGD simulator's "arrived workload" method, so our curves compare with
its published ones: the pod list is scaled to `tune` x the cluster's GPU capacity (seeded random
pods dropped or copies appended), then shuffled (seeded) or kept in creation-time order. Pods are
never deleted.
"""

from __future__ import annotations

import csv
import enum
import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")

# One whole GPU in the trace's unit; the bytes of its memory unit.
GPU_MILLI = 1000
MIB = 1 << 20

_Row = TypeVar("_Row")


class TraceError(ValueError):
    """A trace row is malformed; the message names the row and the column."""


class Arrival(enum.StrEnum):
    SHUFFLED = "shuffled"  # the FGD simulator's `--shuffle-pod=true`
    CREATION = "creation"  # creation_time order (copies keep their original's time)


@dataclass(frozen=True, slots=True)
class NodeRow:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class PodRow:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()
    creation_time: int = 0

    @property
    def fractional(self) -> bool:
        return self.num_gpu == 1 and 0 < self.gpu_milli < GPU_MILLI

    @property
    def whole_gpus(self) -> int:
        """GPUs this pod holds exclusively (0 for CPU-only and fractional pods)."""
        return 0 if self.fractional or self.gpu_milli <= 0 else self.num_gpu

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli


def _number(row: Mapping[str, str | None], column: str, where: str) -> int:
    text = (row.get(column) or "").strip()
    if not text:
        raise TraceError(f"{where}: column {column!r} is empty")
    try:
        number = float(text)
    except ValueError:
        raise TraceError(f"{where}: column {column!r} is {text!r}, not a number") from None
    if not math.isfinite(number):
        raise TraceError(f"{where}: column {column!r} is {text!r}, not a finite number")
    if number < 0:
        raise TraceError(f"{where}: column {column!r} is negative ({text})")
    return int(number)


def _parsed(
    rows: Iterable[Mapping[str, str | None]],
    source: str,
    needed: Sequence[str],
    parse: Callable[[Mapping[str, str | None], str], _Row],
) -> list[_Row]:
    """`parse(row, where)` of each row, `where` saying where it is (`<source> line N`: a
    `csv.DictReader` knows its line, which blank lines and quoted line breaks move; other rows count
    from line 2); errors start with `source`."""
    out: list[_Row] = []
    reader = rows if isinstance(rows, csv.DictReader) else None
    try:
        for number, row in enumerate(rows, start=2):
            missing = [c for c in needed if c not in row]
            if missing:
                # csv.DictReader files the cells past the header under the key None.
                found = sorted(c for c in row if isinstance(c, str))
                raise TraceError(f"{source}: missing column(s) {', '.join(missing)}; found {found}")
            line = number if reader is None else reader.line_num
            out.append(parse(row, f"{source} line {line}"))
    except csv.Error as exc:
        assert reader is not None  # only a csv reader raises it
        raise TraceError(f"{source} line {reader.line_num}: not CSV ({exc})") from None
    if not out:
        raise TraceError(f"{source}: no rows")
    return out


def parse_node_rows(
    rows: Iterable[Mapping[str, str | None]], *, source: str = "node list"
) -> list[NodeRow]:
    """Node-list rows -> `NodeRow`s, GPU-less nodes kept; errors start with `source`."""

    def node(row: Mapping[str, str | None], where: str) -> NodeRow:
        return NodeRow(
            name=(row.get("sn") or "").strip(),
            cpu_milli=_number(row, "cpu_milli", where),
            memory_mib=_number(row, "memory_mib", where),
            gpus=_number(row, "gpu", where),
            model=(row.get("model") or "").strip(),
        )

    return _parsed(rows, source, NODE_COLUMNS, node)


def _gpu_milli(row: Mapping[str, str | None], num_gpu: int, where: str) -> int:
    """The share of each GPU the pod asks, after refusing what the replay cannot book."""
    if not num_gpu:
        # A CPU-only pod's share is moot (pandas writes the missing value as a blank), but a cell
        # that is there must still be a number.
        if (row.get("gpu_milli") or "").strip():
            _number(row, "gpu_milli", where)
        return 0
    milli = _number(row, "gpu_milli", where)
    if milli > GPU_MILLI:
        raise TraceError(f"{where}: column 'gpu_milli' is {milli}, more than one GPU (1000)")
    if milli == 0:
        raise TraceError(
            f"{where}: column 'gpu_milli' is 0 with num_gpu {num_gpu} (a GPU pod asks 1..1000)"
        )
    if num_gpu > 1 and milli < GPU_MILLI:
        # Booked as whole GPUs it would count as less than it holds; only one GPU is shared.
        raise TraceError(
            f"{where}: column 'gpu_milli' is {milli} with num_gpu {num_gpu}: only a "
            "one-GPU pod may share its GPU (gpu_milli 1000 for several GPUs)"
        )
    return milli


def parse_pod_rows(
    rows: Iterable[Mapping[str, str | None]],
    *,
    source: str = "pod list",
    need_creation_time: bool = False,
) -> list[PodRow]:
    """Pod-list rows -> `PodRow`s in file order. `source` (the file) starts every error message;
    `need_creation_time` refuses a row without one (creation-time arrival)."""
    needed = (*POD_COLUMNS, "creation_time") if need_creation_time else POD_COLUMNS

    def pod(row: Mapping[str, str | None], where: str) -> PodRow:
        num_gpu = _number(row, "num_gpu", where)
        created = (row.get("creation_time") or "").strip()
        spec = (row.get("gpu_spec") or "").strip()
        models = (m.strip() for m in spec.split("|"))
        return PodRow(
            name=(row.get("name") or "").strip(),
            cpu_milli=_number(row, "cpu_milli", where),
            memory_mib=_number(row, "memory_mib", where),
            num_gpu=num_gpu,
            gpu_milli=_gpu_milli(row, num_gpu, where),
            gpu_spec=tuple(m for m in models if m and m != "nan"),
            creation_time=(
                _number(row, "creation_time", where) if created or need_creation_time else 0
            ),
        )

    return _parsed(rows, source, needed, pod)


def sample_nodes(nodes: Sequence[NodeRow], count: int, *, seed: int) -> list[NodeRow]:
    """`count` nodes drawn without replacement (seeded), kept in node-list order."""
    if count >= len(nodes):
        return list(nodes)
    chosen = set(random.Random(seed).sample(range(len(nodes)), count))
    return [node for i, node in enumerate(nodes) if i in chosen]


def build_workload(
    pods: Sequence[PodRow],
    *,
    capacity_gpu_milli: int,
    tune: float,
    seed: int,
    arrival: Arrival = Arrival.SHUFFLED,
) -> list[PodRow]:
    """Scale `pods` to `tune` x capacity of GPU requests (`tune <= 0`: as they are; copies named
    `<name>-tuned-<n>`, as the FGD simulator names them), then order their arrival."""
    rng = random.Random(seed)
    workload = list(pods)
    if tune > 0 and capacity_gpu_milli > 0:
        target = tune * capacity_gpu_milli
        total = sum(p.total_gpu_milli for p in workload)
        while total > target and workload:
            total -= workload.pop(rng.randrange(len(workload))).total_gpu_milli
        copies = 0
        # Pods without GPU requests never move the total, so they alone cannot end the loop.
        asks_gpus = any(p.total_gpu_milli for p in pods)
        while asks_gpus:
            source = pods[rng.randrange(len(pods))]
            if total + source.total_gpu_milli > target:
                break
            total += source.total_gpu_milli
            workload.append(replace(source, name=f"{source.name}-tuned-{copies}"))
            copies += 1
    if arrival is Arrival.SHUFFLED:
        rng.shuffle(workload)
    else:
        workload.sort(key=lambda p: p.creation_time)
    return workload
