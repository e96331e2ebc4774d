"""numatopo's engine: the topology model, cpusets, the annotation contract and allocation.

Everything here is pure: functions take domain values and return new ones. No file,
network or Kubernetes access, no clocks, no global state. The exporter, the operator,
the simulator and the CLI are the callers; they import from this facade.
"""

from numatopo_engine.allocation import Decision, allocate, evaluate, node_score
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
    "node_score",
    "request_from_pod",
    "wants_topology",
]
