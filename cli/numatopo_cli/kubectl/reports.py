"""The `-o json` formats of `kubectl numatopo`: one pydantic model each, the one definition
(its rules and fields: docs/operations.md, "`-o json`")."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from numatopo_cli.reports import CamelReport

API_VERSION = "kubectl.numatopo.io/v1"


class _Report(CamelReport):
    # The plugin's main prints it: no newline of its own.
    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)


class Amount(_Report):
    free: int
    total: int


class NumaRow(_Report):
    """One NUMA node of a node; `numa` None: the devices whose NUMA node is unknown."""

    numa: int | None
    cpus: Amount
    memory_bytes: Amount
    gpus: Amount
    nics: Amount


class NodeRow(_Report):
    node: str
    has_topology: bool
    stale: str = ""
    heartbeat_age_seconds: float | None = None
    gpu_mode: str = ""
    pods: int = 0
    aligned_free_gpus: int = 0
    numa: list[NumaRow] = Field(default_factory=list)


class NodesReport(_Report):
    api_version: str = API_VERSION
    kind: Literal["NodesReport"] = "NodesReport"
    signatures_checked: bool
    nodes: list[NodeRow]


class RefusalGroup(_Report):
    """Nodes that refuse the pod for the same reason."""

    kind: Literal["scheduler", "unresolvable", "unsatisfiable", "invalid"]
    reason: str
    count: int
    nodes: list[str]


class Fit(_Report):
    node: str
    score: int
    rank: float


class GroupSearch(_Report):
    """The domain search of a pod's group (`numatopo_engine.domains.place_group`)."""

    group: str
    members: int
    placed: bool
    domain: str = ""
    nodes: dict[str, int] = Field(default_factory=dict)
    reason: str = ""


class ExplainReport(_Report):
    api_version: str = API_VERSION
    kind: Literal["ExplainReport"] = "ExplainReport"
    pod: str
    node_name: str = ""
    state: str = ""
    reason: str = ""
    wants_topology: bool
    signatures_checked: bool
    nodes: int
    fits: list[Fit]
    refusals: list[RefusalGroup]
    group: GroupSearch | None = None


class BookingRow(_Report):
    pod: str
    node: str
    cpus: int
    exclusive_cpus: str
    gpus: list[int]
    nics: list[str]
    memory_bytes: int


class NamespaceRow(_Report):
    namespace: str
    pods: int
    cpus: int
    gpus: int
    memory_bytes: int


class TopReport(_Report):
    api_version: str = API_VERSION
    kind: Literal["TopReport"] = "TopReport"
    signatures_checked: bool
    nodes: list[NodeRow]
    namespaces: list[NamespaceRow]
    bookings: list[BookingRow]
