"""`Runtime`: the operator's long-lived parts, handed to every handler as kopf's `memo`.

kopf gives each object a shallow copy of the memo, so every field here is a shared
object (never a plain flag that a copy could diverge on).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import kopf

from numatopo_operator.kube import KubeClient
from numatopo_operator.ledger import Ledger
from numatopo_operator.metrics import Metrics
from numatopo_operator.settings import OperatorSettings

__all__ = ["Runtime"]


@dataclass
class Runtime:
    settings: OperatorSettings
    ledger: Ledger = field(default_factory=Ledger)
    kube: KubeClient = field(default_factory=KubeClient)
    metrics: Metrics = field(default_factory=Metrics)
    connection: kopf.ConnectionInfo | None = None
    """Fixed credentials (an explicit API URL, tests); None logs in from the environment."""

    stale: dict[str, str] = field(default_factory=dict)
    """Nodes whose Numatopology its exporter marks as not current: node -> why."""

    unreadable: dict[str, str] = field(default_factory=dict)
    """Pods whose `numatopo.io/assignment` cannot be read: pod key -> why."""

    written: dict[str, str] = field(default_factory=dict)
    """States we wrote on pods but have not yet seen on the watch stream: pod key -> state.
    Like in-flight bookings, so a retry from an older snapshot does not write twice."""

    reported: set[str] = field(default_factory=set)
    """Problems already posted as Events (`<pod key> <problem>`), so each is posted once."""

    deferred: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Pods (key -> body) whose events came while this replica was active but its ledger
    not yet current: `handover` retries them once it is."""

    redriven: dict[str, object] = field(default_factory=dict)
    """node -> the topology its waiting pods were last retried against."""

    indexed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once kopf has listed every pod and Numatopology (its indexes are complete)."""

    ledger_current: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the ledger was rebuilt from a fresh list of pods since this replica last
    became active; cleared on every change of role (see `handover`). kopf does not gate
    its indexes again when it resumes a paused replica, so `indexed` alone would let a
    replica decide against the bookings it had before it stood by."""

    active: asyncio.Event = field(default_factory=asyncio.Event)
    """Set while this replica is the one that decides (always, when standalone)."""

    role_known: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once this replica knows whether it is the active one (the peering object was
    read once; at once when standalone): until then it is not Ready."""

    @property
    def deciding(self) -> bool:
        """True when this replica may decide: it is active and its ledger is complete and
        current."""
        return self.indexed.is_set() and self.active.is_set() and self.ledger_current.is_set()
