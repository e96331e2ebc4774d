"""`GroupState`: the group worker's long-lived parts, one field of `Runtime` (pure).
Handlers only record changes (`dirty`, then `kick`); the one worker task
(`group_worker.run_groups`) works one group at a time, so two groups are never planned
against the same free GPUs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from numatopo_engine.network_topology import NetworkTopologySpec
from numatopo_operator.groups.indexes import NodeView
from numatopo_operator.groups.members import GroupBook
from numatopo_operator.retrying import RetryQueue


@dataclass
class GroupState:
    retry_base_seconds: float
    retry_max_seconds: float
    book: GroupBook = field(default_factory=GroupBook)
    retries: RetryQueue[dict[str, object]] = field(init=False)
    """Groups to look at again later (no room yet, a failed write)."""
    dirty: set[str] = field(default_factory=set)
    """Groups whose members changed since the worker last looked."""
    waiting_for_room: set[str] = field(default_factory=set)
    """Groups that did not fit: looked at again whenever capacity is freed or added."""
    kick: asyncio.Event = field(default_factory=asyncio.Event)
    nodes: Mapping[str, Iterable[NodeView]] | None = None
    """The live Node views (`cluster_feed`); None until its first list of Nodes is in."""
    topologies: Mapping[str, Iterable[NetworkTopologySpec]] | None = None
    """kopf's live index of NetworkTopology specs."""
    said: set[str] = field(default_factory=set)
    """Events already posted (`<pod key> <reason> <message>`), so each is posted once."""
    complete_since: dict[str, float] = field(default_factory=dict)
    """group -> `time.monotonic()` when it first had its whole membership."""
    first_seen: dict[str, float] = field(default_factory=dict)
    """pod key -> `time.monotonic()` when the worker first saw it gated (recovery time)."""
    plans: dict[str, tuple[str, str]] = field(default_factory=dict)
    """pod key -> (node, placement text) of plans this process wrote (the watch may lag)."""

    def __post_init__(self) -> None:
        self.retries = RetryQueue(self.retry_base_seconds, self.retry_max_seconds)

    def attach(self, indexes: Mapping[str, Any]) -> None:
        """Keep the live indexes: kopf's (handlers' keyword arguments), `cluster_feed`'s."""
        if self.nodes is None and "node_views" in indexes:
            self.nodes = indexes["node_views"]
        if self.topologies is None and "network_topologies" in indexes:
            self.topologies = indexes["network_topologies"]

    def touch(self, groups: Iterable[str]) -> None:
        found = set(groups)
        if found:
            self.dirty |= found
            self.kick.set()

    def capacity_changed(self) -> None:
        """CPUs or GPUs were freed or added somewhere: groups that did not fit try again."""
        self.touch(self.waiting_for_room)

    def node_view(self, node: str) -> NodeView | None:
        found = self.nodes.get(node) if self.nodes is not None else None
        return next(iter(found), None) if found else None
