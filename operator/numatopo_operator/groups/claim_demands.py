"""What group members' ResourceClaims ask of each candidate node, counted in their requests
before a group is planned (the reading is `numatopo_engine.dra.claims.claim_demand`).

A member whose devices come from its claims alone asks no device-plugin resource: planned
by its requests, it would take no GPU, and the plan could put more claimed GPUs on a node
than it has free. docs/DESIGN.md, "GPUs on DRA clusters" under "Groups", gives the rules:
candidates left out, free devices no claim may have booked away, undecidable members.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from numatopo_engine.domains import Member, NodeCandidate
from numatopo_engine.dra import api
from numatopo_engine.dra.claims import (
    ClaimDemand,
    PodClaim,
    UndecidedError,
    claim_demand,
    restricted_to,
)
from numatopo_engine.dra.join import DraNode
from numatopo_engine.errors import UnsatisfiableError
from numatopo_operator.dra_extender import extended_asked, extended_state, read_claims
from numatopo_operator.groups.members import MemberView
from numatopo_operator.runtime import Runtime

logger = logging.getLogger(__name__)

UNDECIDED = "numatopo cannot judge them there: "


@dataclass(frozen=True, slots=True)
class Counted:
    members: list[Member]
    nodes: dict[str, NodeCandidate]
    left_out: dict[str, str]
    """node -> why members' claims cannot be served there."""


@dataclass(frozen=True, slots=True)
class _Claimer:
    index: int
    entries: Sequence[PodClaim]
    claims: Mapping[str, api.ResourceClaim]
    classes: Mapping[str, api.DeviceClass]
    shape: str
    """What the demand depends on: members of one template share it (computed once)."""


# (shape, node) -> (the joined slices judged on, what was found): a group waiting for room
# is planned again and again, each judgement evaluating CEL selectors on every device
# (~8 ms a node on a p4d). A new join (slices or spec changed) is judged afresh.
_judged: dict[tuple[str, str], tuple[DraNode, ClaimDemand | str]] = {}
MAX_JUDGED = 8192


class ClaimsPendingError(Exception):
    """A member's claim is not there yet: planned now, its devices would not be counted."""


def _claimers(
    runtime: Runtime, views: Sequence[MemberView], members: Sequence[Member]
) -> list[_Claimer]:
    """Claims-only members, as watched; `ClaimsPendingError` while a claim of theirs is missing."""
    found = []
    for index, (view, member) in enumerate(zip(views, members, strict=True)):
        read = read_claims(runtime, view.body)
        if isinstance(read, str):
            raise ClaimsPendingError(f"member {view.key}'s claim {read} does not exist yet")
        if read is None:
            continue
        entries, claims, classes = read
        specs = [
            (
                e.name,
                e.containers,
                claims[e.claim].spec.model_dump(mode="json") if e.claim else None,
            )
            for e in entries
        ]
        kinds = {name: c.spec.model_dump(mode="json") for name, c in sorted(classes.items())}
        asked = repr(member.request.containers) + repr(member.request.init_containers)
        shape = asked + json.dumps([specs, kinds], sort_keys=True, default=str)
        found.append(_Claimer(index, entries, claims, classes, shape))
    return found


def _demands(
    claimers: Sequence[_Claimer],
    members: Sequence[Member],
    joined: Mapping[str, tuple[NodeCandidate, DraNode]],
) -> dict[str, dict[str, ClaimDemand | str]]:
    """shape -> node -> its demand there, or why there is none (starting `UNDECIDED` where
    numatopo cannot judge it). Runs in the engine's thread (selectors are CEL)."""
    out: dict[str, dict[str, ClaimDemand | str]] = {}
    for claimer in claimers:
        if claimer.shape in out:
            continue
        base = members[claimer.index].request
        per_node: dict[str, ClaimDemand | str] = {}
        for node, (candidate, dra_node) in joined.items():
            known = _judged.get((claimer.shape, node))
            if known is not None and known[0] is dra_node:
                per_node[node] = known[1]
                continue
            try:
                per_node[node] = claim_demand(
                    candidate.topology, base, claimer.entries, claimer.claims, claimer.classes,
                    dra_node,
                )  # fmt: skip
            except UndecidedError as exc:
                per_node[node] = f"{UNDECIDED}{exc}"
            except UnsatisfiableError as exc:
                per_node[node] = str(exc)
            if len(_judged) >= MAX_JUDGED:
                _judged.clear()
            _judged[(claimer.shape, node)] = (dra_node, per_node[node])
        out[claimer.shape] = per_node
    return out


