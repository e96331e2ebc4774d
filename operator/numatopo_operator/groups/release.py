"""The two phases of a group placement and their undoing (I/O; docs/DESIGN.md, "Groups
across nodes: the operator protocol"): `plan` (phase 1), `release` (phase 2), `void` (a
partial plan taken back), `recover` (replacements placed next to a running group). Every
write is fenced (`Runtime.check_may_write`)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from numatopo_engine import annotations as keys
from numatopo_engine import node_rules, pod_request
from numatopo_engine.annotations import Assignment, State
from numatopo_engine.domains import (
    NODE_LEVEL,
    Anchor,
    DomainTree,
    GroupPlacement,
    Member,
    NodeCandidate,
    place_group,
)
from numatopo_engine.errors import InvalidRequestError, OverlapError, UnsatisfiableError
from numatopo_engine.groups import GroupSpec
from numatopo_engine.network_topology import NetworkTopologySpec
from numatopo_operator import pod_writes, translate
from numatopo_operator.errors import KubeError, KubeNotFoundError, NodeBusyError
from numatopo_operator.groups import members as group_members
from numatopo_operator.groups.claim_demands import ClaimsPendingError, count_claims
from numatopo_operator.groups.indexes import NodeView
from numatopo_operator.groups.members import Expectation, MemberView, PlacementRecord
from numatopo_operator.pod_view import PodView
from numatopo_operator.runtime import Runtime

logger = logging.getLogger(__name__)


class GroupUnplaceableError(Exception):
    """The group cannot be placed now; the message says why (an Event carries it)."""


class GroupInvalidError(GroupUnplaceableError):
    """A member's request cannot be read: only a person can fix it."""


def known_topologies(runtime: Runtime) -> dict[str, NetworkTopologySpec]:
    """Every valid NetworkTopology, by name."""
    index = runtime.groups.topologies or {}
    found = {name: next(iter(specs), None) for name, specs in index.items()}
    return {name: spec for name, spec in found.items() if spec is not None}


def choose_topology(runtime: Runtime, spec: GroupSpec) -> NetworkTopologySpec | None:
    """The group's NetworkTopology: the one it names, the only one, or `default`; None
    when none applies and it names no level (spreads anywhere)."""
    known = known_topologies(runtime)
    if spec.topology is not None:
        chosen = known.get(spec.topology)
        if chosen is None:
            raise GroupUnplaceableError(
                f"NetworkTopology {spec.topology!r} (named by {keys.TOPOLOGY}) does not exist "
                f"or is invalid; known: {', '.join(sorted(known)) or 'none'}"
            )
        return chosen
    if len(known) == 1:
        return next(iter(known.values()))
    if "default" in known:
        return known["default"]
    if spec.required is None and spec.preferred is None:
        return None
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
    group_state = runtime.groups
    labels = {
        node: view.labels
        for node in group_state.nodes or {}
        if (view := group_state.node_view(node)) is not None
    }
    return DomainTree.build(list(levels), labels)


def _node_terms(members: Sequence[MemberView]) -> list[Mapping[str, Any]]:
    """The distinct node-filter fields of the members' pod specs (one per pod template)."""
    distinct: dict[str, Mapping[str, Any]] = {}
    for member in members:
        spec = member.body.get("spec") or {}
        terms = {k: spec.get(k) for k in ("tolerations", "nodeSelector", "affinity")}
        distinct.setdefault(json.dumps(terms, sort_keys=True, default=str), terms)
    return list(distinct.values())


def _candidates(runtime: Runtime, members: Sequence[MemberView]) -> dict[str, NodeCandidate]:
    """Nodes a member may go to now: a current Numatopology, schedulable, and passing
    kube-scheduler's node filters (`node_rules`) for every member (a released member is
    bound by its nodeSelector whatever the scheduler would say)."""
    terms = _node_terms(members)
    found: dict[str, NodeCandidate] = {}
    ledger, group_state = runtime.ledger, runtime.groups
    stale = runtime.stale_nodes()
    for node, topology, state in ledger.frozen_candidates(ledger.nodes()):
        if topology is None or state is None or node in stale:
            continue
        view = group_state.node_view(node)
        if view is not None and not view.schedulable:
            continue
        shown = (view or NodeView({}, True)).as_node(node)
        if any(node_rules.refusal(spec, shown) for spec in terms):
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
    topology = choose_topology(runtime, spec)
    return domain_tree(runtime, topology.labels if topology is not None else [])


