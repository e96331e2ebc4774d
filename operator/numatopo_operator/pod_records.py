"""`PodRecords`: what the operator remembers of each pod between its events, one record per
pod, so a pod that ends is forgotten by one deletion (pure; docs/DESIGN.md, "The operator's
records"). Only pods with something to remember have one; bookings are the ledger's.
`WaitingPods`: the pods that wait for a decision, by the node they are bound to.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from numatopo_operator import translate
from numatopo_operator.pod_view import PodView


@dataclass(slots=True)
class PodRecord:
    annotated: PodView | None = None
    """The pod as last seen with a numatopo annotation: what a first holder judges."""
    deferred: PodView | None = None
    """An annotated or DRA-gated pod as last seen while active but not deciding (ledger not
    current, a late renewal): `handover.judge` judges it once deciding."""
    written: str | None = None
    """The state we wrote and have not seen on the watch yet (as an in-flight booking): a
    retry from an older snapshot does not write twice."""
    unreadable: str | None = None
    """Why its `numatopo.io/assignment` cannot be read (None: it can, or it has none)."""
    reported: set[str] = field(default_factory=set)
    """Problems already posted as Events about it, so each is posted once."""
    unsatisfiable: str | None = None
    """Why its DRA claims did not fit, as last told: told again only when it changes."""


class PodRecords:
    def __init__(self) -> None:
        self._by_key: dict[str, PodRecord] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def get(self, key: str) -> PodRecord | None:
        return self._by_key.get(key)

    def of(self, key: str) -> PodRecord:
        """The pod's record, made when it has none yet."""
        found = self._by_key.get(key)
        if found is None:
            found = self._by_key[key] = PodRecord()
        return found

    def forget(self, key: str) -> None:
        """The pod ended or was deleted."""
        self._by_key.pop(key, None)

    def tell_once(self, key: str, problem: str) -> bool:
        """True the first time `problem` is told about pod `key` (then it is kept)."""
        found = self.of(key)
        if problem in found.reported:
            return False
        found.reported.add(problem)
        return True

    def annotated(self) -> Iterator[PodView]:
        """The live annotated pods, as last seen."""
        return (r.annotated for r in self._by_key.values() if r.annotated is not None)

    def take_deferred(self) -> dict[str, PodView]:
        """The pods deferred until the ledger is current (key -> view), no longer kept."""
        taken = {}
        for key, found in self._by_key.items():
            if found.deferred is not None:
                taken[key], found.deferred = found.deferred, None
        return taken


class WaitingPods:
    """Kept by the pod handler (`translate.is_waiting`), read to retry them when a node's
    capacity changes. Not a kopf index: its start-up gate costs time quadratic in the pods."""

    def __init__(self) -> None:
        self._by_node: dict[str, dict[str, PodView]] = {}
        self._node_of: dict[str, str] = {}

    def observe(self, pod: PodView) -> None:
        """The pod as seen now: kept when it waits on a node, dropped when not."""
        key = pod.key
        node = pod.node if translate.is_waiting(pod) else None
        if node is None:
            self.forget(key)
            return
        previous = self._node_of.get(key)
        if previous is not None and previous != node:
            self.forget(key)
        self._node_of[key] = node
        self._by_node.setdefault(node, {})[key] = pod

    def forget(self, key: str) -> None:
        node = self._node_of.pop(key, None)
        if node is None:
            return
        pods = self._by_node.get(node, {})
        pods.pop(key, None)
        if not pods:
            self._by_node.pop(node, None)

    def on(self, node: str) -> list[PodView]:
        """The pods waiting on `node`, oldest first."""
        pods = self._by_node.get(node, {}).values()
        return sorted(pods, key=lambda pod: pod.metadata.get("creationTimestamp", ""))
