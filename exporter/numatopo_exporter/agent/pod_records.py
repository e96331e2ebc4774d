"""What the agent knows about each pod on its node: one record per pod, by UID, with the pod as
the watch last showed it and every fact kept between passes (docs/DESIGN.md, "Node agent
(enforcement)"). The agent's memory is bounded by the pods on its node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from numatopo_engine.dra.pods import devices_from_claims
from numatopo_engine.signing import Verifier
from numatopo_exporter.agent import follow, pods
from numatopo_exporter.agent.pod_resources import Listing
from numatopo_exporter.agent.pod_view import PodView
from numatopo_exporter.steering.choice import InFlight


@dataclass(frozen=True)
class Enforced:
    """What the last successful pass enforced: a new annotation or new container ids
    is news (`Enforced`, `Reenforced`)."""

    annotation: str
    container_ids: frozenset[str]


@dataclass
class PodRecord:
    view: PodView
    first_seen: float | None = None
    """When this agent first saw the pod's current assignment (enforcement latency)."""
    enforced: Enforced | None = None
    reported: tuple[str, str] | None = None
    """(reason, annotation) of the last failure announced with an Event."""
    mismatch_seq: int | None = None
    """The assignment sequence whose GPU mismatch was counted."""
    gpu_claims: tuple[InFlight, ...] = ()
    """Its containers assigned GPUs (steering candidates), for `claims_for`."""
    claims_for: tuple[str | None, str] = (None, "")
    """(annotation, phase) `gpu_claims` were worked out for."""


@dataclass
class PodRecords:
    node_name: str
    clock: Callable[[], float]
    is_gpu: Callable[[str], bool]
    verifier: Verifier
    in_flight: tuple[InFlight, ...] = field(default=(), init=False)
    """Containers assigned GPUs the kubelet has not given yet, for the steering plugin's answer:
    replaced whole, never changed in place, since the plugin reads it from another thread."""
    newest_seqs: dict[str, int] = field(default_factory=dict, init=False)
    """Pod uid -> the highest decision sequence of a signed assignment it showed (kept by
    `pods.select_assignments`): an older one shown again is stale."""
    _records: dict[str, PodRecord] = field(default_factory=dict, init=False)
    _listing: Listing = field(default_factory=lambda: Listing({}, frozenset()), init=False)

    def __iter__(self) -> Iterator[PodRecord]:
        return iter(list(self._records.values()))

    def get(self, uid: str) -> PodRecord | None:
        return self._records.get(uid)

    def views(self) -> list[PodView]:
        return [record.view for record in self._records.values()]

    def admitted(self) -> frozenset[str]:
        """The UIDs of the pods seen admitted by the kubelet (`Listing.admitted`)."""
        return frozenset(uid for uid, record in self._records.items() if record.view.admitted)

    # -- taking watch events -------------------------------------------------------------

    def take(self, view: PodView) -> None:
        """The pod as a watch event or a listing shows it now."""
        if view.node_name != self.node_name:
            # Servers that ignore the field selector send every pod of the cluster.
            self.drop(view.uid)
            return
        record = self._records.get(view.uid)
        if record is None:
            record = self._records[view.uid] = PodRecord(view)
        elif record.view.annotation != view.annotation:
            record.first_seen = None
        record.view = view
        if view.annotation is not None and record.first_seen is None:
            record.first_seen = self.clock()
        if self._update_claims(record):
            self.publish_in_flight()

    def drop(self, uid: str) -> None:
        self.newest_seqs.pop(uid, None)
        record = self._records.pop(uid, None)
        if record is not None and record.gpu_claims:
            self.publish_in_flight()

    def replace(self, views: Iterable[PodView]) -> None:
        """A fresh listing: pods not in it are gone; those in it keep what was known."""
        listed = [v for v in views if v.node_name == self.node_name]
        present = {v.uid for v in listed}
        for uid in [u for u in self._records if u not in present]:
            del self._records[uid]
            self.newest_seqs.pop(uid, None)
        for view in listed:
            self.take(view)
        self.publish_in_flight()

    def _update_claims(self, record: PodRecord) -> bool:
        """Work out the pod's GPU containers again if its assignment or phase changed; whether
        they changed."""
        view = record.view
        basis = (view.annotation, view.phase)
        if basis == record.claims_for:
            return False
        before = record.gpu_claims
        record.claims_for = basis
        claims: tuple[InFlight, ...] = ()
        # A pod whose GPUs come from its claims (kube-scheduler's for `nvidia.com/gpu` served by
        # DRA included) never reaches a device plugin: steering another pod's request by it
        # would hand that pod the claimed GPUs.
        if view.assignment is not None and not devices_from_claims(view.body, self.is_gpu):
            claims = tuple(follow.in_flight([view], self.node_name, self.is_gpu))
            if claims and (
                pods.unsigned(view, view.assignment, self.verifier)
                or view.assignment.seq < self.newest_seqs.get(view.uid, -1)
            ):
                # Steering by a forged or stale assignment would hand out GPUs the operator
                # booked for another pod since.
                claims = ()
        record.gpu_claims = claims
        return bool(claims) or bool(before)

    def publish_in_flight(self, listing: Listing | None = None) -> None:
        """Publish `in_flight`: the GPU containers of the pods that PodResources did not list with
        devices yet (as of the last `listing` given; an entry that may be a predecessor's
        does not count)."""
        if listing is not None:
            self._listing = listing
        known = self._listing

        def holds_devices(claim: InFlight) -> bool:
            held = known.held_by(claim.pod_uid, claim.pod_key) or {}
            return any((held.get(claim.container) or {}).values())

        self.in_flight = tuple(
            claim
            for record in self._records.values()
            for claim in record.gpu_claims
            if not holds_devices(claim)
        )
