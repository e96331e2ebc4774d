"""`numatopo simulate -o json` (one report per replay kind).

The keys are snake_case, as the replay's JSON had them before it was versioned (readers
of that kept working); `apiVersion`, `kind` and `migPool` are the exceptions. A
strategy's entry is the engine's own result (a dataclass, held to this module's
rules: every field written, no other key).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal

from pydantic import Field

from numatopo_cli.reports import API_VERSION, Report
from numatopo_engine.simulation import SimulationResult
from numatopo_engine.simulation.gangs import GangResult, GangStrategyResult
from numatopo_engine.simulation.metrics import StrategyResult

__all__ = [
    "GangSimulationReport",
    "MigPoolReport",
    "SimulationReport",
    "gang_report",
    "simulation_report",
]


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
    strategies: list[StrategyResult]
    """One per strategy (meanings: `numatopo_engine.simulation.metrics`)."""


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
    strategies: list[GangStrategyResult]
    """One per strategy (meanings: `numatopo_engine.simulation.gangs`)."""


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
