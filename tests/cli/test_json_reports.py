"""Every `-o json` is a documented model: the real commands' output validates against the
model's JSON schema (every field present, nothing the model does not define), and
docs/operations.md ("`-o json`") lists exactly the model's fields, so a field that
disappears from the model, or appears without a word in the docs, fails here."""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel

from numatopo_cli.kubectl.reports import ExplainReport, NodesReport, TopReport
from numatopo_cli.reports import Report
from numatopo_cli.reports.assign import AssignReport
from numatopo_cli.reports.domains import DomainsReport
from numatopo_cli.reports.simulation import GangSimulationReport, SimulationReport

from .conftest import Run

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "operations.md"
DGX1 = REPO / "tests" / "fixtures" / "topologies" / "dgx1-v100.json"
POD = REPO / "tests" / "fixtures" / "pods" / "nvlink-4gpu-required.yaml"

# In the order the docs list them: a model documented under an earlier report is
# referred to ("as in NodesReport"), not listed again.
REPORTS: tuple[type[Report], ...] = (
    AssignReport,
    SimulationReport,
    GangSimulationReport,
    DomainsReport,
    NodesReport,
    ExplainReport,
    TopReport,
)


def _models_in(annotation: Any) -> tuple[bool, type | None]:
    """(is a list, the report model or dataclass inside) of a field's annotation."""
    origin = typing.get_origin(annotation)
    if origin is list:
        _, model = _models_in(typing.get_args(annotation)[0])
        return True, model
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            many, model = _models_in(arg)
            if model is not None:
                return many, model
        return False, None
    if isinstance(annotation, type) and (
        issubclass(annotation, Report) or dataclasses.is_dataclass(annotation)
    ):
        return False, annotation
    return False, None


def _fields(model: type) -> dict[str, Any]:
    """A report model's or dataclass's fields: JSON name -> annotation."""
    if dataclasses.is_dataclass(model):
        return typing.get_type_hints(model)
    assert issubclass(model, BaseModel)
    return {field.alias or name: field.annotation for name, field in model.model_fields.items()}


def field_paths(model: type, seen: set[type], prefix: str = "") -> set[str]:
    """`a`, `a[]`, `a[].b`, `a.b`: every field of `model` by its JSON name, descending
    into the report models (and the engine's dataclasses) not already listed under an
    earlier report."""
    paths: set[str] = set()
    seen.add(model)
    for name, annotation in _fields(model).items():
        key = prefix + name
        many, inner = _models_in(annotation)
        paths.add(key + "[]" if many and inner is not None else key)
        if inner is not None and inner not in seen:
            paths |= field_paths(inner, seen, key + ("[]." if many else "."))
    return paths


def documented() -> dict[str, set[str]]:
    """Per `### Kind` heading of the `-o json` section, the fields its table lists."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## `-o json`: what every command prints", 1)[1].split("\n## ", 1)[0]
    tables: dict[str, set[str]] = {}
    for part in section.split("\n### ")[1:]:
        title, _, body = part.partition("\n")
        tables[title.strip()] = set(re.findall(r"^\| `([^`]+)` \|", body, flags=re.MULTILINE))
    return tables


def test_the_docs_list_exactly_each_models_fields() -> None:
    tables = documented()
    seen: set[type] = set()
    expected = {report.__name__: field_paths(report, seen) for report in REPORTS}
    assert sorted(tables) == sorted(expected)
    for kind, paths in expected.items():
        assert (kind, sorted(tables[kind] - paths), sorted(paths - tables[kind])) == (kind, [], [])


def matches_schema(out: str, model: type[Report]) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(out)
    schema = model.model_json_schema(mode="serialization", by_alias=True)
    jsonschema.Draft202012Validator(schema).validate(document)
    return document


def test_a_missing_field_fails_the_schema() -> None:
    """What the checks below rely on: a key the model writes is required by its schema."""
    report = DomainsReport(levels=["a"], domains=[], fragmentation={}, placement=None)
    document = json.loads(report.to_json())
    del document["placement"]
    with pytest.raises(jsonschema.ValidationError, match="'placement' is a required property"):
        matches_schema(json.dumps(document), DomainsReport)


def test_simulate(run: Run) -> None:
    code, out, _ = run(
        ["simulate", "--sample-nodes", "60", "--limit", "100", "--scorer", "numatopo,best-fit",
        "--mig-pool", "0.5:3g.40gb", "-o", "json"]
    )  # fmt: skip
    document = matches_schema(out, SimulationReport)
    assert (code, document["kind"], document["apiVersion"]) == (
        0, "SimulationReport", "cli.numatopo.io/v1",
    )  # fmt: skip
    assert [s["strategy"] for s in document["strategies"]] == ["numatopo", "best-fit"]
    assert document["migPool"]["resource"].startswith("nvidia.com/mig-")


def test_simulate_multi_node(run: Run) -> None:
    code, out, _ = run(
        ["simulate", "--multi-node", "--layout", "1x2x2x4", "--jobs", "30", "--preferred",
        "leaf", "-o", "json"]
    )  # fmt: skip
    document = matches_schema(out, GangSimulationReport)
    assert (code, document["kind"], document["nodes"]) == (0, "GangSimulationReport", 16)
    assert sum(document["size_histogram"].values()) == document["jobs"]


@pytest.mark.parametrize("place", [[], ["--place", "3", "--gpus", "8"]])
def test_domains(run: Run, place: list[str]) -> None:
    code, out, _ = run(["domains", "--generate", "1x2x2x2", "--nodes", *place, "-o", "json"])
    document = matches_schema(out, DomainsReport)
    assert (code, document["kind"]) == (0, "DomainsReport")
    assert (document["placement"] is None) == (not place)
    assert {row["level"] for row in document["domains"]} == {*document["levels"], "node"}


@pytest.mark.parametrize("allocated", [False, True])
def test_assign(run: Run, tmp_path: Path, allocated: bool) -> None:
    """Fits (assignment and score, no reason) and does not fit (reason only)."""
    extra: list[str | Path] = []
    if allocated:
        full = {"node": "dgx1-v100", "containers": {"c": {"gpuIndices": list(range(8))}}}
        (tmp_path / "a.json").write_text(json.dumps([full]))
        extra = ["--allocated", tmp_path / "a.json"]
    code, out, _ = run(["assign", "--topology", DGX1, "--pod", POD, *extra])
    document = matches_schema(out, AssignReport)
    keys = {"assignment", "score", "reason"} & set(document)
    assert (code, keys) == ((1, {"reason"}) if allocated else (0, {"assignment", "score"}))
