"""A pod's ResourceClaims decided on one node with the engine, as claim allocations (docs/DESIGN.md,
"GPUs on DRA clusters", Decide). A claim's devices go to the first container naming it in
`resources.claims`, else to the first app container. What numatopo cannot judge as the scheduler's
allocator would raises `UndecidedError`, leaving the claim to the scheduler ("Fail safe").
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from numatopo_engine.allocation import Decision, Engine, allocate
from numatopo_engine.annotations import Assignment, ContainerAssignment
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.dra.api import (
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceAllocationResult,
    DeviceClass,
    DeviceRequestAllocationResult,
    ResourceClaim,
    node_selector_for,
)
from numatopo_engine.dra.join import DeviceKind, DraDevice, DraNode, attribute
from numatopo_engine.dra.selectors import SelectorRefusedError, Selectors
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.request import ContainerRequest, PodRequest
from numatopo_engine.state import NodeState

INELIGIBLE = "numatopo.io/dra-ineligible"
MAX_VARIANTS = 64


class UndecidedError(Exception):
    """numatopo cannot decide these claims as the scheduler would: leave them to it."""


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of `pod.spec.resourceClaims`, with the claim it names (None: the claim from its
    template does not exist yet); or the claim kube-scheduler made for the pod's extended resources
    (`extended.extended_claim`)."""

    name: str
    claim: str | None
    containers: tuple[str, ...]  # containers naming it in resources.claims, spec order
    requests: tuple[tuple[str, str], ...] = ()
    """(request, container): a device of that request goes to that container."""


@dataclass(frozen=True, slots=True)
class ClaimDecision:
    node: str
    assignment: Assignment
    allocations: Mapping[str, AllocationResult]  # claim name -> its allocation
    score: int


def pod_claims(pod: Mapping[str, Any]) -> list[PodClaim]:
    """Direct claims by name; template ones by `status.resourceClaimStatuses` (None before)."""
    spec = pod.get("spec") or {}
    generated = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    users: dict[str, list[str]] = {}
    for container in spec.get("containers") or []:
        for ref in (container.get("resources") or {}).get("claims") or []:
            users.setdefault(str(ref.get("name")), []).append(str(container.get("name")))
    found = []
    for entry in spec.get("resourceClaims") or []:
        name = str(entry.get("name"))
        claim = entry.get("resourceClaimName") or generated.get(name)
        found.append(PodClaim(name, claim, tuple(users.get(name, ()))))
    return found


def unsupported(claim: ResourceClaim) -> str | None:
    """Why numatopo cannot decide `claim` as the allocator would; None when it can."""
    devices = claim.spec.devices
    if claim.status.allocation is not None:
        return "it is allocated already"
    extras = [*claim.spec.extras(), *devices.extras()]
    for request in devices.requests:
        extras += request.extras()
        exact = request.exactly
        if exact is None:
            return f"request {request.name} is no `exactly` request (prioritized list)"
        extras += exact.extras()
        if exact.allocation_mode != "ExactCount":
            return f"request {request.name} asks allocationMode {exact.allocation_mode}"
        if exact.admin_access:
            return f"request {request.name} asks admin access"
    for constraint in devices.constraints:
        extras += constraint.extras()
        if constraint.match_attribute is None:
            return "a constraint other than matchAttribute"
    if extras:
        return "it uses " + ", ".join(sorted(set(extras)))
    return None


@dataclass
class _Request:
    claim: str
    name: str
    count: int
    kind: DeviceKind
    eligible: list[DraDevice]
    container: str
    class_name: str


