"""What the exported formats' pydantic models share (pure)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ForeignWire(BaseModel):
    """A part of another project's format: field names as it spells them, no unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ForeignObject(ForeignWire):
    """A whole exported object (apiVersion, kind, metadata, ...)."""

    def to_wire(self) -> dict[str, object]:
        """The JSON-ready dict to apply (aliases; no empty metadata maps, no unset optionals)."""
        wire = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        wire["metadata"] = {k: v for k, v in wire["metadata"].items() if v not in ({}, None)}
        return wire