def _asked(demand: ClaimDemand) -> tuple[Any, Any]:
    return demand.request.containers, demand.request.init_containers


async def count_claims(
    runtime: Runtime,
    views: Sequence[MemberView],
    members: Sequence[Member],
    nodes: Mapping[str, NodeCandidate],
) -> Counted:
    """`members` with their claims' devices counted, and the candidates that can serve
    them (restricted to the devices the claims may have, where that is safe)."""
    claimers = _claimers(runtime, views, members)
    if not claimers:
        return Counted(list(members), _extended_served(runtime, members, dict(nodes), {}), {})
    joined: dict[str, tuple[NodeCandidate, DraNode]] = {}
    for node, candidate in nodes.items():
        dra_node = runtime.dra_holds.joined(node, candidate.topology)
        if dra_node is not None and dra_node.devices:
            joined[node] = (candidate, dra_node)
    demands = await runtime.in_engine_thread(_demands, claimers, members, joined)
    counted = list(members)
    kept = dict(nodes)
    left_out: dict[str, str] = {}
    gpus: dict[str, set[int]] = {}
    nics: dict[str, set[str]] = {}
    changed: set[int] = set()
    for claimer in claimers:
        per_node, member = demands[claimer.shape], members[claimer.index]
        found = {n: d for n, d in sorted(per_node.items()) if isinstance(d, ClaimDemand)}
        undecided = any(isinstance(d, str) and d.startswith(UNDECIDED) for d in per_node.values())
        if not found and (undecided or not per_node):
            why = next((d for d in per_node.values() if isinstance(d, str)), "no DRA devices")
            logger.info(
                "group member %s: its claims are not counted (%s); kube-scheduler allocates "
                "them on the planned node", member.key, why,
            )  # fmt: skip
            continue
        # Judged on every node publishing devices: planned by its CPUs alone where they
        # do not fit (anywhere, where none), it would sit Pending: such nodes are left out.
        asked = _asked(next(iter(found.values()))) if found else None
        if asked is not None:
            # The containers' counts only: a demand judged once per shape names the pod
            # it was judged for, and the member keeps its own name and options.
            request = dataclasses.replace(
                member.request, containers=asked[0], init_containers=asked[1]
            )
            counted[claimer.index] = Member(member.key, member.rank, request)
            changed.add(claimer.index)
        for node in list(kept):
            demand = found.get(node)
            if demand is None or _asked(demand) != asked:
                kept.pop(node)
                there = per_node.get(node, "it publishes no DRA devices")
                why = there if isinstance(there, str) else "they ask other devices there"
                left_out[node] = f"member {member.key}'s claims: {why}"
                continue
            gpus.setdefault(node, set()).update(demand.gpus)
            nics.setdefault(node, set()).update(demand.nics)
    others = [m for i, m in enumerate(counted) if i not in changed]
    theirs = [c for m in others for c in (*m.request.containers, *m.request.init_containers)]
    restrict_gpus = not any(c.gpus for c in theirs)
    restrict_nics = not any(c.nics for c in theirs)
    if not restrict_gpus:
        kept = _extended_served(runtime, others, kept, gpus)
    if changed and (restrict_gpus or restrict_nics):
        for node, candidate in kept.items():
            state = candidate.state
            allowed_gpus = gpus.get(node, set()) if restrict_gpus else state.free_gpus()
            allowed_nics = nics.get(node, set()) if restrict_nics else state.free_nics()
            restricted = restricted_to(state, allowed_gpus, allowed_nics)
            kept[node] = NodeCandidate(candidate.topology, restricted)
    return Counted(counted, kept, left_out)


def _extended_served(
    runtime: Runtime,
    members: Sequence[Member],
    nodes: dict[str, NodeCandidate],
    claimed: Mapping[str, set[int]],
) -> dict[str, NodeCandidate]:
    """`nodes` with, where a DeviceClass serves a GPU resource `members` ask (KEP-5004:
    `nvidia.com/gpu` from a DRA driver), the free GPUs it does not select booked away, the
    extender's rule (`dra_extender.extended_state`): kube-scheduler's claim for a member gets
    only those there. GPUs `claimed` (other members' claims may have them) stay free."""
    asked = extended_asked(runtime, (m.request for m in members))
    if not asked:
        return nodes
    out = {}
    for node, candidate in nodes.items():
        state = candidate.state
        served = extended_state(runtime, node, state, asked)
        if served is not state:
            allowed = served.free_gpus() | (claimed.get(node, set()) & state.free_gpus())
            state = restricted_to(state, allowed, state.free_nics())
        out[node] = NodeCandidate(candidate.topology, state)
    return out