def _eligible(
    claim: ResourceClaim,
    classes: Mapping[str, DeviceClass],
    node: DraNode,
    selectors: Selectors,
    container: str,
) -> list[_Request]:
    out = []
    for request in claim.spec.devices.requests:
        exact = request.exactly
        assert exact is not None  # `unsupported` said so
        device_class = classes.get(exact.device_class_name)
        if device_class is None:
            raise UndecidedError(f"DeviceClass {exact.device_class_name} does not exist")
        if device_class.extras() or device_class.spec.extras():
            raise UndecidedError(
                f"DeviceClass {exact.device_class_name} uses fields numatopo does not know"
            )
        classed = device_class.spec.selectors
        try:
            matching = [d for d in node.devices if selectors.matches(d, classed, exact.selectors)]
        except SelectorRefusedError as exc:
            raise UndecidedError(
                f"claim {claim.key} request {request.name}: a selector {exc}"
            ) from None
        usable = [d for d in matching if d.plain and d.kind is not DeviceKind.OTHER]
        kinds = {d.kind for d in usable}
        if len(kinds) != 1:
            what = "no device numatopo can place" if not kinds else "devices of several kinds"
            raise UndecidedError(f"claim {claim.key} request {request.name} matches {what}")
        out.append(
            _Request(claim.key, request.name, exact.count, kinds.pop(), usable, container,
                     exact.device_class_name)
        )  # fmt: skip
    return out


def _variants(claim: ResourceClaim, requests: list[_Request]) -> list[list[_Request]]:
    """The requests once per value combination of the matchAttributes, with matching devices."""
    constraints = claim.spec.devices.constraints
    if not constraints:
        return [requests]
    choices: list[list[tuple[int, object]]] = []
    for index, constraint in enumerate(constraints):
        name = constraint.match_attribute or ""
        covered = [r for r in requests if not constraint.requests or r.name in constraint.requests]
        values = {_value(d, name) for r in covered for d in r.eligible} - {None}
        choices.append([(index, v) for v in sorted(values, key=repr)])
    variants = []
    for combo in itertools.islice(itertools.product(*choices), MAX_VARIANTS):
        narrowed = []
        for request in requests:
            keep = [
                d
                for d in request.eligible
                if all(
                    _value(d, constraints[i].match_attribute or "") == value
                    for i, value in combo
                    if not constraints[i].requests or request.name in constraints[i].requests
                )
            ]
            narrowed.append(dataclasses.replace(request, eligible=keep))
        variants.append(narrowed)
    return variants


def _value(device: DraDevice, name: str) -> object:
    found = attribute(device.device, device.id.driver, name)
    return None if found is None else (type(found.value).__name__, found.value)


def _restricted(state: NodeState, requests: Sequence[_Request]) -> NodeState:
    """A copy of `state` with every free GPU and NIC no request may have booked away, and every free
    CPU no CPU request may have where some request asks CPUs."""
    cpus = {d.cpu for r in requests for d in r.eligible if d.cpu is not None}
    asks_cpus = any(r.kind is DeviceKind.CPU for r in requests)
    return restricted_to(state, _gpus_of(requests), _nics_of(requests), cpus if asks_cpus else None)


def _gpus_of(requests: Sequence[_Request]) -> frozenset[int]:
    return frozenset(d.gpu for r in requests for d in r.eligible if d.gpu is not None)


def _nics_of(requests: Sequence[_Request]) -> frozenset[str]:
    return frozenset(d.nic for r in requests for d in r.eligible if d.nic is not None)


def restricted_to(
    state: NodeState, gpus: Set[int], nics: Set[str], cpus: Set[int] | None = None
) -> NodeState:
    """A copy of `state` with every free GPU, NIC and (unless `cpus` is None) CPU not in `gpus`,
    `nics`, `cpus` booked away, but MIG GPUs (their instances are no claim's)."""
    mig = {g.index for g in state.topology.gpus if g.mig_mode}
    away = ContainerAssignment(
        gpu_indices=sorted(g for g in state.free_gpus() - gpus if g not in mig),
        nics=sorted(state.free_nics() - nics),
        cpus=CPUSet() if cpus is None else CPUSet(c for c in state.free_cpus() if c not in cpus),
    )
    copy = state.copy()
    copy.apply(INELIGIBLE, Assignment(node="", containers={"devices": away}))
    return copy


