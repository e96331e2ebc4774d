"""Which GPUs to prefer when the kubelet asks, given the containers in flight (pure).

No device-plugin RPC names the pod being admitted, so the answer has to be inferred.
It can be, because of how the kubelet admits: one pod at a time, in creation order,
and within a pod its containers one at a time in spec order (init containers first,
then app containers), each asking `GetPreferredAllocation` and then `Allocate` before
the next one asks. So among the containers numatopo assigned GPUs to and the kubelet
has not yet allocated, the one being admitted is the first in (creation time, pod
uid, container order) whose request fits: the same number of GPUs, all still
available, covering what the kubelet must include.

The "still available" test makes the rule heal itself: a container already admitted
(its `Allocate` missed, or numatopo restarted) holds its GPUs, so they are no longer
offered and it is skipped rather than answered again.

Init containers hand their GPUs on (`follow.in_flight` says how they are steered and
where that cannot work). A container the kubelet admits out of the order above (a pod
created earlier but seen later by the kubelet) can take another's answer; Follow sees
the GPUs the assignment does not name and the operator re-plans. Nothing here can make
the kubelet fail a pod: no candidate means "let the kubelet choose" (`device_ids is None`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from numatopo_engine.annotations import Assignment
from numatopo_engine.device_ids import device_ids_for
from numatopo_kube.timestamps import unix_seconds


@dataclass(frozen=True)
class InFlight:
    """One container numatopo assigned GPUs to that the kubelet may not have admitted."""

    pod_uid: str
    pod_key: str
    """`namespace/name`, for logs and the answer's `why`."""
    created: str | float
    """The pod's creation timestamp: RFC 3339 text as the API writes it, or epoch
    seconds. The kubelet admits in this order."""
    container: str
    container_order: int
    """Position among the pod's containers: init containers first, then app
    containers, each in spec order."""
    gpus: tuple[str, ...]
    """The assigned GPUs' UUIDs (or PCI bus ids), in assignment order."""
    gpu_indices: tuple[int, ...]
    seq: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return (self.pod_uid, self.container)

    def order(self) -> tuple[float, str, int]:
        return (_seconds(self.created), self.pod_uid, self.container_order)


@dataclass(frozen=True)
class Answer:
    device_ids: list[str] | None
    """The IDs to prefer, or None: let the kubelet (or the vendor) choose."""
    candidate: InFlight | None
    why: str


def answer(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    candidates: Iterable[InFlight],
    consumed: set[tuple[str, str]],
) -> Answer:
    """The preferred allocation for one container request of `size` devices."""
    if size <= 0:
        return Answer(None, None, f"nothing to choose: {size} devices asked")
    offered = set(available)
    pool = list(available) + [m for m in dict.fromkeys(must_include) if m not in offered]
    skipped = 0
    for candidate in sorted(candidates, key=InFlight.order):
        if candidate.key in consumed or len(candidate.gpus) != size:
            continue
        ids = device_ids_for(candidate.gpus, candidate.gpu_indices, pool)
        if ids is None or not set(must_include) <= set(ids):
            skipped += 1
            continue
        return Answer(
            ids,
            candidate,
            f"{candidate.pod_key} container {candidate.container} (seq {candidate.seq}) "
            f"is the first in flight asking {size}",
        )
    reason = f"no container in flight asks {size} GPUs among those offered"
    if skipped:
        reason += f" ({skipped} of that size asked GPUs not offered)"
    return Answer(None, None, reason)


def containers_in_flight(
    pod_uid: str,
    pod_key: str,
    created: str | float,
    container_names: Sequence[str],
    assignment: Assignment,
) -> list[InFlight]:
    """The candidates of one pod: its containers with GPUs assigned, in admission
    order (`container_names`, as `InFlight.container_order` counts them)."""
    found: list[InFlight] = []
    for position, name in enumerate(container_names):
        given = assignment.containers.get(name)
        if given is None or not given.gpus:
            continue
        found.append(
            InFlight(
                pod_uid=pod_uid,
                pod_key=pod_key,
                created=created,
                container=name,
                container_order=position,
                gpus=tuple(given.gpus),
                gpu_indices=tuple(given.gpu_indices),
                seq=assignment.seq,
            )
        )
    return found


def _seconds(created: str | float) -> float:
    # The API writes second-precision RFC 3339 ("...Z"); anything unreadable sorts last,
    # so a malformed timestamp cannot jump the queue.
    if isinstance(created, int | float):
        return float(created)
    seconds = unix_seconds(created)
    return math.inf if seconds is None else seconds
