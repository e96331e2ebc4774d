"""`numatopo domains -o json`: the domain tree's rows, fragmentation and a what-if group."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from numatopo_cli.reports import API_VERSION, Report

__all__ = ["DomainRow", "DomainsReport", "GroupPlacementRow"]


class _Camel(Report):
    model_config = ConfigDict(alias_generator=to_camel)


class DomainRow(_Camel):
    depth: int
    """0 for the widest level; a node sits one below its deepest domain."""
    level: str
    """The level's label key; `node` for a node row, `(no domain)` for nodes without one."""
    name: str
    """The domain's label value, or the node's name."""
    nodes: int
    gpus: int
    free: int
    """Free whole GPUs."""
    ranks: list[int]
    """Ranks of the placed group held there (node rows with `--place`)."""


class GroupPlacementRow(_Camel):
    domain: str
    """`level=value`, `under` its wider values."""
    members: int
    nodes: int
    neighbour_hops: float
    """Mean hops between neighbouring ranks."""


class DomainsReport(_Camel):
    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["DomainsReport"] = "DomainsReport"
    levels: list[str]
    """Label keys, widest first."""
    domains: list[DomainRow]
    """In tree order: each domain, then (with `--nodes`) its nodes."""
    fragmentation: dict[str, float]
    """Per level: how scattered its free GPUs are over partly used domains (0: every free
    GPU in a wholly free domain)."""
    placement: GroupPlacementRow | None
    """The `--place` group (null without `--place`)."""
