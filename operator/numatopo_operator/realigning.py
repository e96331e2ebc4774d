"""Follow, the operator's half: decide a pod again around the GPUs it really holds (I/O;
docs/DESIGN.md, "GPUs: steered, followed or unverified" and "Pod annotations").

When a container holds other GPUs than its assignment names (`numatopo.io/observed`), the
pod is decided again with each container's GPUs (and the RDMA NICs its devices name; a
shared pool's IDs name none) pinned (`allocate_around`), booked under a new sequence and
written; the agent enforces it and reports `Aligned`. A pod whose assignment names those
devices is displaced (taken back, decided afresh) when admitted with its own observation
saying it holds other GPUs, or when not admitted and later in `state.claim_order`. Never
when admitted with its observation naming those GPUs or none yet (two containers never hold
one GPU: the observation is wrong or forged, as a tenant may write `observed` where the
chart's admission guard is off), nor when not admitted with an earlier claim: the
realignment then waits (retried). The displaced booking is released before the realigned
one is reserved, under the node's lock; one whose write is in flight only once the watch
shows it (its take-back could land first). A policy that cannot hold with those GPUs
(`single-numa-node` over two NUMA nodes) is relaxed to `best-effort` around them, said in
the reason and a Warning Event: the pod already runs.
"""

from __future__ import annotations

import dataclasses
import logging

from numatopo_engine.annotations import Assignment, Observed, State
from numatopo_engine.device_ids import gpu_indices, nic_names
from numatopo_engine.errors import InvalidRequestError, OverlapError, UnsatisfiableError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.relaxed_allocation import allocate_around
from numatopo_engine.resources import ResourceNames
from numatopo_engine.state import claim_order
from numatopo_operator import pod_writes, translate
from numatopo_operator.errors import NodeBusyError
from numatopo_operator.ledger import Ledger
from numatopo_operator.pod_view import PodView
from numatopo_operator.runtime import Runtime

logger = logging.getLogger(__name__)

REALIGNED = "NumatopoRealigned"
DISPLACED = "NumatopoDisplaced"
GPUS_NOT_ALIGNABLE = "NumatopoGPUsNotAlignable"


def mismatch(pod: PodView) -> tuple[Assignment, Observed] | None:
    """(assignment, observation) when the agent saw the current assignment and containers
    hold other GPUs; None otherwise (also unreadable: the agent rewrites a broken one)."""
    if pod.finished:
        return None
    assignment, observed = pod.assignment, pod.observed
    if assignment is None or observed is None:
        return None
    if observed.seq != assignment.seq or not observed.mismatched:
        return None
    return assignment, observed


Pins = tuple[dict[str, list[int]], dict[str, list[str]]]


def pins(observed: Observed, topology: NumatopologySpec, resources: ResourceNames) -> Pins:
    """Container -> the node's GPU indices it holds, and container -> the node's NICs it
    holds (a shared pool's IDs name none); ValueError for a device naming no GPU."""
    gpus: dict[str, list[int]] = {}
    nics: dict[str, list[str]] = {}
    for name, container in sorted(observed.containers.items()):
        ids = container.gpu_ids(resources.is_gpu)
        if ids:
            indices = gpu_indices(ids, topology.gpus)
            if indices is None:
                raise ValueError(
                    f"container {name} holds devices {ids} that name no GPU of this node's "
                    "Numatopology (is the exporter's GPU list current?)"
                )
            gpus[name] = indices
        found = [d for r, held in container.devices.items() if resources.is_nic(r) for d in held]
        names = nic_names(found, topology.nics) if found else None
        if names:
            nics[name] = names
    return gpus, nics


def held_pins(
    observed: Observed | None, topology: NumatopologySpec, resources: ResourceNames
) -> Pins | None:
    """The `pins` an observation says (whatever assignment it was compared with); None
    without one, or where it names GPUs the node lacks."""
    if observed is None:
        return None
    try:
        return pins(observed, topology, resources)
    except ValueError:
        return None


async def realign(
    runtime: Runtime, pod: PodView, assignment: Assignment, observed: Observed
) -> bool:
    """Decide `pod` again around the GPUs it holds and write it; True when it must be looked
    at again (another pod's earlier or admitted claim holds them). Raises KubeError,
    NotActiveError, NodeBusyError for the retry queue; a pod that cannot be realigned (GPUs
    unknown here, no room next to them) is logged, told, counted and left as it is."""
    key, node = pod.key, assignment.node
    ledger, resources = runtime.ledger, runtime.settings.resources
    async with ledger.lock(node):
        topology, live = ledger.topology(node), ledger.state(node)
        if topology is None or live is None:
            return False  # no Numatopology: retried when it comes
        current = live.assignments.get(key)
        if current is None or current.seq != assignment.seq:
            return False  # already decided again (in flight), or booked nowhere yet
        try:
            request = pod.request(resources)
            pinned, pinned_nics = pins(observed, topology, resources)
        except (InvalidRequestError, ValueError) as exc:
            _refuse(runtime, pod, assignment.seq, f"cannot realign {key}: {exc}")
            return False
        mine = translate.Booking(key, node, current, pod.uid)
        wanted = _Devices.of((pinned, pinned_nics))
        displaced = _holders(live.assignments, key, wanted)
        if any(ledger.in_flight(other) for other in displaced):
            return True  # displaced once the watch shows its write (module docstring)
        kept = [
            why
            for other in displaced
            if (why := _keeps(ledger, other, mine, wanted, topology, resources))
        ]
        if kept:
            _refuse(
                runtime, pod, assignment.seq,
                f"not realigning {key} around GPUs {pinned}: " + "; ".join(kept),
            )  # fmt: skip
            return True
        for other in displaced:
            await _displace(runtime, other, node, key)
        live = ledger.state(node)
        if live is None:
            return False
        frozen = live.copy()
        frozen.release(key)
        try:
            decision, relaxed = await runtime.in_engine_thread(
                allocate_around, topology, frozen, request, node,
                engine=runtime.decisions, pinned=pinned, pinned_nics=pinned_nics,
            )  # fmt: skip
        except UnsatisfiableError as exc:
            why = f"cannot realign {key} around GPUs {pinned}: {exc.reason}"
            _refuse(runtime, pod, assignment.seq, why)
            return False
        realigned = decision.model_copy(update={"seq": ledger.next_seq(node)})
        try:
            ledger.reserve_all(node, {key: realigned})
        except (KeyError, OverlapError) as exc:
            raise NodeBusyError(f"node {node} changed while realigning {key}: {exc}") from None
    reason = relaxed and (
        f"policy {request.options.policy.value} cannot hold with the GPUs the kubelet gave "
        f"({pinned}): {relaxed}; placed best-effort around them"
    )
    held = f"GPUs {pinned}" + (f" and NICs {pinned_nics}" if pinned_nics else "")
    await _write_realigned(runtime, pod, realigned, held=held, reason=reason)
    return False


