"""The ledger: what is booked on every node, derived from pod annotations only (pure).

Glossary:
  observed   a booking read from a pod's `numatopo.io/assignment` on the watch stream
  in-flight  an assignment this operator decided and is writing (or wrote) but has not yet
             seen on the watch; reserved until the annotation is observed, the write fails
             or the pod goes, so two quick decisions on a node never hand out one CPU/GPU
  untrusted  an observed booking that overlaps one earlier in `claim_order` (the engine's
             rule, the node agent's too); it books nothing and is reported once

Fed by `handlers` (watch events), `handover` (a fresh list of pods) and `assigning`
(reservations). Nothing survives a restart, by design: the operator lists every pod before
its first decision and the ledger is rebuilt from them.

A resync (`begin_resync` ... `end_resync`, for a replica taking over; `handover` argues why
no booking is lost) replaces the observed bookings with a fresh list's. The watch keeps
feeding the ledger meanwhile and is journaled per pod; at the end a booking or an end seen
on the watch during the list wins over the list (newer; an ended pod never books again). A
"no assignment" seen on the watch does not undo a listed booking: of two answers in unknown
order, the one that books cannot double-book. In-flight bookings are kept.

Decision sequence: `next_seq(node)` is one more than the highest `Assignment.seq` seen
booked on the node (observed, listed or reserved). The mark never goes down, even when that
pod ends, so a replica never hands out a sequence twice; one taking over starts from the
highest on a live pod, all the node agent compares (it orders the claims of live pods).

DRA holds (`set_dra_holds`; docs/DESIGN.md, "GPUs on DRA clusters", step 4): a hold books
only what no pod's booking took, so a pod is never untrusted because of one; holds are no
pods (`pods_on`, `holds` leave them out).

`lock(node)` makes the engine call and the reservation one critical section. The engine
thread never sees live states (the loop changes them meanwhile): it gets `frozen_state`
copies, and only `reserve`, on the loop, books against the live state.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from numatopo_engine.annotations import Assignment
from numatopo_engine.errors import OverlapError
from numatopo_engine.model import GpuMode, NumatopologySpec, UnhealthyDevices
from numatopo_engine.state import NodeState, book_in_claim_order
from numatopo_engine.topology_tables import NodeNames, TableCache, Tables, node_names, shape_key
from numatopo_operator.dra_holds import book_holds
from numatopo_operator.translate import NO_NUMATOPOLOGY, Booking

ShapeCandidates = tuple[NumatopologySpec, list[str], list[NodeState]]
"""Candidates of one hardware shape: a topology of that shape, the nodes, their states."""


@dataclass(frozen=True, slots=True)
class _Ended:
    """Journaled: the pod with this uid ('' if unknown) ended or was deleted."""

    uid: str


_ABSENT = "absent"
"""Journaled: the pod showed no assignment (a listed booking still stands)."""

_Journaled = Booking | _Ended | str


@dataclass(eq=False, slots=True)
class NodeRecord:
    """Everything the operator knows of one node, in one place: its hardware, the freshness
    of that data, and its bookings (docs/DESIGN.md, "The operator's records", says what
    each part holds and what outlives the Numatopology)."""

    name: str
    topology: NumatopologySpec | None = None
    """The node's Numatopology spec as last read; None: none (deleted or never seen)."""
    shape: Tables | None = None
    """The hardware shape decisions read; shared with every node of equal hardware."""
    names: NodeNames | None = None
    unhealthy: UnhealthyDevices = field(default_factory=UnhealthyDevices)
    state: NodeState | None = None
    """What is booked (observed, in flight; not untrusted); None without a topology."""
    untrusted: dict[str, str] = field(default_factory=dict)
    """Pods whose bookings overlap earlier claims: key -> why."""
    observed: dict[str, Booking] = field(default_factory=dict)
    """What each pod's annotation was last seen to book here."""
    inflight: dict[str, Assignment] = field(default_factory=dict)
    """Decisions written (or being written) here, not yet seen on the watch stream."""
    dra_holds: dict[str, Assignment] = field(default_factory=dict)
    """Hold key -> what a ResourceClaim's allocation holds here (`Ledger.set_dra_holds`)."""
    seq: int = 0
    """The highest decision sequence seen booked here; never goes down."""
    stale: str | None = None
    """Why its exporter calls the data not current; None while it calls it current."""
    heartbeat: float | None = None
    """Its Numatopology's `status.heartbeat` (Unix seconds); None: none written."""
    gpu_mode: str | None = None
    """Its Numatopology's `status.gpuMode` (the node agent's GPU guarantee)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Serialises decisions on the node (the engine call and the reservation)."""
    frozen: tuple[NodeState, int, NodeState, str] | None = None
    """(live state, its version, the copy handed out, its shape key): `Ledger.frozen_state`."""

    @property
    def steered(self) -> bool:
        """Whether the kubelet here takes numatopo's GPUs (its agent says Steered)."""
        return self.gpu_mode == GpuMode.STEERED.value

    def stale_reason(self, limit: float, now: float | None = None) -> str | None:
        """Why nothing may be placed here now (its exporter says so, or its heartbeat is
        older than `limit` seconds, 0: no bound); None when current."""
        if self.stale is not None:
            return self.stale
        beat = self.heartbeat
        if beat is None or limit <= 0:
            return None
        age = (time.time() if now is None else now) - beat
        if age <= limit:
            return None
        return (
            f"Numatopology/{self.name} is stale: its exporter's last heartbeat is "
            f"{age:.0f} s old (more than {limit:.0f} s; is the numatopo exporter running "
            "there?)"
        )


