"""The `-o json` formats of the `numatopo` commands: one pydantic model each, the one definition
(the kubectl plugin's are in `numatopo_cli.kubectl.reports`). Their rules (stable, every field
written, null where it has no value) and fields: docs/operations.md ("`-o json`"), held together
by a test."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["API_VERSION", "CamelReport", "Report"]

API_VERSION = "cli.numatopo.io/v1"


class Report(BaseModel):
    # extra="forbid": a key the model does not know is refused, so nothing reaches the output
    # around the model. The serialization schema lists fields with defaults as required too:
    # every field is always written.
    model_config = ConfigDict(
        populate_by_name=True,
        frozen=True,
        extra="forbid",
        json_schema_serialization_defaults_required=True,
    )

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2) + "\n"


class CamelReport(Report):
    """A report whose keys are camelCase."""

    model_config = ConfigDict(alias_generator=to_camel)
