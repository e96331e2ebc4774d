"""`numatopo domains -o json`: the domain tree's rows, fragmentation and a what-if group
(fields: docs/operations.md, "`-o json`")."""

from __future__ import annotations

from typing import Literal

from numatopo_cli.reports import API_VERSION, CamelReport


class DomainRow(CamelReport):
    depth: int
    level: str
    name: str
    nodes: int
    gpus: int
    free: int
    ranks: list[int]


class GroupPlacementRow(CamelReport):
    domain: str
    members: int
    nodes: int
    neighbour_hops: float


class DomainsReport(CamelReport):
    api_version: str = API_VERSION
    kind: Literal["DomainsReport"] = "DomainsReport"
    levels: list[str]
    domains: list[DomainRow]
    fragmentation: dict[str, float]
    placement: GroupPlacementRow | None
