"""`numatopo simulate -o json` (one report per replay kind). The keys are snake_case, as the
replay's JSON had them before it was versioned (docs/operations.md); the fields are the engine's
own result's (a dataclass; its strategies' entries too)."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict
from typing import Any, Literal, get_type_hints

from pydantic import Field, create_model

from numatopo_cli.reports import API_VERSION, Report
from numatopo_engine.simulation.gangs import GangResult
from numatopo_engine.simulation.replay import SimulationResult


class MigPoolReport(Report):
    resource: str
    nodes: int
    devices: int
    pods: int


def _report_of(result: type, kind: str, *, mig_pool: bool = False) -> type[Report]:
    """The report of an engine result: `apiVersion` and `kind`, then every field of the result as
    it is typed there (the one definition), all required; `migPool` (with `mig_pool`) stands
    before the strategies, where it always did."""
    hints = get_type_hints(result)
    fields: dict[str, Any] = {
        "api_version": (str, Field(default=API_VERSION, alias="apiVersion")),
        "kind": (Literal[kind], kind),
    }
    for field in dataclasses.fields(result):
        if mig_pool and field.name == "strategies":
            fields["mig_pool"] = (MigPoolReport | None, Field(alias="migPool"))
        fields[field.name] = (hints[field.name], ...)
    return create_model(kind, __base__=Report, **fields)


SimulationReport = _report_of(SimulationResult, "SimulationReport", mig_pool=True)
GangSimulationReport = _report_of(GangResult, "GangSimulationReport")


def simulation_report(result: SimulationResult, mig_pool: dict[str, object] | None) -> Report:
    top = {k: v for k, v in asdict(result).items() if k != "strategies"}
    # Four decimals: the replay's shares and times carry noise beyond that.
    strategies = [
        {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(s).items()}
        for s in result.strategies
    ]
    return SimulationReport.model_validate({**top, "mig_pool": mig_pool, "strategies": strategies})


def gang_report(result: GangResult) -> Report:
    return GangSimulationReport.model_validate(asdict(result))
