"""`numatopo domains -o json`: the domain tree's rows, fragmentation and a what-if group
(fields: docs/operations.md, "`-o json`")."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from numatopo_cli.reports import API_VERSION, Report


class _Camel(Report):
    model_config = ConfigDict(alias_generator=to_camel)


class DomainRow(_Camel):
    depth: int
    level: str
    name: str
    nodes: int
    gpus: int
    free: int
    ranks: list[int]


class GroupPlacementRow(_Camel):
    domain: str
    members: int
    nodes: int
    neighbour_hops: float


class DomainsReport(_Camel):
    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["DomainsReport"] = "DomainsReport"
    levels: list[str]
    domains: list[DomainRow]
    fragmentation: dict[str, float]
    placement: GroupPlacementRow | None
