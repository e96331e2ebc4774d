"""The two phases of a group placement, and their undoing (I/O).

Phase 1, `plan`: `place_group` over the ledger's frozen view of every usable node;
every member's assignment is booked in the ledger at once (all or none), then written
on its still-gated pod together with its `numatopo.io/group-placement` record. Phase 2,
`release`: once every member carries an assignment of the same plan, each member gets
one JSON patch adding `spec.nodeSelector[kubernetes.io/hostname]` and removing the
gate. `void` takes a partial plan back (assignment, state and record removed, ledger
released). `recover` places replacement members of a running group next to it.

Every write first checks that this replica may write (`Runtime.check_may_write`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from numatopo_engine import annotations as keys
from numatopo_engine import pod_request
from numatopo_engine.annotations import Assignment, State
from numatopo_engine.domains import DomainTree, GroupPlacement, Member, NodeCandidate, place_group
from numatopo_engine.errors import InvalidRequestError, OverlapError, UnsatisfiableError
from numatopo_engine.groups import GroupSpec
from numatopo_engine.network_topology import HOSTNAME_LABEL, NetworkTopologySpec
from numatopo_operator import grouping, translate
from numatopo_operator.errors import KubeError, KubeNotFoundError, NodeBusyError
from numatopo_operator.grouping import Expectation, MemberView, PlacementRecord
from numatopo_operator.runtime import Runtime

__all__ = [
    "Placed",
    "choose_topology",
    "domain_tree",
    "plan",
    "recover",
    "release",
    "setting",
    "void",
]

logger = logging.getLogger(__name__)


class GroupUnplaceableError(Exception):
    """The group cannot be placed now; the message says why (an Event carries it)."""


class GroupInvalidError(GroupUnplaceableError):
    """A member's request cannot be read: only a person can fix it."""


def choose_topology(
    runtime: Runtime, spec: GroupSpec
) -> tuple[str | None, NetworkTopologySpec | None]:
    """(name, spec) of the NetworkTopology the group is placed with: the one it names,
    else the only one, else the one named `default`; (None, None) when none applies
    and the group names no level (it may spread anywhere)."""
    index = runtime.gangs.topologies or {}
    found = {name: next(iter(specs), None) for name, specs in index.items()}
    known = {name: value for name, value in found.items() if value is not None}
    if spec.topology is not None:
        chosen = known.get(spec.topology)
        if chosen is None:
            raise GroupUnplaceableError(
                f"NetworkTopology {spec.topology!r} (named by {keys.TOPOLOGY}) does not exist "
                f"or is invalid; known: {', '.join(sorted(known)) or 'none'}"
            )
        return spec.topology, chosen
    if len(known) == 1:
        name, chosen = next(iter(known.items()))
        return name, chosen
    if "default" in known:
        return "default", known["default"]
    if spec.required is None and spec.preferred is None:
        return None, None
    raise GroupUnplaceableError(
        f"group {spec.key} names a level ({spec.required or spec.preferred}) but "
        + (
            "no NetworkTopology exists"
            if not known
            else f"there are several NetworkTopologies ({', '.join(sorted(known))}) and "
            f"none is named default: name one with {keys.TOPOLOGY}"
        )
    )


def domain_tree(runtime: Runtime, levels: Sequence[str]) -> DomainTree:
    """The domain tree of `levels` over every Node the operator knows."""
    index = runtime.gangs.nodes or {}
    labels = {}
    for node, views in index.items():
        view = next(iter(views), None)
        if view is not None:
            labels[node] = view.labels
    return DomainTree.build(list(levels), labels)


def _selector(member: MemberView) -> dict[str, str]:
    spec = member.body.get("spec") or {}
    found = spec.get("nodeSelector")
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, Mapping) else {}


def _candidates(runtime: Runtime, members: Sequence[MemberView]) -> dict[str, NodeCandidate]:
    """Nodes a member may go to now: a current Numatopology, schedulable, and matching
    the nodeSelector of every member (members of one group share a pod template)."""
    wanted: dict[str, str] = {}
    for member in members:
        wanted |= _selector(member)
    found: dict[str, NodeCandidate] = {}
    ledger, gangs = runtime.ledger, runtime.gangs
    stale = runtime.stale_nodes()
    for node, topology, state in ledger.frozen_candidates(ledger.nodes()):
        if topology is None or state is None or node in stale:
            continue
        view = gangs.node_view(node)
        if view is not None and not view.schedulable:
            continue
        labels = dict(view.labels) if view is not None else {}
        labels.setdefault(HOSTNAME_LABEL, node)
        if any(labels.get(k) != v for k, v in wanted.items()):
            continue
        found[node] = NodeCandidate(topology, state)
    return found


def _members(runtime: Runtime, views: Sequence[MemberView]) -> list[Member]:
    members = []
    for view in views:
        try:
            request = pod_request.request_from_pod(view.body, runtime.settings.resources)
        except InvalidRequestError as exc:
            raise GroupInvalidError(
                f"member {view.key}: {translate.invalid_message(exc)}"
            ) from None
        members.append(Member(view.key, view.rank, request))
    return members


