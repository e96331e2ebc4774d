"""`numatopo assign -o json`: the assignment, or why the pod does not fit. Unlike the other
reports, a field without a value is left out rather than written as null: that is the shape the
answer had before it was versioned, and readers test for the key."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_serializer

from numatopo_cli.reports import API_VERSION, Report
from numatopo_engine.annotations import Assignment


class AssignReport(Report):
    model_config = ConfigDict(json_schema_serialization_defaults_required=False)

    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["AssignReport"] = "AssignReport"
    fits: bool
    assignment: Assignment | None = None
    score: int | None = None
    reason: str | None = None

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True, indent=2) + "\n"

    @field_serializer("assignment")
    def _annotation(self, assignment: Assignment | None) -> Any:
        # Byte for byte the annotation (no null `sig`), not the model's full dump.
        return None if assignment is None else assignment.to_wire()
