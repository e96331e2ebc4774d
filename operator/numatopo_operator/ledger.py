"""The ledger: what is booked on every node, derived from pod annotations only (pure).

Glossary:
  observed   a booking read from a pod's `numatopo.io/assignment` on the watch stream
  in-flight  an assignment this operator decided and is writing (or has written) but
             has not yet seen on the watch stream; it stays reserved until the pod's
             annotation is observed, the write fails, or the pod goes away, so two quick
             decisions on one node can never hand out the same CPU or GPU
  untrusted  an observed booking that overlaps one earlier in `claim_order` (the
             engine's rule, the node agent's too); it books nothing and is reported once

Its inputs: `handlers` on every watch event (topologies, observed bookings and ends),
`handover` with a fresh list of pods, and `assigning` (reservations). Nothing here
survives a restart, by design: the operator lists every pod before its first decision
(`handover`) and this ledger is rebuilt from them.

A resync (`begin_resync` ... `end_resync`) replaces the observed bookings with those of
a fresh list of pods, for a replica that takes over after standing by (see `handover`,
which argues why no booking is lost). While the list is on its way, the watch stream
keeps feeding this ledger, and what it says per pod is also journaled; at the end each
pod's booking is the list's, except that a booking seen on the stream during the list
wins (it may be newer), and so does an end seen on the stream (a pod that ended never
books again). A "no assignment" seen on the stream does not undo a listed booking: of
two answers in unknown order, the one that books is the one that cannot double-book.
In-flight bookings are kept as they are.

Decision sequence: `next_seq(node)` is one more than the highest `Assignment.seq` this
ledger has seen booked on the node (observed, listed or reserved). The mark never goes
down, not even when that pod ends, so one replica never hands out a sequence twice; a
replica taking over starts from the highest sequence still on a live pod, which is all
the node agent compares (it orders the claims of live pods).

Devices that DRA holds (`set_dra_holds`): what ResourceClaims' allocations hold on a
node, as `dra_holds` maps them to GPUs, NICs and CPUs. Pods come first: a hold books
only the devices no pod's booking (observed or in-flight) took, so the claims numatopo
decided (whose pods book the same devices) add nothing, and a pod never becomes
untrusted because of a hold. Holds are no pods (`pods_on`, `holds` leave them out).

Decisions for one node are serialised by `lock(node)`: the engine call and the
reservation form one critical section. The engine runs in a thread of its own, never
on this ledger's live states (the event loop changes them meanwhile): it gets
`frozen_state` copies, and only `reserve`, on the loop, books against the live state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass

from numatopo_engine.annotations import Assignment
from numatopo_engine.errors import OverlapError
from numatopo_engine.model import NumatopologySpec, UnhealthyDevices
from numatopo_engine.state import NodeState, book_in_claim_order
from numatopo_operator.dra_holds import book_holds
from numatopo_operator.translate import Booking

__all__ = ["Ledger"]


@dataclass(frozen=True, slots=True)
class _Ended:
    """Journaled: the pod with this uid ('' if unknown) ended or was deleted."""

    uid: str


_ABSENT = "absent"
"""Journaled: the pod showed no assignment (a listed booking still stands)."""

_Journaled = Booking | _Ended | str


class Ledger:
    """Per-node `NodeState`s, kept in step with observed bookings and in-flight ones."""

    def __init__(self) -> None:
        self._topologies: dict[str, NumatopologySpec] = {}
        self._unhealthy: dict[str, UnhealthyDevices] = {}
        self._observed: dict[str, dict[str, Booking]] = {}
        self._inflight: dict[str, dict[str, Assignment]] = {}
        self._node_of: dict[str, str] = {}
        self._untrusted: dict[str, dict[str, str]] = {}
        self._states: dict[str, NodeState] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._dirty: set[str] = set()
        self._journal: dict[str, _Journaled] | None = None
        self._seq: dict[str, int] = {}
        # key -> the highest decision sequence taken back from it (`displace`)
        self._void: dict[str, int] = {}
        # node -> (live state, its version, the copy handed out for it)
        self._frozen: dict[str, tuple[NodeState, int, NodeState]] = {}
        # node -> hold key -> the devices a ResourceClaim's allocation holds there
        self._dra_holds: dict[str, dict[str, Assignment]] = {}

    # -- queries -----------------------------------------------------------------

    def topology(self, node: str) -> NumatopologySpec | None:
        return self._topologies.get(node)

    def state(self, node: str) -> NodeState | None:
        """What is booked on `node` (observed and in-flight), or None without a topology."""
        return self._states.get(node)

    def candidates(
        self, nodes: Iterable[str]
    ) -> Iterator[tuple[str, NumatopologySpec | None, NodeState | None]]:
        """(node, topology, state) for each of `nodes`: one pass for the extender, which
        asks this for thousands of nodes per scheduling cycle."""
        topologies, states = self._topologies, self._states
        for node in nodes:
            yield node, topologies.get(node), states.get(node)

    def frozen_state(self, node: str) -> NodeState | None:
        """A copy of `state(node)` that no later booking changes, for the engine thread.

        The same copy is handed out while the node's bookings stay as they are, so a
        scheduling cycle over thousands of nodes copies only those that changed since
        the last one (and what the engine cached on a copy stays warm). Holders must not
        change it.
        """
        live = self._states.get(node)
        if live is None:
            return None
        frozen = self._frozen.get(node)
        if frozen is not None and frozen[0] is live and frozen[1] == live.version:
            return frozen[2]
        copy = live.copy()
        self._frozen[node] = (live, live.version, copy)
        return copy

    def frozen_candidates(
        self, nodes: Iterable[str]
    ) -> Iterator[tuple[str, NumatopologySpec | None, NodeState | None]]:
        """`candidates`, with `frozen_state` copies instead of the live states."""
        topologies, frozen_state = self._topologies, self.frozen_state
        for node in nodes:
            topology = topologies.get(node)
            yield node, topology, frozen_state(node) if topology is not None else None

    def next_seq(self, node: str) -> int:
        """The sequence number of the next decision on `node` (1 on a node never booked)."""
        return self._seq.get(node, 0) + 1

    def _saw_seq(self, node: str, seq: int) -> None:
        if seq > self._seq.get(node, 0):
            self._seq[node] = seq

    def booking(self, key: str) -> Booking | None:
        """What pod `key`'s annotation was last seen to book (None: nothing observed)."""
        node = self._node_of.get(key)
        return self._observed.get(node, {}).get(key) if node is not None else None

    def holds(self, key: str) -> bool:
        """True when pod `key` has a booking (observed, in-flight or untrusted)."""
        return key in self._node_of

    def node_of(self, key: str) -> str | None:
        return self._node_of.get(key)

    def untrusted(self, node: str) -> Mapping[str, str]:
        """Pods on `node` whose bookings overlap earlier claims: key -> why."""
        return self._untrusted.get(node, {})

    def nodes(self) -> Iterator[str]:
        """Nodes with a topology, in name order."""
        return iter(sorted(self._topologies))

    def pods_on(self, node: str) -> int:
        """Pods booked on `node` (observed or in-flight, untrusted ones excluded)."""
        state = self._states.get(node)
        if state is None:
            return 0
        holds = self._dra_holds.get(node, {})
        return len(state.assignments) - sum(1 for key in holds if key in state.assignments)

    def dra_holds(self, node: str) -> Mapping[str, Assignment]:
        """What ResourceClaims hold on `node` (`set_dra_holds`), booked or not."""
        return self._dra_holds.get(node, {})

    def __len__(self) -> int:
        """Pods holding a booking anywhere, untrusted ones included."""
        return len(self._node_of)

    def lock(self, node: str) -> asyncio.Lock:
        return self._locks.setdefault(node, asyncio.Lock())

    def take_dirty(self) -> set[str]:
        """Nodes whose bookings or topology changed since the last call (for status)."""
        dirty, self._dirty = self._dirty, set()
        return dirty

    def mark_dirty(self, node: str) -> None:
        self._dirty.add(node)

    # -- topologies ---------------------------------------------------------------

    def set_topology(
        self,
        node: str,
        topology: NumatopologySpec,
        unhealthy: UnhealthyDevices | None = None,
    ) -> list[str]:
        """Use `topology` for `node` (new or changed), with the devices its agent says the
        kubelet cannot hand out (`unhealthy`, never free); returns keys that became
        untrusted."""
        sick = unhealthy or UnhealthyDevices()
        if self._topologies.get(node) == topology and self._unhealthy.get(node) == sick:
            return []
        self._topologies[node] = topology
        self._unhealthy[node] = sick
        return self._rebuild(node)

    def unhealthy(self, node: str) -> UnhealthyDevices:
        return self._unhealthy.get(node) or UnhealthyDevices()

    def drop_topology(self, node: str) -> None:
        """The node's Numatopology is gone: keep the bookings, decide nothing there."""
        self._topologies.pop(node, None)
        self._unhealthy.pop(node, None)
        self._states.pop(node, None)
        self._frozen.pop(node, None)
        self._untrusted.pop(node, None)
        self._dirty.discard(node)

    def set_dra_holds(self, node: str, holds: Mapping[str, Assignment]) -> None:
        """What ResourceClaims' allocations hold on `node` now (key -> devices), all of
        them: holds not given are freed. Each books the devices no pod took."""
        if self._dra_holds.get(node, {}) == holds:
            return
        if holds:
            self._dra_holds[node] = dict(holds)
        else:
            self._dra_holds.pop(node, None)
        self._rebuild(node)

    # -- bookings -------------------------------------------------------------------

    def observe(self, booking: Booking) -> list[str]:
        """Book what a pod's annotation says; returns keys that became untrusted.

        Of two pods claiming one CPU or GPU, the earlier in `claim_order` (decision
        sequence, then uid) keeps it; the other is untrusted until the first one goes.
        """
        key, node = booking.key, booking.node
        if booking.assignment.seq <= self._void.get(key, -1):
            return []  # taken back (`displace`); an event from before that write
        previous_node = self._node_of.get(key)
        if previous_node is not None and previous_node != node:
            self.forget(key)
        self._note(key, booking)
        self._saw_seq(node, booking.assignment.seq)
        flight = self._inflight.get(node, {}).get(key)
        if flight is not None and booking.assignment.seq < flight.seq:
            # An event older than our own write of a newer decision for this pod (a
            # realignment): the write is what stands; the old booking is what stands
            # again only if the write fails (`cancel`).
            self._observed.setdefault(node, {})[key] = booking
            return []
        known = self._observed.get(node, {}).get(key)
        if known == booking and key not in self._inflight.get(node, {}):
            return []
        self._observed.setdefault(node, {})[key] = booking
        self._inflight.get(node, {}).pop(key, None)
        self._node_of[key] = node
        state = self._states.get(node)
        if state is None:
            return []
        self._dirty.add(node)
        if key not in self._untrusted.get(node, {}):
            try:
                state.apply(key, booking.assignment)
            except OverlapError:
                pass
            else:
                return []
        return self._rebuild(node)

    def observe_absent(self, key: str) -> None:
        """The pod shows no assignment (any more); an in-flight one stays reserved.

        An event that predates our own write carries no annotation yet: that must not
        free what we just reserved. Only `forget` and `cancel` drop in-flight bookings.
        """
        self._note(key, _ABSENT)
        node = self._node_of.get(key)
        if node is None or key not in self._observed.get(node, {}):
            return
        if key in self._inflight.get(node, {}):
            self._observed[node].pop(key)
            return
        self.forget(key)

    def reserve(
        self, node: str, key: str, assignment: Assignment, *, over: Collection[str] = ()
    ) -> None:
        """Book a decision before it is written. Call under `lock(node)`.

        `over`: DRA hold keys whose devices are the pod's own (its claims, allocated by
        kube-scheduler before its bind): the pod takes them, the holds keep the rest.
        Raises `OverlapError` if it clashes with a booking (the engine would be wrong).
        """
        state = self._states.get(node)
        if state is None:
            raise KeyError(f"no Numatopology for node {node!r}")
        own = {k: v for k, v in self._dra_holds.get(node, {}).items() if k in over}
        for hold in own:
            state.release(hold)
        try:
            state.apply(key, assignment)
        finally:
            book_holds(state, own)  # pods come first: they book what the pod did not take
        self._saw_seq(node, assignment.seq)
        self._inflight.setdefault(node, {})[key] = assignment
        self._node_of[key] = node
        self._dirty.add(node)

    def reserve_all(self, node: str, decisions: Mapping[str, Assignment]) -> None:
        """Book several decisions at once, each replacing what its pod holds now (a
        realignment and the pods it displaces). All or nothing: raises `OverlapError`
        and books none when they clash with each other or with anyone else."""
        state = self._states.get(node)
        if state is None:
            raise KeyError(f"no Numatopology for node {node!r}")
        trial = state.copy()
        for key in decisions:
            trial.release(key)
        for key, assignment in decisions.items():
            trial.apply(key, assignment)
        for key, assignment in decisions.items():
            self._saw_seq(node, assignment.seq)
            self._inflight.setdefault(node, {})[key] = assignment
            self._node_of[key] = node
        self._states[node] = trial
        self._dirty.add(node)

    def displace(self, key: str) -> None:
        """Free what pod `key` holds because its assignment was taken back (another pod
        holds its GPUs for real). Events still showing that assignment, or an older
        one, book nothing: they predate the write that removed it."""
        node = self._node_of.get(key)
        seqs = [self._void.get(key, -1)]
        if node is not None:
            flight = self._inflight.get(node, {}).get(key)
            seen = self._observed.get(node, {}).get(key)
            seqs += [a.seq for a in (flight, seen.assignment if seen else None) if a is not None]
        self._void[key] = max(seqs)
        self.forget(key)

    def cancel(self, key: str) -> None:
        """Drop an in-flight booking whose write failed (or was taken back)."""
        node = self._node_of.get(key)
        if node is None or key not in self._inflight.get(node, {}):
            return
        self._inflight[node].pop(key)
        if key in self._observed.get(node, {}):
            self._rebuild(node)
            return
        del self._node_of[key]
        self._release(node, key)

    def forget(self, key: str, *, uid: str = "") -> str | None:
        """The pod ended or was deleted: free all it held at once. Returns its node.

        `uid` says which pod of that name ended, so a resync does not drop a newer one.
        """
        self._note(key, _Ended(uid))
        if uid:
            self._void.pop(key, None)  # the pod itself ended: nothing of it can come back
        node = self._node_of.pop(key, None)
        if node is None:
            return None
        self._observed.get(node, {}).pop(key, None)
        self._inflight.get(node, {}).pop(key, None)
        self._release(node, key)
        return node

    # -- resync ------------------------------------------------------------------------

    def begin_resync(self) -> None:
        """Start journaling the watch stream; call just before requesting the list."""
        self._journal = {}

    def abort_resync(self) -> None:
        """The list failed or was given up: stop journaling, keep the ledger as it is."""
        self._journal = None

    def end_resync(self, listed: Iterable[Booking]) -> list[str]:
        """Make the observed bookings those of `listed` (every booked pod of a list that
        was requested after `begin_resync`), corrected by the journal; returns keys that
        became untrusted."""
        journal, self._journal = self._journal or {}, None
        bookings = {booking.key: booking for booking in listed}
        for key, seen in journal.items():
            if isinstance(seen, Booking):
                bookings[key] = seen
            elif isinstance(seen, _Ended):
                kept = bookings.get(key)
                if kept is not None and not (seen.uid and kept.uid and seen.uid != kept.uid):
                    del bookings[key]
        self._observed = {}
        for booking in bookings.values():
            self._saw_seq(booking.node, booking.assignment.seq)
            self._observed.setdefault(booking.node, {})[booking.key] = booking
            self._inflight.get(booking.node, {}).pop(booking.key, None)
        self._node_of = {key: booking.node for key, booking in bookings.items()}
        for node, flights in self._inflight.items():
            self._node_of.update(dict.fromkeys(flights, node))
        untrusted: list[str] = []
        for node in self._topologies:
            untrusted += self._rebuild(node)
        return sorted(untrusted)

    # -- internals --------------------------------------------------------------------

    def _note(self, key: str, seen: _Journaled) -> None:
        if self._journal is not None:
            self._journal[key] = seen

    def _release(self, node: str, key: str) -> None:
        state = self._states.get(node)
        if state is None:
            return
        self._dirty.add(node)
        if self._untrusted.get(node, {}).pop(key, None) is None:
            state.release(key)
        if self._untrusted.get(node) or self._dra_holds.get(node):
            # What the pod held may be exactly what an untrusted booking overlapped, or
            # what a claim still holds (its claim is deallocated later, if at all).
            self._rebuild(node)

    def _rebuild(self, node: str) -> list[str]:
        """Book the node from scratch: observed pods in claim order, then in-flight decisions."""
        topology = self._topologies.get(node)
        if topology is None:
            return []
        before = set(self._untrusted.get(node, {}))
        sick = self._unhealthy.get(node) or UnhealthyDevices()
        state = NodeState(topology, unhealthy_gpus=sick.gpus, unhealthy_nics=sick.nics)
        _, overlapping = book_in_claim_order(state, self._observed.get(node, {}).values())
        untrusted = {booking.key: why for booking, why in overlapping}
        flights = self._inflight.get(node, {})
        # In-flight decisions replace what their pods held (a realigned pod's old GPUs
        # may be what another in-flight decision took): release all of them first.
        for key in flights:
            state.release(key)
            untrusted.pop(key, None)
        for key, assignment in flights.items():
            try:
                state.apply(key, assignment)
            except OverlapError as exc:
                untrusted[key] = str(exc)
        book_holds(state, self._dra_holds.get(node, {}))
        self._states[node] = state
        self._untrusted[node] = untrusted
        self._dirty.add(node)
        return sorted(set(untrusted) - before)