def setting(runtime: Runtime, spec: GroupSpec) -> DomainTree:
    """The domain tree of the NetworkTopology the group is placed with (`choose_topology`)."""
    _, topology = choose_topology(runtime, spec)
    return domain_tree(runtime, topology.labels if topology is not None else [])


async def _place(
    runtime: Runtime,
    spec: GroupSpec,
    views: Sequence[MemberView],
    tree: DomainTree,
    anchors: Sequence[Mapping[str, str]] = ({},),
) -> tuple[GroupPlacement, Mapping[str, str]]:
    """The engine's placement of `views` (in its thread) and the anchor it kept to,
    trying `anchors` in order; raises GroupUnplaceableError with the engine's reason
    when none fits."""
    members = _members(runtime, views)
    nodes = _candidates(runtime, views)
    reason = ""
    for anchor in anchors:
        try:
            placement = await runtime.in_engine_thread(
                place_group, tree, members, nodes, spec=spec, anchor=anchor or None,
                mix=runtime.workload.mix(), engine=runtime.decisions,
            )  # fmt: skip
        except UnsatisfiableError as exc:
            reason = exc.reason
        else:
            return placement, anchor
    raise GroupUnplaceableError(f"{reason} ({len(nodes)} usable nodes)")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds")


def _book(runtime: Runtime, assignments: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Reserve every assignment in the ledger, or none (raises NodeBusyError). Runs
    without awaiting, so no other decision on the loop interleaves."""
    ledger = runtime.ledger
    by_node: dict[str, dict[str, Assignment]] = {}
    for key, assignment in assignments.items():
        by_node.setdefault(assignment.node, {})[key] = assignment
    booked: dict[str, Assignment] = {}
    try:
        for node, decisions in sorted(by_node.items()):
            base = ledger.next_seq(node)
            numbered = {
                key: decision.model_copy(update={"seq": base + i})
                for i, (key, decision) in enumerate(sorted(decisions.items()))
            }
            for key in numbered:
                if ledger.holds(key):
                    ledger.forget(key)
            ledger.reserve_all(node, numbered)
            booked |= numbered
    except (KeyError, OverlapError) as exc:
        for key in booked:
            ledger.cancel(key)
        raise NodeBusyError(f"nodes changed while the group was placed: {exc}") from None
    return booked


# Member writes in flight at once: a 512-member group is written in a few API round
# trips' time, without a burst the API server's priority and fairness would throttle.
WRITE_CONCURRENCY = 16


async def _each(
    views: Sequence[MemberView], write: Callable[[MemberView], Awaitable[None]]
) -> tuple[list[MemberView], BaseException | None]:
    """`write(view)` for every view, `WRITE_CONCURRENCY` at a time; returns the views
    written and the first error (the others are still awaited: nothing is left in flight)."""
    gate = asyncio.Semaphore(WRITE_CONCURRENCY)

    async def one(view: MemberView) -> None:
        async with gate:
            await write(view)

    outcomes = await asyncio.gather(*(one(v) for v in views), return_exceptions=True)
    done = [v for v, outcome in zip(views, outcomes, strict=True) if outcome is None]
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    return done, errors[0] if errors else None


async def _write_plan(
    runtime: Runtime, view: MemberView, assignment: Assignment, record: PlacementRecord
) -> None:
    namespace, _, name = view.key.partition("/")
    text = record.to_annotation()
    patch = {
        **translate.outcome_annotations(State.ASSIGNED, runtime.signed(view.body, assignment)),
        keys.GROUP_PLACEMENT: text,
    }
    runtime.check_may_write()
    await runtime.kube.patch_pod_annotations(namespace, name, patch)
    gangs = runtime.gangs
    gangs.plans[view.key] = (assignment.node, text)
    gangs.book.expect(view.key, Expectation(placement=text, gated=True))
    gangs.planned_writes += 1


@dataclass(frozen=True, slots=True)
class Placed:
    """A plan written: where, and in which order."""

    placement: GroupPlacement
    nodes: dict[str, str]
    """member key -> node."""


async def _write_all(
    runtime: Runtime,
    spec: GroupSpec,
    views: Sequence[MemberView],
    placement: GroupPlacement,
    *,
    level: str | None,
    domain: str | None,
) -> dict[str, str]:
    """Book and write the plan of every member in `views`; on any failure, take back
    what was written and re-raise. Returns member key -> node."""
    booked = _book(runtime, placement.assignments)
    planned = _now()
    todo = list(views)
    gangs = runtime.gangs
    crash = gangs.crash_after_planned
    if crash is not None:
        todo = todo[: max(crash - gangs.planned_writes, 0)]

    async def write(view: MemberView) -> None:
        record = PlacementRecord(
            group=spec.name, level=level, domain=domain, rank=view.rank, planned=planned
        )
        await _write_plan(runtime, view, booked[view.key], record)

    written, error = await _each(todo, write)
    if crash is not None and gangs.planned_writes >= crash:
        logger.critical("test crash point: exiting after %d planned members", crash)
        os._exit(70)
    if error is not None:
        done = {v.key for v in written}
        for key in booked:
            if key not in done:
                runtime.ledger.cancel(key)
        runtime.metrics.group_decisions.labels("write_failed").inc()
        try:
            await void(runtime, written)
        except Exception as exc:  # the next pass voids what is left
            logger.warning("taking back a failed plan of %s: %s", spec.key, exc)
        raise error
    return {key: assignment.node for key, assignment in booked.items()}


async def plan(runtime: Runtime, spec: GroupSpec, views: Sequence[MemberView]) -> Placed:
    """Phase 1 for the whole group; raises GroupUnplaceableError when it does not fit."""
    tree = setting(runtime, spec)
    placement, _ = await _place(runtime, spec, views, tree)
    nodes = await _write_all(
        runtime, spec, views, placement, level=placement.level, domain=placement.domain
    )
    return Placed(placement, nodes)


async def void(runtime: Runtime, views: Sequence[MemberView]) -> None:
    """Take the plans of still-gated `views` back: annotations removed, ledger freed."""

    async def write(view: MemberView) -> None:
        namespace, _, name = view.key.partition("/")
        runtime.check_may_write()
        with contextlib.suppress(KubeNotFoundError):  # gone: its deletion frees it
            await runtime.kube.patch_pod_annotations(namespace, name, grouping.void_annotations())
        runtime.gangs.plans.pop(view.key, None)
        runtime.gangs.book.expect(view.key, Expectation(placement=None, gated=True))
        runtime.ledger.cancel(view.key)
        runtime.ledger.forget(view.key)

    _, error = await _each(views, write)
    runtime.metrics.ledger_pods.set(len(runtime.ledger))
    if error is not None:
        raise error


def _plan_of(runtime: Runtime, view: MemberView) -> str | None:
    """The node of the member's plan: this process's own write, else its assignment."""
    mine = runtime.gangs.plans.get(view.key)
    if mine is not None:
        return mine[0]
    return grouping.planned_node(view.body)


async def release(runtime: Runtime, views: Sequence[MemberView]) -> dict[str, str]:
    """Phase 2 for `views`: nodeSelector and gate in one guarded JSON patch each (read
    again and retried once when the guard fails). Returns member key -> node."""
    released: dict[str, str] = {}

    async def write(view: MemberView) -> None:
        node = _plan_of(runtime, view)
        if node is None:
            raise GroupUnplaceableError(f"member {view.key} has no planned node to release onto")
        namespace, _, name = view.key.partition("/")
        body: Mapping[str, object] = view.body
        for attempt in (1, 2):
            operations = grouping.release_operations(body, node)
            runtime.check_may_write()
            try:
                if operations:
                    await runtime.kube.patch_pod_spec(namespace, name, operations)
            except KubeNotFoundError:
                raise
            except KubeError:
                if attempt == 2:
                    raise
                body = await runtime.kube.get_pod(namespace, name)
                continue
            break
        text = grouping.placement_text(view.body) or runtime.gangs.plans.get(view.key, ("", ""))[1]
        runtime.gangs.book.expect(view.key, Expectation(placement=text or None, gated=False))
        runtime.gangs.plans.pop(view.key, None)
        released[view.key] = node

    _, error = await _each(views, write)
    if error is not None:
        raise error
    return released


def _anchors(
    tree: DomainTree, spec: GroupSpec, anchor: PlacementRecord | None, running_node: str | None
) -> list[dict[str, str]]:
    """Where a replacement may go, best first: the group's recorded domain, then each
    wider domain around a running member (up to the required level), then anywhere
    allowed."""
    if anchor is None or anchor.level is None or anchor.domain is None:
        return [{}]
    levels = list(tree.levels)
    if anchor.level not in levels:
        return [{}]
    found = [{anchor.level: anchor.domain}]
    top = levels.index(spec.required) if spec.required in levels else 0
    for index in range(levels.index(anchor.level) - 1, top - 1, -1):
        wider = levels[index]
        value = tree.domain_of(running_node, wider) if running_node is not None else None
        if value is not None:
            found.append({wider: value})
    if spec.required is None:
        found.append({})
    return found


@dataclass(frozen=True, slots=True)
class Recovered:
    nodes: dict[str, str]
    stayed: bool
    """Whether every replacement landed inside the group's recorded domain."""
    level: str | None
    domain: str | None


async def recover(
    runtime: Runtime,
    spec: GroupSpec,
    views: Sequence[MemberView],
    anchor: PlacementRecord | None,
    running_node: str | None,
) -> Recovered:
    """Plan replacement members of a running group, in its domain when they fit there."""
    tree = setting(runtime, spec)
    anchors = _anchors(tree, spec, anchor, running_node)
    placement, kept = await _place(runtime, spec, views, tree, anchors)
    stayed = anchor is None or anchor.level is None or kept == anchors[0]
    # The domain the replacements share with their group: the recorded one, else the
    # wider one they were kept in, else the engine's own choice.
    level, domain = next(iter(kept.items())) if kept else (placement.level, placement.domain)
    written = await _write_all(runtime, spec, views, placement, level=level, domain=domain)
    return Recovered(written, stayed, level, domain)


def elapsed(since: float | None) -> float:
    return 0.0 if since is None else max(time.monotonic() - since, 0.0)
