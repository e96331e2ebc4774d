"""numatopo's engine: the topology model, cpusets, the annotation contract and allocation.

Everything here is pure: functions take domain values and return new ones. No file, network or
Kubernetes access, no clocks, no global state. The exporter, the operator, the simulator and the CLI
are the callers; they import from this facade.

Allocation (and numpy under it) loads on first use: the node agent reads annotations, models and
cpusets from here and never decides, and numpy alone is ~13 MiB of its memory budget
(`benchmarks/bench_agent_memory.py`).
"""

import typing

from numatopo_engine.annotations import Assignment, ContainerAssignment, PolicyName, State
from numatopo_engine.cpuset import CPUSet, CPUSetParseError
from numatopo_engine.errors import (
    InvalidRequestError,
    NumatopoError,
    OverlapError,
    UnsatisfiableError,
)
from numatopo_engine.model import Numatopology, NumatopologySpec
from numatopo_engine.pod_request import request_from_pod, wants_topology
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.resources import DEFAULT_RESOURCES, ResourceNames
from numatopo_engine.state import NodeState

if typing.TYPE_CHECKING:
    from numatopo_engine.allocation import Decision, allocate, evaluate

_ALLOCATION = frozenset({"Decision", "allocate", "evaluate"})


def __getattr__(name: str) -> typing.Any:
    if name in _ALLOCATION:
        from numatopo_engine import allocation  # loaded on first use

        return getattr(allocation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_ALLOCATION})


__all__ = [
    "DEFAULT_RESOURCES",
    "Assignment",
    "CPUSet",
    "CPUSetParseError",
    "ContainerAssignment",
    "ContainerRequest",
    "Decision",
    "InvalidRequestError",
    "NodeState",
    "NumatopoError",
    "Numatopology",
    "NumatopologySpec",
    "OverlapError",
    "PodRequest",
    "PolicyName",
    "ResourceNames",
    "State",
    "TopologyOptions",
    "UnsatisfiableError",
    "allocate",
    "evaluate",
    "request_from_pod",
    "wants_topology",
]
