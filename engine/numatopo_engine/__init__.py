"""numatopo's engine: the topology model, cpusets, the annotation contract and allocation.

Everything here is pure: functions take domain values and return new ones. No file,
network or Kubernetes access, no clocks, no global state. The exporter, the operator
and the CLI are the callers.
"""

from numatopo_engine.cpuset import CPUSet, CPUSetParseError
from numatopo_engine.errors import (
    InvalidRequestError,
    NumatopoError,
    OverlapError,
    UnsatisfiableError,
)
from numatopo_engine.model import Numatopology, NumatopologySpec
from numatopo_engine.state import NodeState

__all__ = [
    "CPUSet",
    "CPUSetParseError",
    "InvalidRequestError",
    "NodeState",
    "NumatopoError",
    "Numatopology",
    "NumatopologySpec",
    "OverlapError",
    "UnsatisfiableError",
]