def _request_for(
    base: PodRequest, requests: Sequence[_Request], spec: NumatopologySpec
) -> PodRequest:
    gpu_resource = {g.index: g.resource for g in spec.gpus}
    nic_resource = {n.name: n.resource for n in spec.nics}
    containers = []
    for container in base.containers:
        mine = [r for r in requests if r.container == container.name]
        devices = [d for r in mine for d in r.eligible]
        claimed = claiming(
            container,
            UndecidedError,
            gpus=sum(r.count for r in mine if r.kind is DeviceKind.GPU),
            nics=sum(r.count for r in mine if r.kind is DeviceKind.NIC),
            cpus=sum(r.count for r in mine if r.kind is DeviceKind.CPU),
            gpu_resources={gpu_resource[d.gpu] for d in devices if d.gpu is not None},
            nic_resources={nic_resource[d.nic] for d in devices if d.nic is not None},
        )
        containers.append(claimed)
    return dataclasses.replace(base, containers=tuple(containers))


def claiming(
    container: ContainerRequest,
    error: type[Exception],
    *,
    gpus: int,
    nics: int,
    cpus: int,
    gpu_resources: Set[str],
    nic_resources: Set[str],
) -> ContainerRequest:
    """`container` asking the devices and CPUs its claims hold as the engine counts device-plugin
    ones; `error` when its own request contradicts them."""
    if cpus:
        # dra-driver-cpu's CPUs are the container's exclusive CPUs: its own CPU request, if any,
        # must ask as many (KEP-5517 maps claimed CPUs onto it).
        if container.cpu_milli not in (0, cpus * 1000):
            raise error(
                f"container {container.name} asks {container.cpu_milli}m CPU and claims {cpus} CPUs"
            )
        container = dataclasses.replace(container, cpu_milli=cpus * 1000)
    if not (gpus or nics):
        return container
    if container.gpus or container.nics:
        raise error(f"container {container.name} asks device-plugin devices and claims")
    if len(gpu_resources) > 1 or len(nic_resources) > 1:
        raise error(f"container {container.name}: its claims span device resources")
    return dataclasses.replace(
        container, gpus=gpus, gpu_resource=next(iter(gpu_resources), None),
        nics=nics, nic_resource=next(iter(nic_resources), None),
    )  # fmt: skip


def _match(requests: Sequence[_Request], chosen: list[DraDevice]) -> list[list[DraDevice]] | None:
    """Hand one container's chosen devices to its requests (each only what it may have), or None."""
    slots = [r for r in requests for _ in range(r.count)]
    taken: list[DraDevice | None] = [None] * len(slots)

    def place(i: int, left: list[DraDevice]) -> bool:
        if i == len(slots):
            return True
        for j, device in enumerate(left):
            if device in slots[i].eligible:
                taken[i] = device
                if place(i + 1, left[:j] + left[j + 1 :]):
                    return True
        return False

    if len(slots) != len(chosen) or not place(0, chosen):
        return None
    out: list[list[DraDevice]] = []
    i = 0
    for request in requests:
        out.append([d for d in taken[i : i + request.count] if d is not None])
        i += request.count
    return out


