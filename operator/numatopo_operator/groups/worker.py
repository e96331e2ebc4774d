"""The group worker: one task that brings every group to its next state (I/O).

Handlers feed `GroupState` (`observe_pod`, `capacity_changed`) and kick the worker, which
`advance`s each changed or due group: `group_members.next_step`, carried out by
`group_release`, until the group waits (members, room) or is placed. Only the deciding
replica works; one taking over looks at every group once (partial plans voided, complete
ones released). Its Events (each text once per pod): docs/operations.md, "Group members ...
get these Events".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from numatopo_engine.domains import describe_domain
from numatopo_engine.groups import GroupSpec
from numatopo_operator import pod_view, translate
from numatopo_operator.errors import KubeError, KubeNotFoundError, NodeBusyError, NotActiveError
from numatopo_operator.groups import release as group_release
from numatopo_operator.groups.members import (
    MemberView,
    PlacementRecord,
    StepKind,
    next_step,
    planned_node,
)
from numatopo_operator.groups.release import GroupInvalidError, GroupUnplaceableError
from numatopo_operator.pod_view import PodView
from numatopo_operator.runtime import Runtime

logger = logging.getLogger(__name__)

WAITING = "GroupWaiting"
PLACED = "GroupPlaced"
UNSATISFIABLE = "GroupUnsatisfiable"
INVALID = "GroupInvalid"
RECOVERED = "GroupRecovered"

# Steps one pass may take for a group (void, plan, release, and a recovery): more means
# the group keeps changing under the worker; it is looked at again later.
MAX_STEPS = 6
TICK_SECONDS = 0.25


def observe_pod(runtime: Runtime, event: str, body: Mapping[str, Any]) -> None:
    """Record a pod event (any pod): group members are booked, changed groups marked."""
    group_state = runtime.groups
    key = pod_view.pod_key(body)
    if event == "DELETED" or translate.is_finished(body):
        ended = group_state.book.forget(key)
        group_state.first_seen.pop(key, None)
        group_state.plans.pop(key, None)
        group_state.said.difference_update({s for s in group_state.said if s.startswith(key + " ")})
        group_state.touch([ended] if ended else [])
        group_state.capacity_changed()
        return
    group_state.touch(group_state.book.observe(body))
    if key in group_state.book.invalid:
        group_state.kick.set()


def _tell(
    runtime: Runtime,
    views: Sequence[MemberView],
    reason: str,
    message: str,
    *,
    warning: bool = False,
    once_per_pod: bool = False,
) -> None:
    """Queue the Event for each member that has not had this one yet."""
    for view in views:
        said = f"{view.key} {reason}" + ("" if once_per_pod else f" {message}")
        _say(runtime, said, PodView.of(view.body).ref, reason, message, warning=warning)


def _say(
    runtime: Runtime, said: str, ref: Mapping[str, str], reason: str, message: str, *, warning: bool
) -> None:
    """Queue the Event unless `said` (its pod key first) was said already."""
    if said not in runtime.groups.said:
        runtime.groups.said.add(said)
        runtime.events.post(ref, warning=warning, reason=reason, message=message)


def _where(level: str | None, path: Sequence[str] | None) -> str:
    if level is None or not path:
        return "anywhere (no level asked)"
    return describe_domain(level, tuple(path))


def _one_slice(spec: GroupSpec, chosen: list[MemberView]) -> list[MemberView]:
    """With slices, only the lowest-ranked slice's replacements (each slice has its own domain)."""
    if spec.slice is None or chosen[0].rank is None:
        return chosen
    piece = spec.slice[1]
    first = chosen[0].rank // piece
    return [v for v in chosen if v.rank is not None and v.rank // piece == first]


def _recorded_where(record: PlacementRecord | None) -> str:
    """The recorded domain; its value alone for records older than paths."""
    if record is None or record.domain is None:
        return _where(None, None)
    return _where(record.level, record.path if record.path is not None else [record.domain])


def _nodes_text(nodes: Mapping[str, str], order: Sequence[str]) -> str:
    return ", ".join(f"{key.partition('/')[2]}->{nodes[key]}" for key in order if key in nodes)


async def advance(runtime: Runtime, group: str) -> bool:
    """Take the group's next steps; True when it must be looked at again later."""
    group_state = runtime.groups
    for _ in range(MAX_STEPS):
        views = group_state.book.views(group)
        step = next_step(group_state.book.specs(group), views)
        spec = step.spec
        by_key = {v.key: v for v in views}
        chosen = [by_key[k] for k in step.keys if k in by_key]
        if step.kind is StepKind.IDLE:
            group_state.waiting_for_room.discard(group)
            return False
        if step.kind is StepKind.INVALID:
            return _invalid(runtime, chosen, step.reason)
        assert spec is not None
        if step.kind is StepKind.WAIT:
            group_state.complete_since.pop(group, None)
            for view in chosen:
                group_state.first_seen.setdefault(view.key, time.monotonic())
            _tell(
                runtime, chosen, WAITING,
                f"group {group}: {len(step.keys)} of {spec.size} members seen; nothing is placed "
                "until all are there",
                once_per_pod=True,
            )  # fmt: skip
            return False
        if step.kind is StepKind.VOID:
            logger.warning("group %s: taking back a partial plan of %s", group, list(step.keys))
            runtime.metrics.group_decisions.labels("voided").inc()
            await group_release.void(runtime, chosen)
            continue
        if step.kind is StepKind.PLAN:
            group_state.complete_since.setdefault(group, time.monotonic())
            try:
                placement = await group_release.plan(runtime, spec, chosen)
            except GroupInvalidError as exc:
                return _invalid(runtime, chosen, str(exc))
            except GroupUnplaceableError as exc:
                message = f"group {group} ({len(chosen)} members) does not fit: {exc}"
                logger.info("%s", message)
                return _unsatisfiable(runtime, group, chosen, message)
            group_state.waiting_for_room.discard(group)
            nodes = {key: assignment.node for key, assignment in placement.assignments.items()}
            logger.info(
                "group %s planned in %s: %s", group, _where(placement.level, placement.path),
                _nodes_text(nodes, placement.order),
            )  # fmt: skip
            continue
        if step.kind is StepKind.RELEASE:
            await _release(runtime, spec, views, chosen)
            continue
        if step.kind is StepKind.RECOVER:
            again = await _recover(runtime, spec, step.anchor, views, chosen)
            if again is not None:
                return again
    return True


async def _release(
    runtime: Runtime, spec: GroupSpec, views: Sequence[MemberView], chosen: list[MemberView]
) -> None:
    """Phase 2 for `chosen`; once no gated member is left, the group is told it is placed."""
    group, group_state, metrics = spec.key, runtime.groups, runtime.metrics
    released = await group_release.release(runtime, chosen)
    if any(v.gated and v.key not in released for v in views):
        return
    record = next((v.record for v in chosen if v.record is not None), None)
    since = group_state.complete_since.pop(group, None)
    if since is not None:  # not known after a restart between the phases
        metrics.group_placement.observe(time.monotonic() - since)
    metrics.group_decisions.labels("placed").inc()
    planned = {v.key: node for v in views if (node := planned_node(v.body)) is not None}
    placed_on = planned | released
    note = group_release.preferred_note(runtime, spec, placed_on.values())
    _tell(
        runtime, chosen, PLACED,
        f"group {group}: {len(views)} members placed in {_recorded_where(record)}, "
        f"by rank: {_nodes_text(placed_on, [v.key for v in views])}{note}",
    )  # fmt: skip
    for view in chosen:
        group_state.first_seen.pop(view.key, None)


async def _recover(
    runtime: Runtime,
    spec: GroupSpec,
    anchor: PlacementRecord | None,
    views: Sequence[MemberView],
    chosen: list[MemberView],
) -> bool | None:
    """Replacement members placed next to their running group and released; None to go
    on with the group's next step, else `advance`'s answer."""
    group, group_state, metrics = spec.key, runtime.groups, runtime.metrics
    for view in chosen:
        group_state.first_seen.setdefault(view.key, time.monotonic())
    group_mates = [v for v in views if not v.gated and v.record is not None]
    running = planned_node(group_mates[0].body) if group_mates else None
    chosen = _one_slice(spec, chosen)
    ranks = {
        v.rank: node
        for v in group_mates
        if v.rank is not None and (node := planned_node(v.body)) is not None
    }
    around = group_release.Around(ranks, tuple(v.rank for v in chosen if v.rank is not None))
    try:
        recovered = await group_release.recover(
            runtime, spec, chosen, anchor, running, around=around
        )
    except GroupInvalidError as exc:
        return _invalid(runtime, chosen, str(exc))
    except GroupUnplaceableError as exc:
        message = f"replacement member of running group {group} does not fit: {exc}"
        return _unsatisfiable(runtime, group, chosen, message)
    group_state.waiting_for_room.discard(group)
    released = await group_release.release(runtime, chosen)
    where = _where(recovered.level, recovered.path)
    recorded = recovered.recorded
    if recovered.stayed or recorded is None:
        text = f"in its group's domain {where}"
    else:
        text = (
            f"outside its group's domain {_where(recorded.level, recorded.path)} "
            f"(no room there), in {where}"
        )
    for view in chosen:
        now = time.monotonic()
        took = now - group_state.first_seen.pop(view.key, now)
        metrics.group_recovery.observe(took)
        metrics.group_decisions.labels("recovered").inc()
        _tell(
            runtime, [view], RECOVERED,
            f"replacement member of group {group} placed on {released[view.key]} "
            f"{text}, {took:.2f} s after it appeared",
            warning=not recovered.stayed,
        )  # fmt: skip
    return None


def _invalid(runtime: Runtime, members: Sequence[MemberView], reason: str) -> bool:
    """Counted and told; False (`advance`'s answer): only a person can fix it."""
    runtime.metrics.group_decisions.labels("invalid").inc()
    _tell(runtime, members, INVALID, reason, warning=True)
    return False


def _unsatisfiable(
    runtime: Runtime, group: str, members: Sequence[MemberView], message: str
) -> bool:
    """Counted and told; True (`advance`'s answer: retried), and at once when room frees up."""
    runtime.metrics.group_decisions.labels("unsatisfiable").inc()
    runtime.groups.waiting_for_room.add(group)
    _tell(runtime, members, UNSATISFIABLE, message, warning=True)
    return True


def _report_invalid(runtime: Runtime) -> None:
    """Members whose group annotations cannot be read: one Warning each."""
    for key, why in sorted(runtime.groups.book.invalid.items()):
        namespace, _, name = key.partition("/")
        ref, message = {"namespace": namespace, "name": name}, f"invalid group annotations: {why}"
        _say(runtime, f"{key} {INVALID} {why}", ref, INVALID, message, warning=True)


async def settle_group(runtime: Runtime, group: str) -> None:
    """`advance`, requeued while it needs another look; never raises (the worker's boundary)."""
    again = True
    try:
        again = await advance(runtime, group)
    except KubeNotFoundError:
        again = True  # a member went away mid-way; its deletion event re-drives the group
    except (KubeError, NotActiveError, NodeBusyError) as exc:
        logger.warning("group %s: %s; looked at again later", group, exc)
    except Exception:
        logger.exception("group %s: unexpected error; looked at again later", group)
        runtime.metrics.handler_errors.inc()
    if again:
        runtime.groups.retries.schedule(group, {}, time.monotonic())
    else:
        runtime.groups.retries.discard(group)


async def run_groups(runtime: Runtime) -> None:
    """Forever: work through changed and due groups while this replica decides."""
    group_state = runtime.groups
    deciding_before = False
    while True:
        due = group_state.retries.next_due()
        pause = TICK_SECONDS if due is None else min(max(due - time.monotonic(), 0), TICK_SECONDS)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(pause):
                await group_state.kick.wait()
        group_state.kick.clear()
        deciding = runtime.deciding and group_state.nodes is not None
        if not deciding:
            deciding_before = False
            continue
        if not deciding_before:
            # Taking over (or starting): every group once, partial plans included.
            group_state.dirty |= set(group_state.book.groups())
            deciding_before = True
        _report_invalid(runtime)
        work = set(group_state.dirty)
        group_state.dirty.clear()
        work |= {group for group, _ in group_state.retries.pop_due(time.monotonic())}
        for group in sorted(work):
            if not runtime.deciding:
                group_state.dirty |= work
                break
            await settle_group(runtime, group)
