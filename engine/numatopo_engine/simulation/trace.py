"""Rows of an Alibaba `cluster-trace-gpu-v2023` (openb) trace, and the workload replayed.

Node list columns: `sn,cpu_milli,memory_mib,gpu,model`. Pod list columns:
`name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,...`.
A pod with `num_gpu == 1` and `gpu_milli < 1000` shares one GPU with other pods
("fractional"); every other GPU pod takes `num_gpu` whole GPUs.

`build_workload` follows the FGD simulator's "arrived workload" method, so our
allocation curves compare with its published ones: the pod list is scaled to
`tune` x the cluster's GPU capacity (random pods dropped, or random copies of pods
appended, seeded), then the arrival order is shuffled (seeded) or kept in
creation-time order. Pods are never deleted: they keep arriving until the end.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")

# One whole GPU in the trace's unit.
GPU_MILLI = 1000


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


def _int(row: Mapping[str, str], column: str, where: str) -> int:
    text = (row.get(column) or "").strip()
    try:
        value = int(float(text))
    except ValueError:
        raise TraceError(f"{where}: column {column!r} is {text!r}, not a number") from None
    if value < 0:
        raise TraceError(f"{where}: column {column!r} is negative ({value})")
    return value


def _check_columns(row: Mapping[str, str], needed: Sequence[str], what: str) -> None:
    missing = [c for c in needed if c not in row]
    if missing:
        raise TraceError(f"{what}: missing column(s) {', '.join(missing)}; found {sorted(row)}")


def parse_node_rows(rows: Iterable[Mapping[str, str]]) -> list[NodeRow]:
    """Node-list rows -> `NodeRow`s; nodes without GPUs are kept (CPU-only pods use them)."""
    out: list[NodeRow] = []
    for number, row in enumerate(rows, start=2):
        _check_columns(row, NODE_COLUMNS, "node list")
        where = f"node list line {number}"
        out.append(
            NodeRow(
                name=row["sn"].strip(),
                cpu_milli=_int(row, "cpu_milli", where),
                memory_mib=_int(row, "memory_mib", where),
                gpus=_int(row, "gpu", where),
                model=(row.get("model") or "").strip(),
            )
        )
    if not out:
        raise TraceError("node list: no rows")
    return out


def parse_pod_rows(rows: Iterable[Mapping[str, str]]) -> list[PodRow]:
    """Pod-list rows -> `PodRow`s in file order."""
    out: list[PodRow] = []
    for number, row in enumerate(rows, start=2):
        _check_columns(row, POD_COLUMNS, "pod list")
        where = f"pod list line {number}"
        num_gpu = _int(row, "num_gpu", where)
        gpu_milli = _int(row, "gpu_milli", where)
        if gpu_milli > GPU_MILLI:
            raise TraceError(f"{where}: gpu_milli {gpu_milli} is more than one GPU (1000)")
        spec = (row.get("gpu_spec") or "").strip()
        created = (row.get("creation_time") or "").strip()
        out.append(
            PodRow(
                name=row["name"].strip(),
                cpu_milli=_int(row, "cpu_milli", where),
                memory_mib=_int(row, "memory_mib", where),
                num_gpu=num_gpu,
                gpu_milli=gpu_milli if num_gpu else 0,
                gpu_spec=tuple(s for s in spec.split("|") if s and s != "nan"),
                creation_time=_int(row, "creation_time", where) if created else 0,
            )
        )
    if not out:
        raise TraceError("pod list: no rows")
    return out


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
    """Scale `pods` to `tune` x capacity of GPU requests, then order their arrival.

    `tune <= 0` keeps the pod list as it is. Appended copies are named
    `<name>-tuned-<n>`, as the FGD simulator names them.
    """
    rng = random.Random(seed)
    workload = list(pods)
    if tune > 0 and capacity_gpu_milli > 0:
        target = tune * capacity_gpu_milli
        total = sum(p.total_gpu_milli for p in workload)
        while total > target and workload:
            total -= workload.pop(rng.randrange(len(workload))).total_gpu_milli
        copies = 0
        # Pods without GPU requests never move the total: they alone cannot end the loop
        # (asked once: `pods` does not change).
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
