"""`numatopo simulate`'s core: replay a GPU-cluster trace under several placement strategies.

Pure: the CLI reads the files and passes rows in. Modules:
  trace          trace rows (Alibaba cluster-trace-gpu-v2023 format) and the replayed workload
  layouts        GPU model -> real node layout (NUMA, NVLink) -> `NumatopologySpec`
  cluster        per-node counters shared by every strategy
  fragmentation  FGD-style GPU fragmentation against the workload's requests (numatopo's
                 tie-break for pods the engine does not rank)
  strategies     the strategies compared
  metrics        what is measured; the JSON keys are documented there
  replay         `simulate()`: one fresh cluster per strategy
  mig_pool       `--mig-pool`: some nodes split into MIG devices, small shared pods mapped there
"""

from numatopo_engine.simulation.layouts import (
    TopologyMap,
    TopologyMapError,
    build_node_spec,
    parse_topology_map,
)
from numatopo_engine.simulation.metrics import StrategyResult
from numatopo_engine.simulation.replay import SimulationResult, simulate
from numatopo_engine.simulation.strategies import STRATEGIES
from numatopo_engine.simulation.trace import (
    Arrival,
    NodeRow,
    PodRow,
    TraceError,
    build_workload,
    parse_node_rows,
    parse_pod_rows,
    sample_nodes,
)

__all__ = [
    "STRATEGIES",
    "Arrival",
    "NodeRow",
    "PodRow",
    "SimulationResult",
    "StrategyResult",
    "TopologyMap",
    "TopologyMapError",
    "TraceError",
    "build_node_spec",
    "build_workload",
    "parse_node_rows",
    "parse_pod_rows",
    "parse_topology_map",
    "sample_nodes",
    "simulate",
]