async def _write_realigned(
    runtime: Runtime, pod: PodView, realigned: Assignment, *, held: str, reason: str
) -> None:
    """Write the booked realignment (dropped on failure), a Normal Event, a Warning if relaxed."""
    try:
        await pod_writes.write_outcome(runtime, pod, State.ASSIGNED, realigned, reason)
    except Exception:
        runtime.ledger.cancel(pod.key)
        raise
    runtime.metrics.realignments.labels("relaxed" if reason else "realigned").inc()
    message = (
        f"the kubelet gave {held}, not those assigned; re-aligned to them: "
        + translate.assigned_message(realigned)
    )
    logger.info("%s: %s", pod.key, message)
    runtime.events.post(pod.ref, warning=False, reason=REALIGNED, message=message)
    if reason:
        runtime.events.post(pod.ref, warning=True, reason=GPUS_NOT_ALIGNABLE, message=reason)


@dataclasses.dataclass(frozen=True, slots=True)
class _Devices:
    """GPU (and MIG device) indices and NIC names a pod holds or is booked for."""

    gpus: set[int]
    nics: set[str]

    @classmethod
    def of(cls, pinned: Pins) -> _Devices:
        gpus, nics = pinned
        return cls(
            {g for held in gpus.values() for g in held}, {n for held in nics.values() for n in held}
        )

    def shared(self, other: _Devices) -> str:
        """What of `other` is also here, in words ('' for nothing)."""
        gpus, nics = sorted(self.gpus & other.gpus), sorted(self.nics & other.nics)
        return " and ".join(
            [*([f"GPUs {gpus}"] if gpus else []), *([f"NICs {nics}"] if nics else [])]
        )


def _holders(booked: dict[str, Assignment], key: str, wanted: _Devices) -> list[str]:
    """Other pods whose bookings name one of the pinned GPUs, MIG devices or NICs."""
    return sorted(
        other
        for other, assignment in booked.items()
        if other != key
        and any(
            wanted.gpus.intersection((*c.gpu_indices, *c.mig_indices))
            or wanted.nics.intersection(c.nics)
            for c in assignment.containers.values()
        )
    )


def _keeps(  # noqa: PLR0917 (the two claims and what reads the other's devices)
    ledger: Ledger,
    other: str,
    mine: translate.Booking,
    wanted: _Devices,
    topology: NumatopologySpec,
    resources: ResourceNames,
) -> str:
    """Why `other` keeps the `wanted` devices it is booked for against `mine` ('' when it
    is displaced, by the module docstring's rules: pods that took each other's GPUs on
    paper must all be able to move)."""
    held = ledger.booking(other)
    if held is None:
        return f"{other}'s decision is still being written"  # `realign` waits for it first
    if held.admitted:
        real = held_pins(held.observed, topology, resources)
        if real is None:
            return f"{other} is admitted and has not reported the devices it holds yet"
        if both := _Devices.of(real).shared(wanted):
            return f"{other} is admitted and holds {both} itself"
        return ""
    if claim_order(held) < claim_order(mine):
        return f"{other} holds them under an earlier claim (seq {held.assignment.seq})"
    return ""


async def _displace(runtime: Runtime, other: str, node: str, by: str) -> None:
    """Take `other`'s assignment back (`by` holds its GPUs for real): decided afresh next."""
    namespace, name = other.split("/", 1)
    held = runtime.ledger.booking(other)
    uid = held.uid if held is not None else ""
    await pod_writes.write_taken_back(runtime, namespace, name, uid=uid)
    runtime.ledger.displace(other)
    record = runtime.pods.get(other)
    if record is not None:
        record.written = None
    message = f"its assignment named GPUs that {by} holds on {node}; it is decided again"
    logger.warning("%s: %s", other, message)
    runtime.events.post(
        {"namespace": namespace, "name": name, "uid": uid},
        warning=True, reason=DISPLACED, message=message,
    )  # fmt: skip


def _refuse(runtime: Runtime, pod: PodView, seq: int, message: str) -> None:
    """Told once per pod and decision: every later event of the pod finds it unchanged."""
    if not runtime.pods.tell_once(pod.key, f"realign {seq} {message}"):
        return
    logger.warning("%s", message)
    runtime.metrics.realignments.labels("failed").inc()
    runtime.events.post(pod.ref, warning=True, reason=GPUS_NOT_ALIGNABLE, message=message)
