"""`allocate_around`: a pod that already holds devices is placed around them, under its own policy
when that can hold, else `best-effort` (pure).

A running container's GPUs (and RDMA NICs) are where the kubelet put them: a new decision can only
place the CPUs, memory and NICs around them. When the pod's policy cannot hold with those devices
(`single-numa-node` with GPUs on two NUMA nodes), refusing would leave it running with nothing
aligned, so it is placed `best-effort` and the reason handed back. A pod without pins, or already
`best-effort` or `none`, gets exactly what `allocation.allocate` gives.
"""

from __future__ import annotations

import dataclasses

from numatopo_engine import allocation
from numatopo_engine.annotations import Assignment, PolicyName
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.request import PodRequest
from numatopo_engine.state import NodeState

# Policies that never refuse a placement for want of alignment: nothing to relax.
_NOT_RELAXED = frozenset({PolicyName.BEST_EFFORT, PolicyName.NONE})


def allocate_around(
    topology: NumatopologySpec,
    state: NodeState,
    request: PodRequest,
    node: str,
    *,
    engine: allocation.Engine,
    pinned: allocation.Pinned,
    pinned_nics: allocation.PinnedNics | None = None,
) -> tuple[Assignment, str]:
    """(the assignment, why the pod's own policy could not hold: '' when it did); raises
    UnsatisfiableError when nothing fits, relaxed or not."""

    def place(asked: PodRequest) -> Assignment:
        return allocation.allocate(
            topology, state, asked, node, engine=engine, pinned=pinned, pinned_nics=pinned_nics
        ).assignment

    try:
        return place(request), ""
    except UnsatisfiableError as exc:
        if not (pinned or pinned_nics) or request.options.policy in _NOT_RELAXED:
            raise
        why = exc.reason
    options = dataclasses.replace(request.options, policy=PolicyName.BEST_EFFORT)
    return place(dataclasses.replace(request, options=options)), why
