"""One pod as the agent reads it (pure), built once per watch event: every part of the agent asks
the view, never the raw body (docs/DESIGN.md, "Node agent (enforcement)"). The body stays on the
view for what only the API needs (patch planning against its conditions, Events, container specs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from numatopo_engine.annotations import ASSIGNMENT, OBSERVED, Assignment, Observed
from numatopo_exporter.agent import cgroups

_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class RunningContainer:
    name: str
    container_id: cgroups.ContainerId


@dataclass(frozen=True)
class PodView:
    uid: str
    namespace: str
    name: str
    node_name: str | None
    phase: str
    created: str
    """`metadata.creationTimestamp` as written (the kubelet's admission order)."""
    deleting: bool
    qos: cgroups.QosClass | None
    running: tuple[RunningContainer, ...]
    """Containers with a running state and a parseable id, by name."""
    admitted: bool
    """The kubelet has reported on this pod (a start time, container statuses), which it does
    only once it has admitted this UID (the API server empties the status of a new pod)."""
    annotation: str | None
    """The raw `numatopo.io/assignment` text, to notice a changed assignment."""
    assignment: Assignment | None
    """The annotation parsed; None when absent or invalid (`invalid` says why)."""
    invalid: str
    observed: Observed | None
    """`numatopo.io/observed` parsed; None when absent or unreadable (rewritten then)."""
    body: dict[str, Any] = field(compare=False, repr=False)

    @classmethod
    def of(cls, body: dict[str, Any]) -> PodView:
        meta = body.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if not isinstance(annotations, dict):
            annotations = {}
        status = body.get("status") or {}
        text = annotations.get(ASSIGNMENT)
        text = text if isinstance(text, str) else None
        assignment, invalid = _parse_assignment(text)
        node = (body.get("spec") or {}).get("nodeName")
        return cls(
            uid=str(meta.get("uid", "")),
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            node_name=str(node) if node is not None else None,
            phase=str(status.get("phase") or ""),
            created=str(meta.get("creationTimestamp", "")),
            deleting=bool(meta.get("deletionTimestamp")),
            qos=_qos(status),
            running=_running(status),
            admitted=_admitted(status),
            annotation=text,
            assignment=assignment,
            invalid=invalid,
            observed=_observed(annotations.get(OBSERVED)),
            body=body,
        )

    @property
    def key(self) -> str:
        """`namespace/name`, as NodeState and PodResources key pods."""
        return f"{self.namespace}/{self.name}"

    @property
    def finished(self) -> bool:
        """Succeeded or Failed: its containers are gone, its claims too."""
        return self.phase in _FINISHED_PHASES


def _parse_assignment(text: str | None) -> tuple[Assignment | None, str]:
    if text is None:
        return None, ""
    try:
        return Assignment.model_validate_json(text), ""
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem["loc"]) or "annotation"
        return None, f"{where}: {problem['msg']}"


def _observed(text: object) -> Observed | None:
    if not isinstance(text, str):
        return None
    try:
        return Observed.model_validate_json(text)
    except ValidationError:
        return None


def _running(status: dict[str, Any]) -> tuple[RunningContainer, ...]:
    out: list[RunningContainer] = []
    for container in status.get("containerStatuses") or []:
        parsed = cgroups.parse_container_id(str(container.get("containerID") or ""))
        if parsed is not None and "running" in (container.get("state") or {}):
            out.append(RunningContainer(name=str(container.get("name")), container_id=parsed))
    return tuple(sorted(out, key=lambda c: c.name))


def _admitted(status: dict[str, Any]) -> bool:
    statuses = ("containerStatuses", "initContainerStatuses")
    return bool(status.get("startTime")) or any(status.get(s) for s in statuses)


def _qos(status: dict[str, Any]) -> cgroups.QosClass | None:
    try:
        return cgroups.QosClass(status.get("qosClass", ""))
    except ValueError:
        return None