def decide_claims(  # noqa: PLR0917 (the decision's inputs)
    topology: NumatopologySpec,
    state: NodeState,
    base: PodRequest,
    pod_claims_: Sequence[PodClaim],
    claims: Mapping[str, ResourceClaim],
    classes: Mapping[str, DeviceClass],
    node: DraNode,
    *,
    engine: Engine | None = None,
) -> ClaimDecision:
    """Decide the pod's claims on `node`; raises `UndecidedError` or `UnsatisfiableError`."""
    engine = engine or Engine()
    per_claim = _claim_variants(base, pod_claims_, claims, classes, node, checked=True)
    best: tuple[Decision, list[_Request], dict[tuple[str, str], list[DraDevice]]] | None = None
    refusal: UnsatisfiableError | None = None
    combos = itertools.product(*(variants for _, variants in per_claim))
    for combo in itertools.islice(combos, MAX_VARIANTS):
        requests = [r for claim_requests in combo for r in claim_requests]
        try:
            decision = allocate(
                topology, _restricted(state, requests), _request_for(base, requests, topology),
                node.node, engine=engine,
            )  # fmt: skip
        except UnsatisfiableError as exc:
            refusal = refusal or exc
            continue
        picked = _split(decision.assignment, requests, node)
        if picked is not None and (best is None or decision.score > best[0].score):
            best = (decision, requests, picked)
    if best is None:
        raise refusal or UnsatisfiableError("no devices the claims may have fit together")
    decision, requests, picked = best
    allocations = _allocations(per_claim, picked, requests, classes, node.node)
    return ClaimDecision(node.node, decision.assignment, allocations, decision.score)


@dataclass(frozen=True, slots=True)
class ClaimDemand:
    """What a pod's claims ask of one node, as the engine counts a pod's devices."""

    request: PodRequest
    """The pod's request with its claims' GPUs, NICs and CPUs counted in the containers
    that use them (as `decide_claims` asks the engine)."""
    gpus: frozenset[int]
    """The node's GPUs (`spec.gpus[].index`) some request of the claims may have."""
    nics: frozenset[str]
    """The node's NICs (`spec.nics[].name`) some request of the claims may have."""


def claim_demand(  # noqa: PLR0917 (the decision's inputs)
    topology: NumatopologySpec,
    base: PodRequest,
    pod_claims_: Sequence[PodClaim],
    claims: Mapping[str, ResourceClaim],
    classes: Mapping[str, DeviceClass],
    node: DraNode,
) -> ClaimDemand:
    """What the pod's claims ask of `node`, without deciding where (a group's planner counts them as
    requests); the devices are those of any matchAttribute variant (all ask the same counts). Raises
    `UndecidedError` as `decide_claims` does, `UnsatisfiableError` when `node` has too few devices a
    request may have (in any one variant), free or not."""
    per_claim = _claim_variants(base, pod_claims_, claims, classes, node, checked=True)
    possible = []
    for claim, variants in per_claim:
        enough = [v for v in variants if all(len(r.eligible) >= r.count for r in v)]
        if not enough:
            raise UnsatisfiableError(
                f"claim {claim.key}: node {node.node} has too few devices its requests may "
                "have" + (" with one value of its matchAttribute" if variants[1:] else "")
            )
        possible.append(enough)
    first = [r for variants in possible for r in variants[0]]
    every = [r for variants in possible for variant in variants for r in variant]
    return ClaimDemand(_request_for(base, first, topology), _gpus_of(every), _nics_of(every))


def _claim_variants(
    base: PodRequest,
    pod_claims_: Sequence[PodClaim],
    claims: Mapping[str, ResourceClaim],
    classes: Mapping[str, DeviceClass],
    node: DraNode,
    *,
    checked: bool,
) -> list[tuple[ResourceClaim, list[list[_Request]]]]:
    """Each of the pod's claims with the request variants `node` offers it; `checked`: refuse what
    `unsupported` names (a resumed write, unchecked, was checked when decided)."""
    if not base.containers:
        raise UndecidedError("the pod has no containers")
    selectors = Selectors()
    per_claim: list[tuple[ResourceClaim, list[list[_Request]]]] = []
    for entry in pod_claims_:
        claim = claims.get(entry.claim or "")
        if claim is None:
            # A claim a resumed write names existed when it was decided.
            raise UndecidedError(f"claim {entry.name} does not exist{' yet' if checked else ''}")
        why = unsupported(claim) if checked else None
        if why is not None:
            raise UndecidedError(f"claim {claim.key}: {why}")
        container = entry.containers[0] if entry.containers else base.containers[0].name
        requests = _eligible(claim, classes, node, selectors, container)
        per_claim.append((claim, _variants(claim, requests)))
    return per_claim