class Ledger:
    """One `NodeRecord` per node, its `NodeState` in step with observed and in-flight bookings."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeRecord] = {}
        self._node_of: dict[str, str] = {}
        self._dirty: set[str] = set()
        self._journal: dict[str, _Journaled] | None = None
        # key -> the highest decision sequence taken back from it (`displace`)
        self._void: dict[str, int] = {}
        # key -> (uid, node, seq) of the newest decision seen on the pod; pods showing an
        # older one again (written back, it verifies, but what it names may be others' now).
        self._newest: dict[str, tuple[str, str, int]] = {}
        self._stale: set[str] = set()
        # One `Tables` per hardware shape, shared by the records of that shape.
        self._shapes = TableCache()

    # -- queries -----------------------------------------------------------------

    def record(self, node: str) -> NodeRecord | None:
        """Everything known of `node` (None: never seen)."""
        return self._nodes.get(node)

    def _record(self, node: str) -> NodeRecord:
        found = self._nodes.get(node)
        if found is None:
            found = self._nodes[node] = NodeRecord(node)
        return found

    def topology(self, node: str) -> NumatopologySpec | None:
        found = self._nodes.get(node)
        return found.topology if found is not None else None

    def state(self, node: str) -> NodeState | None:
        """What is booked on `node` (observed and in-flight), or None without a topology."""
        found = self._nodes.get(node)
        return found.state if found is not None else None

    def frozen_state(self, node: str) -> NodeState | None:
        """A copy of `state(node)` no later booking changes, for the engine thread; holders
        must not change it. The same copy is handed out while the bookings stay, so a cycle
        copies only changed nodes (and the engine's row cached on a copy stays warm)."""
        found = self._nodes.get(node)
        return _frozen(found) if found is not None else None

    def frozen_candidates(
        self, nodes: Iterable[str]
    ) -> Iterator[tuple[str, NumatopologySpec | None, NodeState | None]]:
        """(node, topology, `frozen_state`) for each of `nodes`, in one pass."""
        records = self._nodes
        for node in nodes:
            found = records.get(node)
            if found is None or found.topology is None:
                yield node, None, None
            else:
                yield node, found.topology, _frozen(found)

    def judged_candidates(
        self, nodes: Iterable[str], limit: float, now: float, *, without: str | None = None
    ) -> tuple[dict[str, ShapeCandidates], dict[str, str]]:
        """`frozen_candidates` grouped by hardware shape (key -> topology, nodes, frozen
        states, in first-seen order: what the engine decides in bulk), and the nodes that
        may take nothing now, in the order given: no topology, or stale
        (`NodeRecord.stale_reason` under `limit` at `now`). `without`: a pod whose own
        bookings are released on a copy (a pod judged again must not count its last try)."""
        records = self._nodes
        groups: dict[str, ShapeCandidates] = {}
        refused: dict[str, str] = {}
        # The margin keeps the cheap heartbeat test below from missing one by rounding.
        old = now - limit + 1.0 if limit > 0 else -math.inf
        # A pod's bookings are on the one node `_node_of` names (DRA holds' keys hold a
        # colon, pod keys none): one look-up here, not one per candidate.
        own = records.get(self._node_of.get(without, "")) if without is not None else None
        get = records.get
        for node in nodes:
            found = get(node)
            if found is None:
                refused[node] = NO_NUMATOPOLOGY
                continue
            # `_frozen`'s unchanged case inline (no topology: no state, no frozen copy).
            frozen = found.frozen
            if frozen is None or frozen[0] is not found.state or frozen[0].version != frozen[1]:
                if found.topology is None or found.shape is None:
                    refused[node] = NO_NUMATOPOLOGY
                    continue
                _frozen(found)
                frozen = found.frozen
                assert frozen is not None, "a record with a topology has a state"
            # Heartbeats older than `old` go to `stale_reason`, which decides exactly.
            if found.stale is not None or ((beat := found.heartbeat) is not None and beat < old):
                why = found.stale_reason(limit, now)
                if why is not None:
                    refused[node] = why
                    continue
            state = released(frozen[2], without) if found is own and without else frozen[2]
            group = groups.get(frozen[3])
            if group is None:
                group = groups[frozen[3]] = (state.topology, [], [])
            group[1].append(node)
            group[2].append(state)
        return groups, refused

    def next_seq(self, node: str) -> int:
        """The sequence number of the next decision on `node` (1 on a node never booked)."""
        found = self._nodes.get(node)
        return (found.seq if found is not None else 0) + 1

    def booking(self, key: str) -> Booking | None:
        """What pod `key`'s annotation was last seen to book (None: nothing observed)."""
        node = self._node_of.get(key)
        return self._nodes[node].observed.get(key) if node is not None else None

    def holds(self, key: str) -> bool:
        """True when pod `key` has a booking (observed, in-flight or untrusted)."""
        return key in self._node_of

    def node_of(self, key: str) -> str | None:
        return self._node_of.get(key)

    def in_flight(self, key: str) -> bool:
        """True while pod `key` has a decision booked whose write the watch has not shown."""
        node = self._node_of.get(key)
        return node is not None and key in self._nodes[node].inflight

    def untrusted(self, node: str) -> Mapping[str, str]:
        """Pods on `node` whose bookings overlap earlier claims: key -> why."""
        found = self._nodes.get(node)
        return found.untrusted if found is not None else {}

    def nodes(self) -> Iterator[str]:
        """Nodes with a topology, in name order."""
        return iter(sorted(n for n, r in self._nodes.items() if r.topology is not None))

    def records(self) -> Iterator[NodeRecord]:
        """The records of the nodes with a topology, in name order."""
        return (self._nodes[node] for node in self.nodes())

    def pods_on(self, node: str) -> int:
        """Pods booked on `node` (observed or in-flight, untrusted ones excluded)."""
        found = self._nodes.get(node)
        if found is None or found.state is None:
            return 0
        booked = found.state.assignments
        return len(booked) - sum(1 for key in found.dra_holds if key in booked)

    def dra_holds(self, node: str) -> Mapping[str, Assignment]:
        """What ResourceClaims hold on `node` (`set_dra_holds`), booked or not."""
        found = self._nodes.get(node)
        return found.dra_holds if found is not None else {}

    def __len__(self) -> int:
        """Pods holding a booking anywhere, untrusted ones included."""
        return len(self._node_of)

    def lock(self, node: str) -> asyncio.Lock:
        return self._record(node).lock

    def take_dirty(self) -> set[str]:
        """Nodes whose bookings or topology changed since the last call (for status)."""
        dirty, self._dirty = self._dirty, set()
        return dirty

    def mark_dirty(self, node: str) -> None:
        self._dirty.add(node)

    # -- freshness ------------------------------------------------------------------

    def stale_reason(self, node: str, limit: float, now: float | None = None) -> str | None:
        """`NodeRecord.stale_reason` of `node` (None for a node never seen)."""
        found = self._nodes.get(node)
        return found.stale_reason(limit, now) if found is not None else None

    def stale_nodes(self, limit: float) -> dict[str, str]:
        """Every node `stale_reason` refuses now: node -> why (one pass)."""
        now = time.time()
        found = ((node, record.stale_reason(limit, now)) for node, record in self._nodes.items())
        return {node: why for node, why in found if why is not None}

    def see_freshness(
        self, node: str, *, stale: str | None, heartbeat: float | None, gpu_mode: str | None
    ) -> None:
        """What the node's Numatopology says of itself now (none of it decides a shape)."""
        found = self._record(node)
        found.stale, found.heartbeat, found.gpu_mode = stale, heartbeat, gpu_mode

    # -- topologies ---------------------------------------------------------------

    def set_topology(
        self,
        node: str,
        topology: NumatopologySpec,
        unhealthy: UnhealthyDevices | None = None,
    ) -> list[str]:
        """Use `topology` for `node` (new or changed), with the devices its agent says the
        kubelet cannot hand out (`unhealthy`, never free); returns keys that became
        untrusted. An equal topology and equal devices change nothing."""
        sick = unhealthy or UnhealthyDevices()
        found = self._record(node)
        if found.topology == topology and found.unhealthy == sick:
            return []
        if found.topology != topology:
            found.shape = self._shapes.get(topology, shape_key(topology))
            found.names = node_names(topology)
        found.topology = topology
        found.unhealthy = sick
        return self._rebuild(found)

    def unhealthy(self, node: str) -> UnhealthyDevices:
        found = self._nodes.get(node)
        return found.unhealthy if found is not None else UnhealthyDevices()

    def drop_topology(self, node: str) -> None:
        """The Numatopology is gone: keep the bookings, decide nothing there."""
        found = self._nodes.get(node)
        if found is None:
            return
        found.topology = found.shape = found.names = found.state = found.frozen = None
        found.unhealthy = UnhealthyDevices()
        found.untrusted = {}
        found.stale = found.heartbeat = found.gpu_mode = None
        self._dirty.discard(node)

    def set_dra_holds(self, node: str, holds: Mapping[str, Assignment]) -> None:
        """What ResourceClaims' allocations hold on `node` now (key -> devices), all of
        them: holds not given are freed. Each books the devices no pod took."""
        if self.dra_holds(node) == holds:
            return
        found = self._record(node)
        found.dra_holds = dict(holds)
        self._rebuild(found)

    # -- bookings -------------------------------------------------------------------

    def observe(self, booking: Booking) -> list[str]:
        """Book what a pod's annotation says; returns keys that became untrusted (of two
        pods claiming one CPU or GPU, the later in `claim_order` until the first goes)."""
        key, node = booking.key, booking.node
        if booking.assignment.seq <= self._void.get(key, -1):
            return []  # taken back (`displace`); an event from before that write
        previous_node = self._node_of.get(key)
        if previous_node is not None and previous_node != node:
            self.forget(key)
        self._note(key, booking)
        self._see_decision(booking)
        found = self._record(node)
        _saw_seq(found, booking.assignment.seq)
        flight = found.inflight.get(key)
        if flight is not None and booking.assignment.seq < flight.seq:
            # An event older than our write of a newer decision (a realignment): the
            # write stands; the old booking again only if the write fails (`cancel`).
            found.observed[key] = booking
            return []
        if found.observed.get(key) == booking and flight is None:
            return []
        found.observed[key] = booking
        found.inflight.pop(key, None)
        self._node_of[key] = node
        state = found.state
        if state is None:
            return []
        self._dirty.add(node)
        if key not in found.untrusted:
            try:
                state.apply(key, booking.assignment)
            except OverlapError:
                pass
            else:
                return []
        return self._rebuild(found)

    def _see_decision(self, booking: Booking) -> None:
        """The pod is stale while it shows an older decision than it showed on this node
        before: its claim then comes after every other (`book_in_claim_order`)."""
        key, seq = booking.key, booking.assignment.seq
        newest = self._newest.get(key)
        if newest is not None and newest[:2] == (booking.uid, booking.node) and seq < newest[2]:
            self._stale.add(key)
            return
        self._newest[key] = (booking.uid, booking.node, seq)
        self._stale.discard(key)

    def observe_absent(self, key: str) -> None:
        """The pod shows no assignment; an in-flight one stays reserved (an event older
        than our write must not free it: only `forget` and `cancel` drop in-flight ones)."""
        self._note(key, _ABSENT)
        node = self._node_of.get(key)
        if node is None or key not in self._nodes[node].observed:
            return
        found = self._nodes[node]
        if key in found.inflight:
            found.observed.pop(key)
            return
        self.forget(key)

    def reserve(
        self, node: str, key: str, assignment: Assignment, *, over: Collection[str] = ()
    ) -> None:
        """Book a decision before it is written, under `lock(node)`; `OverlapError` if it
        clashes with a booking (an engine bug). `over`: DRA hold keys whose devices are the
        pod's own (its claims, allocated before its bind): it takes them, holds keep the rest."""
        found = self._nodes.get(node)
        if found is None or found.state is None:
            raise KeyError(f"no Numatopology for node {node!r}")
        state = found.state
        own = {k: v for k, v in found.dra_holds.items() if k in over}
        for hold in own:
            state.release(hold)
        try:
            state.apply(key, assignment)
        finally:
            book_holds(state, own)  # pods come first: they book what the pod did not take
        _saw_seq(found, assignment.seq)
        found.inflight[key] = assignment
        self._node_of[key] = node
        self._dirty.add(node)

    def reserve_all(self, node: str, decisions: Mapping[str, Assignment]) -> None:
        """Book decisions each replacing what its pod holds (a realignment and the pods it
        displaces); all or nothing: `OverlapError` and none booked on any clash."""
        found = self._nodes.get(node)
        if found is None or found.state is None:
            raise KeyError(f"no Numatopology for node {node!r}")
        trial = found.state.copy()
        for key in decisions:
            trial.release(key)
        for key, assignment in decisions.items():
            trial.apply(key, assignment)
        for key, assignment in decisions.items():
            _saw_seq(found, assignment.seq)
            found.inflight[key] = assignment
            self._node_of[key] = node
        found.state = trial
        self._dirty.add(node)

    def displace(self, key: str) -> None:
        """Free what pod `key` holds, its assignment taken back (another pod holds its GPUs
        for real, or its Binding failed); events still showing it or an older one book
        nothing (they predate the write that removed it)."""
        node = self._node_of.get(key)
        seqs = [self._void.get(key, -1)]
        if node is not None:
            found = self._nodes[node]
            flight, seen = found.inflight.get(key), found.observed.get(key)
            seqs += [a.seq for a in (flight, seen.assignment if seen else None) if a is not None]
        self._void[key] = max(seqs)
        self.forget(key)

    def cancel(self, key: str) -> None:
        """Drop an in-flight booking whose write failed (or was taken back)."""
        node = self._node_of.get(key)
        if node is None or key not in self._nodes[node].inflight:
            return
        found = self._nodes[node]
        found.inflight.pop(key)
        if key in found.observed:
            self._rebuild(found)
            return
        del self._node_of[key]
        self._release(found, key)

    def forget(self, key: str, *, uid: str = "") -> str | None:
        """The pod ended or was deleted: free all it held; returns its node. `uid`: which
        pod of that name ended, so a resync does not drop a newer one."""
        self._note(key, _Ended(uid))
        if uid:
            # The pod itself ended: nothing of it can come back.
            self._void.pop(key, None)
            self._newest.pop(key, None)
            self._stale.discard(key)
        node = self._node_of.pop(key, None)
        if node is None:
            return None
        found = self._nodes[node]
        found.observed.pop(key, None)
        found.inflight.pop(key, None)
        self._release(found, key)
        return node

    # -- resync ------------------------------------------------------------------------

    def begin_resync(self) -> None:
        """Start journaling the watch stream; call just before requesting the list."""
        self._journal = {}

    def abort_resync(self) -> None:
        """The list failed or was given up: stop journaling, keep the ledger as it is."""
        self._journal = None

    def end_resync(self, listed: Iterable[Booking]) -> list[str]:
        """The observed bookings become `listed`'s (a list requested after `begin_resync`),
        corrected by the journal; returns keys that became untrusted."""
        journal, self._journal = self._journal or {}, None
        bookings = {booking.key: booking for booking in listed}
        for key, seen in journal.items():
            if isinstance(seen, Booking):
                bookings[key] = seen
            elif isinstance(seen, _Ended):
                kept = bookings.get(key)
                if kept is not None and not (seen.uid and kept.uid and seen.uid != kept.uid):
                    del bookings[key]
        for found in self._nodes.values():
            found.observed = {}
        for booking in bookings.values():
            found = self._record(booking.node)
            _saw_seq(found, booking.assignment.seq)
            found.observed[booking.key] = booking
            found.inflight.pop(booking.key, None)
        self._node_of = {key: booking.node for key, booking in bookings.items()}
        for node, found in self._nodes.items():
            self._node_of.update(dict.fromkeys(found.inflight, node))
        untrusted: list[str] = []
        for found in list(self._nodes.values()):
            untrusted += self._rebuild(found)
        return sorted(untrusted)

    # -- internals --------------------------------------------------------------------

    def _note(self, key: str, seen: _Journaled) -> None:
        if self._journal is not None:
            self._journal[key] = seen

    def _release(self, found: NodeRecord, key: str) -> None:
        state = found.state
        if state is None:
            return
        self._dirty.add(found.name)
        if found.untrusted.pop(key, None) is None:
            state.release(key)
        if found.untrusted or found.dra_holds:
            # What it held may be what an untrusted booking overlapped, or what a claim
            # still holds (deallocated later, if at all).
            self._rebuild(found)

    def _rebuild(self, found: NodeRecord) -> list[str]:
        """Book the node from scratch: observed pods in claim order, then in-flight decisions."""
        topology = found.topology
        if topology is None or found.shape is None:
            return []
        before = set(found.untrusted)
        sick = found.unhealthy
        state = NodeState(
            topology,
            unhealthy_gpus=sick.gpus,
            unhealthy_nics=sick.nics,
            tables=found.shape,
            names=found.names,
        )
        _, overlapping = book_in_claim_order(state, found.observed.values(), stale=self._stale)
        untrusted = {booking.key: why for booking, why in overlapping}
        flights = found.inflight
        # In-flight decisions replace what their pods held (a realigned pod's old GPUs
        # may be another in-flight decision's): release them all first.
        for key in flights:
            state.release(key)
            untrusted.pop(key, None)
        for key, assignment in flights.items():
            try:
                state.apply(key, assignment)
            except OverlapError as exc:
                untrusted[key] = str(exc)
        book_holds(state, found.dra_holds)
        found.state = state
        found.untrusted = untrusted
        self._dirty.add(found.name)
        return sorted(set(untrusted) - before)


def released(state: NodeState, key: str) -> NodeState:
    """`state`, or a copy of it without pod `key`'s booking where it holds one."""
    if key not in state.assignments:
        return state
    copy = state.copy()
    copy.release(key)
    return copy


def _saw_seq(found: NodeRecord, seq: int) -> None:
    found.seq = max(found.seq, seq)


def _frozen(found: NodeRecord) -> NodeState | None:
    live = found.state
    if live is None:
        return None
    frozen = found.frozen
    if frozen is not None and frozen[0] is live and frozen[1] == live.version:
        return frozen[2]
    copy = live.copy()
    found.frozen = (live, live.version, copy, live.shape_key)
    return copy
