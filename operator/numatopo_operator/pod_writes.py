"""The one writer of numatopo's annotations on pods (I/O; docs/DESIGN.md, "One writer"):
every write fenced (`Runtime.check_may_write`), every assignment signed for its pod
(`Runtime.signed`), every write guarded by the pod's uid where known (a late write is
refused by a namesake: `KubePodReplacedError`); the merge patches are `translate`'s (pure).
"""

from __future__ import annotations

from collections.abc import Mapping

from numatopo_engine import annotations as keys
from numatopo_engine.annotations import Assignment, State
from numatopo_operator import translate
from numatopo_operator.pod_view import PodView
from numatopo_operator.runtime import Runtime


async def write_outcome(
    runtime: Runtime,
    pod: PodView,
    state: State,
    assignment: Assignment | None = None,
    reason: str = "",
    *,
    placement: str | None = None,
) -> None:
    """`state`, `reason`, signed `assignment` and a member's `placement` in one patch."""
    runtime.check_may_write()
    signed = runtime.signed(pod, assignment) if assignment is not None else None
    patch: dict[str, str | None] = translate.outcome_annotations(state, signed, reason)
    if placement is not None:
        patch[keys.GROUP_PLACEMENT] = placement
    await runtime.kube.patch_pod_annotations(pod.namespace, pod.name, patch, uid=pod.uid)


async def write_invalid(runtime: Runtime, pod: PodView, reason: str) -> None:
    """`Invalid` with its reason; the pod's own assignment annotation stays as written."""
    runtime.check_may_write()
    await runtime.kube.patch_pod_annotations(
        pod.namespace, pod.name, translate.invalid_annotations(reason), uid=pod.uid
    )


async def write_taken_back(
    runtime: Runtime,
    namespace: str,
    name: str,
    *,
    uid: str = "",
    placement: bool = False,
    fenced: bool = True,
) -> None:
    """Remove the pod's decision (with `placement`, its group record) to decide afresh.
    `fenced=False` only for this replica's own fresh write (a failed Binding after it): a
    removal clashes with no other replica's decision. With `uid`, only from that pod."""
    if fenced:
        runtime.check_may_write()
    patch: Mapping[str, str | None] = translate.removal_annotations()
    if placement:
        patch = {**patch, keys.GROUP_PLACEMENT: None}
    await runtime.kube.patch_pod_annotations(namespace, name, patch, uid=uid)
