"""The extender's judgement of a DRA pod: each candidate node by its claims' devices.

A pod whose GPUs and NICs come from ResourceClaims alone asks no device-plugin resource:
judged by its requests, every node with CPUs would fit. Each candidate is judged as a DRA
decision would be (docs/DESIGN.md, "GPUs on DRA clusters", "The extender"), from the
watched copies (`Runtime.dra_holds`, no API call per cycle). What numatopo cannot judge as
the allocator would, or a claim missing or unreadable: None (judged by its requests).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

import pydantic

from numatopo_engine.dra import api
from numatopo_engine.dra.claims import (
    PodClaim,
    UndecidedError,
    decide_claims,
    pod_claims,
    restricted_to,
)
from numatopo_engine.dra.pods import devices_from_claims
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.request import PodRequest
from numatopo_engine.state import NodeState
from numatopo_operator import translate
from numatopo_operator.ledger import released
from numatopo_operator.pod_view import PodView
from numatopo_operator.runtime import Runtime


@dataclass
class ClaimVerdicts:
    ranks: dict[str, float] = field(default_factory=dict)
    """The decision's score where the claims fit."""
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)


def from_claims(runtime: Runtime, pod: Mapping[str, Any]) -> bool:
    """Whether the pod's GPUs and NICs come from its ResourceClaims alone."""
    resources = runtime.settings.resources
    return devices_from_claims(pod, lambda r: resources.is_gpu(r) or resources.is_nic(r))


def read_claims(
    runtime: Runtime, pod: Mapping[str, Any]
) -> tuple[list[PodClaim], dict[str, api.ResourceClaim], dict[str, api.DeviceClass]] | str | None:
    """The watched claims and classes of a pod whose devices come from its claims alone;
    None for another pod or a claim unreadable; the first claim not created (a template's)
    or not watched yet, by name."""
    entries = pod_claims(pod)
    if not from_claims(runtime, pod) or not entries:
        return None  # no claim of its own (kube-scheduler's for extended resources aside)
    namespace, watched = PodView.of(pod).namespace, runtime.dra_holds.bodies
    for entry in entries:
        if entry.claim is None or f"{namespace}/{entry.claim}" not in watched:
            return entry.claim or entry.name
    try:
        claims = {
            e.claim: api.ResourceClaim.model_validate(watched[f"{namespace}/{e.claim}"])
            for e in entries
            if e.claim is not None
        }
        classes = {
            name: api.DeviceClass.model_validate(body)
            for name, body in runtime.dra_holds.classes.items()
        }
    except pydantic.ValidationError:
        return None
    return entries, claims, classes


async def judge_claims(
    runtime: Runtime, pod: Mapping[str, Any], request: PodRequest, names: Sequence[str]
) -> ClaimVerdicts | None:
    """The DRA pod on each of `names`; None: not a pod judged by its claims here."""
    read = read_claims(runtime, pod)
    if not isinstance(read, tuple):
        return None
    entries, claims, classes = read
    verdicts = ClaimVerdicts()
    nodes = []
    stale = runtime.stale_nodes()
    for name, topology, state in runtime.ledger.frozen_candidates(names):
        if topology is None or state is None:
            verdicts.unresolvable[name] = translate.NO_NUMATOPOLOGY
            continue
        if name in stale:
            verdicts.unresolvable[name] = stale[name]
            continue
        joined = runtime.dra_holds.joined(name, topology)
        if joined is None or not joined.devices:
            verdicts.unresolvable[name] = "the node publishes no DRA devices"
            continue
        # The node's bookings minus the pod's own: an earlier attempt must not count.
        nodes.append((name, topology, released(state, request.key), joined))
    engine = runtime.decisions

    def judge() -> ClaimVerdicts:
        for name, topology, state, joined in nodes:
            try:
                decision = decide_claims(
                    topology, state, request, entries, claims, classes, joined, engine=engine
                )
            except UnsatisfiableError as exc:
                verdicts.failed[name] = str(exc)
                continue
            verdicts.ranks[name] = float(decision.score)
        return verdicts

    try:
        return await runtime.in_engine_thread(judge)
    except UndecidedError:
        return None


def extended_asked(runtime: Runtime, requests: Iterable[PodRequest]) -> set[str]:
    """The GPU resources `requests` ask by name (containers and init containers) that a
    DeviceClass may serve (KEP-5004); none where no driver publishes ResourceSlices."""
    if not runtime.dra_holds.slices:
        return set()
    return {
        c.gpu_resource
        for r in requests
        for c in (*r.containers, *r.init_containers)
        if c.gpus and c.gpu_resource
    }


def extended_state(runtime: Runtime, node: str, state: NodeState, resources: Set[str]) -> NodeState:
    """`state` of `node` with its free GPUs that no DeviceClass serving one of `resources`
    (extended resources the pod asks) selects booked away, where such a class selects any
    GPU there (DRA serves the name on that node, KEP-5004; elsewhere `state` itself): a
    pod asking `nvidia.com/gpu` gets only those through kube-scheduler's claim."""
    topology = runtime.ledger.topology(node)
    joined = runtime.dra_holds.joined(node, topology)
    if joined is None:
        return state
    names = runtime.dra_holds.extended(node, topology)
    served = {
        d.gpu for d in joined.devices if d.gpu is not None and resources & set(names.get(d.id, ()))
    }
    free = state.free_gpus()
    if not served or free <= served:
        return state
    return restricted_to(state, served, state.free_nics())
