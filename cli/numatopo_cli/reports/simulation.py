"""`numatopo simulate -o json` (one report per replay kind).

The keys are snake_case, as the replay's JSON had them before it was versioned (readers
of that kept working); `apiVersion`, `kind` and `migPool` are the exceptions.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal

from pydantic import Field

from numatopo_cli.reports import API_VERSION, Report
from numatopo_engine.simulation import SimulationResult
from numatopo_engine.simulation.gangs import GangResult

__all__ = [
    "GangSimulationReport",
    "GangStrategyReport",
    "MigPoolReport",
    "SimulationReport",
    "StrategyReport",
    "gang_report",
    "simulation_report",
]


class StrategyReport(Report):
    """One strategy's replay (meanings: `numatopo_engine.simulation.metrics`)."""

    strategy: str
    pods: int
    placed: int
    failed: int
    admission_failures: int
    first_failure_arrived_pct: float | None
    alloc_pct_at_first_failure: float
    alloc_pct_final: float
    whole_gpu_pods: int
    multi_gpu_pods: int
    fractional_gpu_pods: int
    single_numa_share: float | None
    alignable_multi_gpu_pods: int
    alignable_single_numa_share: float | None
    best_bandwidth_share: float | None
    mean_link_gbps: float | None
    cpu_gpu_colocated_share: float | None
    decision_ms_mean: float
    decision_ms_p99: float
    curve: list[list[float]]


class MigPoolReport(Report):
    resource: str
    nodes: int
    devices: int
    pods: int


class SimulationReport(Report):
    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["SimulationReport"] = "SimulationReport"
    nodes: int
    gpus: int
    pods: int
    fractional_pods: int
    cpu_only_pods: int
    multi_gpu_pods: int
    seed: int
    mig_pool: MigPoolReport | None = Field(alias="migPool")
    strategies: list[StrategyReport]


class GangStrategyReport(Report):
    """One strategy's multi-node replay (meanings: `numatopo_engine.simulation.gangs`)."""

    strategy: str
    jobs: int
    placed: int
    waiting: int
    multi_node_jobs: int
    multi_node_placed: int
    mean_wait: float
    multi_node_mean_wait: float
    one_leaf_share: float | None
    required_domain_share: float | None
    mean_neighbour_hops: float | None
    leaf_fragmentation: float
    place_ms_mean: float
    place_ms_p99: float
    preferred_domain_share: float | None
    kept_share: float | None


class GangSimulationReport(Report):
    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["GangSimulationReport"] = "GangSimulationReport"
    nodes: int
    gpus: int
    levels: list[str]
    jobs: int
    sizes: str
    load: float
    seed: int
    size_histogram: dict[int, int]
    """GPUs per job -> jobs of that size (keys are strings in JSON)."""
    too_big: int
    strategies: list[GangStrategyReport]


def _rounded(fields: dict[str, Any]) -> dict[str, Any]:
    # Four decimals: the replay's shares and times carry noise beyond that.
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in fields.items()}


def simulation_report(
    result: SimulationResult, mig_pool: dict[str, object] | None
) -> SimulationReport:
    top = {k: v for k, v in asdict(result).items() if k != "strategies"}
    return SimulationReport.model_validate(
        {
            **top,
            "mig_pool": mig_pool,
            "strategies": [_rounded(asdict(s)) for s in result.strategies],
        }
    )


def gang_report(result: GangResult) -> GangSimulationReport:
    return GangSimulationReport.model_validate(asdict(result))