async def _place(
    runtime: Runtime,
    spec: GroupSpec,
    views: Sequence[MemberView],
    tree: DomainTree,
    anchors: Sequence[Anchor | None] = (None,),
) -> tuple[GroupPlacement, Anchor | None]:
    """The placement of `views` at the first of `anchors` that fits; else GroupUnplaceableError."""
    try:
        counted = await count_claims(
            runtime, views, _members(runtime, views), _candidates(runtime, views)
        )
    except ClaimsPendingError as exc:
        raise GroupUnplaceableError(str(exc)) from None
    members, nodes = counted.members, counted.nodes
    reason = ""
    for anchor in anchors:
        try:
            placement = await runtime.in_engine_thread(
                place_group, tree, members, nodes, spec=spec, anchor=anchor,
                mix=runtime.workload.mix(), engine=runtime.decisions,
            )  # fmt: skip
        except UnsatisfiableError as exc:
            reason = exc.reason
        else:
            return placement, anchor
    left_out = "".join(f"; {node}: {why}" for node, why in sorted(counted.left_out.items())[:3])
    raise GroupUnplaceableError(f"{reason} ({len(nodes)} usable nodes{left_out})")


def _book(runtime: Runtime, assignments: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Reserve every assignment, or none (NodeBusyError); no await, so nothing interleaves."""
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
    """`write` each view, `WRITE_CONCURRENCY` at once, all awaited: (views written, first error)."""
    gate = asyncio.Semaphore(WRITE_CONCURRENCY)

    async def one(view: MemberView) -> None:
        async with gate:
            await write(view)

    outcomes = await asyncio.gather(*(one(v) for v in views), return_exceptions=True)
    done = [v for v, outcome in zip(views, outcomes, strict=True) if outcome is None]
    return done, next((o for o in outcomes if isinstance(o, BaseException)), None)


async def _write_all(
    runtime: Runtime,
    spec: GroupSpec,
    views: Sequence[MemberView],
    placement: GroupPlacement,
    *,
    level: str | None,
    path: Sequence[str],
) -> None:
    """Book and write every member's plan; on failure, take back and re-raise."""
    booked = _book(runtime, placement.assignments)
    planned = datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds")

    async def write(view: MemberView) -> None:
        text = PlacementRecord(
            group=spec.name,
            level=level,
            domain=path[-1] if path else None,
            path=list(path) if level is not None else None,
            rank=view.rank,
            planned=planned,
        ).to_annotation()
        assignment = booked[view.key]
        pod = PodView.of(view.body)
        await pod_writes.write_outcome(runtime, pod, State.ASSIGNED, assignment, placement=text)
        runtime.groups.plans[view.key] = (assignment.node, text)
        runtime.groups.book.expected[view.key] = Expectation(placement=text, gated=True)

    written, error = await _each(views, write)
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


async def search(runtime: Runtime, spec: GroupSpec, views: Sequence[MemberView]) -> GroupPlacement:
    """Where the group would go now, nothing written (`explain`); else GroupUnplaceableError."""
    placement, _ = await _place(runtime, spec, views, setting(runtime, spec))
    return placement


async def plan(runtime: Runtime, spec: GroupSpec, views: Sequence[MemberView]) -> GroupPlacement:
    """Phase 1 for the whole group; raises GroupUnplaceableError when it does not fit."""
    placement = await search(runtime, spec, views)
    await _write_all(runtime, spec, views, placement, level=placement.level, path=placement.path)
    return placement


async def void(runtime: Runtime, views: Sequence[MemberView]) -> None:
    """Take the plans of still-gated `views` back: annotations removed, ledger freed."""

    async def write(view: MemberView) -> None:
        namespace, _, name = view.key.partition("/")
        runtime.check_may_write()
        with contextlib.suppress(KubeNotFoundError):  # gone: its deletion frees it
            await pod_writes.write_taken_back(
                runtime, namespace, name, uid=view.uid, placement=True
            )
        runtime.groups.plans.pop(view.key, None)
        runtime.groups.book.expected[view.key] = Expectation(placement=None, gated=True)
        runtime.ledger.cancel(view.key)
        runtime.ledger.forget(view.key)

    _, error = await _each(views, write)
    runtime.metrics.ledger_pods.set(len(runtime.ledger))
    if error is not None:
        raise error


async def release(runtime: Runtime, views: Sequence[MemberView]) -> dict[str, str]:
    """Phase 2 (member key -> node): nodeSelector and gate in one guarded JSON patch each,
    read again and retried once when the guard fails."""
    released: dict[str, str] = {}

    async def write(view: MemberView) -> None:
        # The node of the member's plan: this process's own write, else its assignment.
        mine = runtime.groups.plans.get(view.key)
        node = mine[0] if mine is not None else group_members.planned_node(view.body)
        if node is None:
            raise GroupUnplaceableError(f"member {view.key} has no planned node to release onto")
        namespace, _, name = view.key.partition("/")
        body: Mapping[str, object] = view.body
        for attempt in (1, 2):
            operations = group_members.release_operations(body, node)
            runtime.check_may_write()
            try:
                if operations:
                    await runtime.kube.patch_pod_spec(namespace, name, operations, uid=view.uid)
                break
            except KubeError as exc:
                if attempt == 2 or isinstance(exc, KubeNotFoundError):
                    raise
                body = await runtime.kube.get_pod(namespace, name)
        text = (
            group_members.placement_text(view.body)
            or runtime.groups.plans.get(view.key, ("", ""))[1]
        )
        runtime.groups.book.expected[view.key] = Expectation(placement=text or None, gated=False)
        runtime.groups.plans.pop(view.key, None)
        released[view.key] = node

    _, error = await _each(views, write)
    if error is not None:
        raise error
    return released


def recorded_domain(
    tree: DomainTree, record: PlacementRecord, running_node: str | None
) -> Anchor | None:
    """The domain a running group's record names by its path; None for none or an
    ambiguous one. Records older than paths name `level=domain` only: that level's domain
    around a running member, else the only one of that value."""
    level = record.level
    if level is None or record.domain is None:
        return None
    if level == NODE_LEVEL and tree.implicit_nodes:
        if record.path is not None:
            return Anchor(level, tuple(record.path))
        return _domain_of(tree, level, record.domain) if record.domain in tree.paths else None
    index = tree.depth.get(level)
    if index is None:
        return None
    if record.path is not None:
        path = tuple(record.path)
        return Anchor(level, path) if len(path) == index + 1 else None
    around = _domain_of(tree, level, running_node or "")
    if around is not None and around.path[-1] == record.domain:
        return around
    same = [p for p in tree.members[index] if p[-1] == record.domain]
    return Anchor(level, same[0]) if len(same) == 1 else None


@dataclass(frozen=True, slots=True)
class Around:
    """The running members a replacement is placed next to."""

    nodes: Mapping[int, str]
    """rank -> node of every running member with a rank."""
    ranks: tuple[int, ...] = ()
    """The replacements' ranks (of one slice, with slices)."""


def replacement_anchors(
    tree: DomainTree,
    spec: GroupSpec,
    record: PlacementRecord | None,
    running_node: str | None,
    around: Around | None = None,
) -> list[Anchor | None]:
    """Where a replacement may go, best first (docs/DESIGN.md, "Groups across nodes: the
    operator protocol", "Member recovery"); None: anywhere the engine allows."""
    found: list[Anchor | None] = [None]
    recorded = None
    if record is not None and record.level is not None:
        recorded = recorded_domain(tree, record, running_node)
        if recorded is None and spec.required is not None:
            raise GroupUnplaceableError(
                f"the group's recorded domain {record.level}={record.domain} is not one "
                "domain of the network topology now; the replacement waits rather than guess"
            )
    if recorded is not None:
        found = [recorded]
        top = tree.depth[spec.required] + 1 if spec.required in tree.depth else 1
        path = recorded.path
        for length in range(len(path) - 1, top - 1, -1):
            found.append(Anchor(tree.levels[length - 1], path[:length]))
        if spec.required is None:
            found.append(None)
    if around is not None and len(around.ranks) == 1:
        near = _next_to(tree, around.nodes, around.ranks[0])
        inner: list[Anchor | None] = [a for a in near if recorded is None or _inside(a, recorded)]
        found = inner + found
    sliced = _slice_domain(tree, spec, around)
    if sliced is not None:
        found = [a for a in found if a is not None and _inside(a, sliced)]
        if sliced not in found:
            found.append(sliced)
    return list(dict.fromkeys(found))


def _inside(anchor: Anchor, outer: Anchor) -> bool:
    return anchor.path[: len(outer.path)] == outer.path


def _next_to(tree: DomainTree, nodes: Mapping[int, str], rank: int) -> list[Anchor]:
    """The nodes of ranks rank-1 and rank+1, then their domains, narrowest first."""
    near = [nodes[r] for r in (rank - 1, rank + 1) if r in nodes and nodes[r] in tree.paths]
    levels = [NODE_LEVEL, *(level for level in reversed(tree.levels) if level != NODE_LEVEL)]
    domains = (_domain_of(tree, level, node) for level in levels for node in near)
    return [anchor for anchor in domains if anchor is not None]


def _slice_domain(tree: DomainTree, spec: GroupSpec, around: Around | None) -> Anchor | None:
    """The domain of the replacement's slice: that of a running member of the slice."""
    if spec.slice is None or around is None or not around.ranks:
        return None
    level, piece = spec.slice
    first = around.ranks[0] - around.ranks[0] % piece
    mates = [around.nodes[r] for r in range(first, first + piece) if r in around.nodes]
    return next(filter(None, (_domain_of(tree, level, node) for node in mates)), None)


def _domain_of(tree: DomainTree, level: str, node: str) -> Anchor | None:
    """The domain of `level` holding `node` (the node itself at an implicit node level)."""
    if level == NODE_LEVEL and tree.implicit_nodes:
        return Anchor(level, tree.node_path(node))
    index = tree.depth.get(level)
    path = tree.paths.get(node, ())
    if index is not None and len(path) > index:
        return Anchor(level, path[: index + 1])
    return None


@dataclass(frozen=True, slots=True)
class Recovered:
    stayed: bool
    """Whether every replacement landed inside the group's recorded domain."""
    level: str | None
    path: tuple[str, ...]
    recorded: Anchor | None
    """The group's recorded domain, when it could be told."""


async def recover(
    runtime: Runtime,
    spec: GroupSpec,
    views: Sequence[MemberView],
    anchor: PlacementRecord | None,
    running_node: str | None,
    *,
    around: Around | None = None,
) -> Recovered:
    """Plan replacements of a running group's members next to their neighbours, in its domain."""
    tree = setting(runtime, spec)
    anchors = replacement_anchors(tree, spec, anchor, running_node, around)
    placement, kept = await _place(runtime, spec, views, tree, anchors)
    recorded = None if anchor is None else recorded_domain(tree, anchor, running_node)
    stayed = recorded is None or (kept is not None and _inside(kept, recorded))
    # The domain the replacements share with their group: the recorded one, else the
    # wider one they were kept in, else the engine's own choice.
    level, path = (kept.level, kept.path) if kept else (placement.level, placement.path)
    if stayed and recorded is not None:
        level, path = recorded.level, recorded.path
    await _write_all(runtime, spec, views, placement, level=level, path=path)
    return Recovered(stayed, level, path, recorded)


def preferred_note(runtime: Runtime, spec: GroupSpec, nodes: Iterable[str]) -> str:
    """Whether the members share one domain of the preferred level, else how many they span;
    "" without a preferred level (or when it is no level)."""
    preferred = spec.preferred
    count = setting(runtime, spec).spanned(preferred, nodes) if preferred is not None else None
    if count is None:
        return ""
    if count == 1:
        return f"; inside one domain of the preferred level {preferred}"
    return (
        f"; across {count} domains of the preferred level {preferred}, the fewest "
        "possible (no one domain of it holds the group now)"
    )