def allocations_for(  # noqa: PLR0917 (the decision's inputs)
    assignment: Assignment,
    base: PodRequest,
    pod_claims_: Sequence[PodClaim],
    claims: Mapping[str, ResourceClaim],
    classes: Mapping[str, DeviceClass],
    node: DraNode,
) -> dict[str, AllocationResult]:
    """Claim name -> its allocation from the devices `assignment` gave the containers, for a write
    that stopped before the claims' status. Raises `UndecidedError` when a claim cannot be judged,
    `UnsatisfiableError` when the devices no longer satisfy the claims (the caller takes the
    assignment back)."""
    per_claim = _claim_variants(base, pod_claims_, claims, classes, node, checked=False)
    combos = itertools.product(*(variants for _, variants in per_claim))
    for combo in itertools.islice(combos, MAX_VARIANTS):
        requests = [r for claim_requests in combo for r in claim_requests]
        picked = _split(assignment, requests, node)
        if picked is not None:
            return _allocations(per_claim, picked, requests, classes, node.node)
    raise UnsatisfiableError("the assignment's devices do not satisfy the claims")


def _allocations(
    per_claim: Sequence[tuple[ResourceClaim, object]],
    picked: Mapping[tuple[str, str], list[DraDevice]],
    requests: Sequence[_Request],
    classes: Mapping[str, DeviceClass],
    node: str,
) -> dict[str, AllocationResult]:
    """Claim name -> its allocation of the devices `_split` picked for `requests`, as the allocator
    writes it: results in request order, then the classes' configs (FromClass, once per class) and
    the claim's (FromClaim)."""
    allocations = {}
    for claim, _ in per_claim:
        mine = [r for r in requests if r.claim == claim.key]
        results = [
            DeviceRequestAllocationResult(
                request=r.name, driver=d.id.driver, pool=d.id.pool, device=d.id.device
            )
            for r in mine
            for d in picked[(r.claim, r.name)]
        ]
        config: list[DeviceAllocationConfiguration] = []
        by_class: dict[str, list[str]] = {}
        for r in mine:
            by_class.setdefault(r.class_name, []).append(r.name)
        for class_name, names in by_class.items():
            config += [
                DeviceAllocationConfiguration(source="FromClass", requests=names, opaque=c.opaque)
                for c in classes[class_name].spec.config
            ]
        config += [
            DeviceAllocationConfiguration(source="FromClaim", requests=c.requests, opaque=c.opaque)
            for c in claim.spec.devices.config
        ]
        allocations[claim.metadata.name] = AllocationResult(
            devices=DeviceAllocationResult(results=results, config=config or None),
            node_selector=node_selector_for(node),
        )
    return allocations


def _split(
    assignment: Assignment, requests: Sequence[_Request], node: DraNode
) -> dict[tuple[str, str], list[DraDevice]] | None:
    """(claim, request) -> its devices, from the devices the engine gave each container."""
    of_gpu, of_nic, of_cpu = node.of_gpu(), node.of_nic(), node.of_cpu()
    picked: dict[tuple[str, str], list[DraDevice]] = {}
    for name, container in assignment.containers.items():
        mine = [r for r in requests if r.container == name]
        if not mine:
            continue
        chosen = [of_gpu[g] for g in container.gpu_indices if g in of_gpu]
        chosen += [of_nic[n] for n in container.nics if n in of_nic]
        if any(r.kind is DeviceKind.CPU for r in mine):
            if not container.exclusive:
                return None  # shared CPUs are no claimed devices
            chosen += [of_cpu[c] for c in container.cpus if c in of_cpu]
        matched = _match(mine, chosen)
        if matched is None:
            return None
        for request, devices in zip(mine, matched, strict=True):
            picked[(request.claim, request.name)] = devices
    return picked if len(picked) == len(requests) else None
