"""Group bookkeeping: which live pods form which group, and what a group needs next (pure).

A member is a pod that names a group (`numatopo_engine.groups.group_of`); only members gated
`numatopo.io/group` (`GATE`) are placed (docs/DESIGN.md, "Groups across nodes"). `next_step`
turns a group's members into the one thing to do next; `group_release` does it. After the
operator writes a plan, a void or a release, `Expectation`s overlay what the watch has not
shown yet, so the next step follows what it wrote, not an older event of the pod.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pydantic
from pydantic import Field

from numatopo_engine import annotations as keys
from numatopo_engine.errors import InvalidRequestError
from numatopo_engine.groups import POD_GROUP_LABEL, GroupSpec, group_of, rank_of
from numatopo_engine.model import WireModel
from numatopo_engine.network_topology import HOSTNAME_LABEL
from numatopo_operator import pod_view
from numatopo_operator.pod_view import PodView
from numatopo_operator.translate import RawPod

# The scheduling gate group members are created with (users put it in the pod template).
GATE = keys.GROUP
# The hostname label as one JSON Pointer segment (RFC 6901).
_HOSTNAME_POINTER = HOSTNAME_LABEL.replace("~", "~0").replace("/", "~1")


class PlacementRecord(WireModel):
    """`numatopo.io/group-placement`: which plan placed this member, where its group is."""

    v: Literal[1] = 1
    group: str = Field(description="The group's name (namespace-scoped).")
    level: str | None = Field(default=None, description="The level of the shared domain.")
    domain: str | None = Field(default=None, description="The shared domain (label value).")
    path: list[str] | None = Field(
        default=None,
        description=(
            "The shared domain's label values from the widest level down to `level` (a "
            "node's name last at the node level): `domain` alone may name domains under "
            "several parents. Absent in records written before it existed."
        ),
    )
    rank: int | None = Field(default=None, description="The member's rank, if it has one.")
    planned: str = Field(description="When the plan was made (ISO 8601): names the plan.")


def _spec(pod: RawPod) -> Mapping[str, Any]:
    found = pod.get("spec")
    return found if isinstance(found, Mapping) else {}


def _gates(pod: RawPod) -> list[Any]:
    found = _spec(pod).get("schedulingGates")
    return list(found) if isinstance(found, list) else []


def is_gated(pod: RawPod, gate: str = GATE) -> bool:
    """Whether the pod still carries the scheduling gate (`numatopo.io/group`)."""
    return any(isinstance(g, Mapping) and g.get("name") == gate for g in _gates(pod))


def placement_text(pod: RawPod) -> str | None:
    text = PodView.of(pod).annotations.get(keys.GROUP_PLACEMENT)
    return text if isinstance(text, str) else None


def planned_node(pod: RawPod) -> str | None:
    """The node a released group member was planned for (its assignment's); None for any
    other pod. The extender passes it there only: elsewhere would break its group's plan."""
    if placement_text(pod) is None:
        return None
    assignment = PodView.of(pod).assignment  # a member's view parses it once
    return assignment.node if assignment is not None else None


@dataclass(frozen=True, slots=True)
class Expectation:
    """What the operator last wrote on a member and has not seen on the watch yet."""

    placement: str | None
    """The `numatopo.io/group-placement` text written (None: removed)."""
    gated: bool


@dataclass(frozen=True, slots=True)
class MemberView:
    """One live member, as the next step sees it (expectations applied)."""

    key: str
    body: Mapping[str, Any]
    rank: int | None
    gated: bool
    record: PlacementRecord | None
    problem: str | None = None
    """Why its placement record cannot be used (unreadable, or no assignment with it)."""

    @property
    def planned(self) -> bool:
        return self.record is not None and self.problem is None

    @property
    def uid(self) -> str:
        """The uid it was read with: writes for it are refused by a namesake."""
        return PodView.of(self.body).uid


def _view(key: str, body: Mapping[str, Any], expected: Expectation | None) -> MemberView:
    gated = is_gated(body) if expected is None else expected.gated
    text = placement_text(body) if expected is None else expected.placement
    problem: str | None = None
    record: PlacementRecord | None = None
    try:
        record = PlacementRecord.model_validate_json(text) if text is not None else None
    except pydantic.ValidationError as exc:
        problem = f"{keys.GROUP_PLACEMENT} is unreadable: {exc.errors()[0]['msg']}"
    if record is not None and expected is None and planned_node(body) is None:
        problem = f"{keys.GROUP_PLACEMENT} without a readable {keys.ASSIGNMENT}"
    # `GroupBook.observe` keeps only members whose rank reads.
    rank = rank_of(PodView.of(body).metadata)
    return MemberView(key, body, rank, gated, record, problem)


class GroupBook:
    """Live group members by group (`namespace/name`), from the watch stream."""

    def __init__(self) -> None:
        self._members: dict[str, dict[str, Mapping[str, Any]]] = {}
        self._specs: dict[str, GroupSpec] = {}
        """Member key -> the group settings it declares (its group's key among them)."""
        self.invalid: dict[str, str] = {}
        """Pods whose group annotations cannot be read: pod key -> why."""
        self.expected: dict[str, Expectation] = {}
        """What the operator wrote on a member and the watch has not shown yet: pod key -> it."""

    def observe(self, body: Mapping[str, Any]) -> set[str]:
        """Take the pod's current body; returns the groups it changed (0, 1 or 2)."""
        view = PodView.of(body)
        key = view.key
        touched: set[str] = set()
        previous = self._specs[key].key if key in self._specs else None
        spec: GroupSpec | None = None
        self.invalid.pop(key, None)
        if not view.ended:
            try:
                spec = group_of(view.metadata)
                if spec is not None:
                    rank_of(view.metadata)
            except InvalidRequestError as exc:
                self.invalid[key] = str(exc)
                spec = None
            else:
                if spec is None and is_gated(body):
                    self.invalid[key] = (
                        f"carries the scheduling gate {GATE} but names no group (annotation "
                        f"{keys.GROUP} or label {POD_GROUP_LABEL}): it stays gated"
                    )
        if previous is not None and (spec is None or spec.key != previous):
            self._drop(key)
            touched.add(previous)
        if spec is None:
            return touched
        self._members.setdefault(spec.key, {})[key] = body
        self._specs[key] = spec
        if self.expected.get(key) == Expectation(placement_text(body), is_gated(body)):
            del self.expected[key]
        touched.add(spec.key)
        return touched

    def forget(self, key: str) -> str | None:
        """The pod is gone; returns its group."""
        self.invalid.pop(key, None)
        self.expected.pop(key, None)
        return self._drop(key) if key in self._specs else None

    def _drop(self, key: str) -> str:
        group = self._specs.pop(key).key
        members = self._members.get(group, {})
        members.pop(key, None)
        if not members:
            self._members.pop(group, None)
        return group

    def groups(self) -> list[str]:
        return sorted(self._members)

    def specs(self, group: str) -> dict[str, GroupSpec]:
        """Member key -> the group settings that member declares."""
        return {key: self._specs[key] for key in self._members.get(group, {})}

    def views(self, group: str) -> list[MemberView]:
        """The group's live members, expectations applied, in rank order (then name)."""
        views = [
            _view(key, body, self.expected.get(key))
            for key, body in self._members.get(group, {}).items()
        ]
        return sorted(views, key=lambda v: (v.rank is None, v.rank or 0, v.key))


class StepKind(enum.Enum):
    IDLE = "idle"  # nothing gated: every member is released (or not ours)
    INVALID = "invalid"  # the members disagree on the group's settings
    WAIT = "wait"  # fewer gated members than the group's size
    PLAN = "plan"  # phase 1 for `keys` (the whole group)
    VOID = "void"  # take back a partial (or mixed) plan of `keys`
    RELEASE = "release"  # phase 2 for `keys` (their plan is complete)
    RECOVER = "recover"  # place replacement members `keys` next to the running ones


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    keys: tuple[str, ...] = ()
    reason: str = ""
    anchor: PlacementRecord | None = None
    """RECOVER: where the running members' group is."""
    spec: GroupSpec | None = None


def _agreed(specs: Mapping[str, GroupSpec]) -> tuple[GroupSpec | None, str]:
    """The group's settings when every member declares the same, else why not."""
    distinct = sorted(set(specs.values()), key=repr)
    if len(distinct) == 1:
        return distinct[0], ""
    first, second = distinct[0], distinct[1]
    which = next(k for k, s in sorted(specs.items()) if s == second)
    return None, (
        f"members of group {first.key} disagree on the group's settings: {which} declares "
        f"{_settings(second)}, others {_settings(first)}; give every member the same "
        f"{keys.GROUP_SIZE}, topology and strategy annotations"
    )


def _settings(spec: GroupSpec) -> str:
    return (
        f"size {spec.size}, required {spec.required or '-'}, preferred "
        f"{spec.preferred or '-'}, strategy {spec.strategy.value}, topology {spec.topology or '-'}"
        + "".join(
            f", {what} {given[1]} per {given[0]}"
            for what, given in (("at most", spec.most_per_domain), ("slices of", spec.slice))
            if given is not None
        )
    )


def next_step(specs: Mapping[str, GroupSpec], members: Iterable[MemberView]) -> Step:
    """The next thing to do for a group, from its live members alone (docs/DESIGN.md,
    "Groups across nodes: the operator protocol"): once a member is released, gated ones
    with a complete plan are RELEASEd, the others RECOVERed next to the running ones;
    before, one complete plan of at least `size` is RELEASEd, any other plan VOIDed, and
    with none the group is PLANned once `size` gated members exist."""
    views = list(members)
    gated = [v for v in views if v.gated]
    if not gated:
        return Step(StepKind.IDLE)
    spec, why = _agreed(specs)
    if spec is None:
        return Step(StepKind.INVALID, tuple(v.key for v in gated), reason=why)
    released = [v for v in views if not v.gated and v.record is not None]
    if released:
        ready = tuple(v.key for v in gated if v.planned)
        if ready:
            return Step(StepKind.RELEASE, ready, spec=spec)
        return Step(
            StepKind.RECOVER, tuple(v.key for v in gated), anchor=released[0].record, spec=spec
        )
    planned = [v for v in gated if v.record is not None or v.problem is not None]
    if planned:
        plans = {v.record.planned for v in planned if v.record is not None}
        broken = [v for v in planned if v.problem is not None]
        if broken or len(plans) > 1 or len(planned) < len(gated) or len(planned) < spec.size:
            return Step(StepKind.VOID, tuple(v.key for v in planned), spec=spec)
        return Step(StepKind.RELEASE, tuple(v.key for v in planned), spec=spec)
    if len(gated) < spec.size:
        return Step(StepKind.WAIT, tuple(v.key for v in gated), spec=spec)
    return Step(StepKind.PLAN, tuple(v.key for v in gated), spec=spec)


class ReleaseError(ValueError):
    """A member cannot be released onto its planned node as it is."""


def release_operations(pod: RawPod, node: str, gate: str = GATE) -> list[dict[str, Any]]:
    """Phase 2's JSON patch: `nodeSelector[kubernetes.io/hostname] = node` added and the
    gate removed, guarded by `test`s of what was read (the only changes allowed on a gated
    pod); [] when already released onto `node`."""
    operations: list[dict[str, Any]] = []
    selector = _spec(pod).get("nodeSelector")
    if not isinstance(selector, Mapping) or not selector:
        operations.append(
            {"op": "add", "path": "/spec/nodeSelector", "value": {HOSTNAME_LABEL: node}}
        )
    elif selector.get(HOSTNAME_LABEL) != node:
        if HOSTNAME_LABEL in selector:
            raise ReleaseError(
                f"{pod_view.pod_key(pod)} selects node {selector[HOSTNAME_LABEL]!r} itself, "
                f"but its group's plan put it on {node!r}"
            )
        operations.append({"op": "test", "path": "/spec/nodeSelector", "value": dict(selector)})
        operations.append(
            {"op": "add", "path": "/spec/nodeSelector/" + _HOSTNAME_POINTER, "value": node}
        )
    return operations + gate_removal(pod, gate)


def gate_removal(pod: RawPod, gate: str) -> list[dict[str, Any]]:
    """The JSON patch that removes `gate`, guarded by a `test` of it as read ([] without it)."""
    for index, found in enumerate(_gates(pod)):
        if isinstance(found, Mapping) and found.get("name") == gate:
            path = f"/spec/schedulingGates/{index}"
            return [
                {"op": "test", "path": path, "value": dict(found)},
                {"op": "remove", "path": path},
            ]
    return []
