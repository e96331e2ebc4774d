"""`PodView`: one pod event, read once; `slim_pod`: the part of a pod numatopo keeps (pure).

docs/DESIGN.md, "The operator's records", says who builds views and why each fact is worked
out once; "which pod is this" (`key`) and "has it ended" (`finished`, `ended`) are ruled
here only. The slim view leaves out what numatopo never reads (managed fields, volumes,
commands, environment, probes): most of a pod, gigabytes at 150,000 pods.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pydantic

from numatopo_engine import annotations as keys
from numatopo_engine import pod_request
from numatopo_engine.annotations import Assignment, Observed
from numatopo_engine.errors import InvalidRequestError
from numatopo_engine.pod_options import shorten
from numatopo_engine.request import PodRequest
from numatopo_engine.resources import ResourceNames

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def _mapping(found: object) -> Mapping[str, Any]:
    return found if isinstance(found, Mapping) else {}


def pod_key(pod: Mapping[str, Any]) -> str:
    """`namespace/name`, the key of a pod in the ledger, in `NodeState`, everywhere."""
    metadata = _mapping(pod.get("metadata"))
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name', '')}"


@dataclass(frozen=True, eq=False)
class PodView(Mapping[str, Any]):
    """One pod as one event showed it (`body`, which it reads as), each fact read on first
    use and kept: build it once per event and pass it on."""

    body: Mapping[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.body[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.body)

    def __len__(self) -> int:
        return len(self.body)

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodView:
        """`pod`'s view: the view itself when it is one already (what it parsed stays)."""
        return pod if isinstance(pod, PodView) else cls(pod)

    @cached_property
    def metadata(self) -> Mapping[str, Any]:
        return _mapping(self.body.get("metadata"))

    @cached_property
    def annotations(self) -> Mapping[str, Any]:
        return _mapping(self.metadata.get("annotations"))

    @cached_property
    def status(self) -> Mapping[str, Any]:
        return _mapping(self.body.get("status"))

    @cached_property
    def spec(self) -> Mapping[str, Any]:
        return _mapping(self.body.get("spec"))

    @cached_property
    def key(self) -> str:
        return pod_key(self.body)

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace") or "default")

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @cached_property
    def uid(self) -> str:
        """The pod's uid ('' when the manifest has none)."""
        uid = self.metadata.get("uid")
        return uid if isinstance(uid, str) else ""

    @cached_property
    def node(self) -> str | None:
        """The node the pod is bound to, or None while it is pending."""
        node = self.spec.get("nodeName")
        return node if isinstance(node, str) and node else None

    @cached_property
    def finished(self) -> bool:
        """Every container has stopped for good: its CPUs and GPUs are free again."""
        return self.status.get("phase") in FINISHED_PHASES

    @property
    def ref(self) -> dict[str, str]:
        """What an Event or a Binding names the pod by."""
        return {"namespace": self.namespace, "name": self.name, "uid": self.uid}

    @property
    def deleting(self) -> bool:
        return bool(self.metadata.get("deletionTimestamp"))

    @property
    def ended(self) -> bool:
        """Finished, or on its way out: nothing is decided for it any more."""
        return self.finished or self.deleting

    @cached_property
    def assignment_read(self) -> Assignment | str | None:
        """`numatopo.io/assignment` parsed once; a string says why it is none; None: absent."""
        text = self.annotations.get(keys.ASSIGNMENT)
        if text is None:
            return None
        if not isinstance(text, str):
            return f"{keys.ASSIGNMENT} is not a string"
        try:
            return Assignment.model_validate_json(text)
        except pydantic.ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(part) for part in problem["loc"]) or "the value"
            return (
                f"{keys.ASSIGNMENT} is not a valid assignment ({where}: {problem['msg']}): "
                f"{shorten(text)!r}"
            )

    @property
    def assignment(self) -> Assignment | None:
        """The readable assignment; None when there is none or it is unreadable."""
        found = self.assignment_read
        return found if isinstance(found, Assignment) else None

    @cached_property
    def observed(self) -> Observed | None:
        """What the agent saw the kubelet give the pod (`numatopo.io/observed`), if readable."""
        text = self.annotations.get(keys.OBSERVED)
        if not isinstance(text, str):
            return None
        try:
            return Observed.model_validate_json(text)
        except pydantic.ValidationError:
            return None

    def request(self, resources: ResourceNames) -> PodRequest:
        """`pod_request.request_from_pod`, once per event for the resource names given (the
        workload mix and the decision both ask); `InvalidRequestError` each time asked."""
        kept = self.__dict__.get("_request")
        if kept is None or kept[0] is not resources:
            try:
                kept = (resources, pod_request.request_from_pod(self, resources))
            except InvalidRequestError as exc:
                kept = (resources, exc)
            self.__dict__["_request"] = kept
        if isinstance(kept[1], InvalidRequestError):
            raise kept[1]
        return kept[1]

    def with_node(self, node: str) -> PodView:
        """The same pod as if bound to `node` (the extender's bind, before the Binding)."""
        return PodView({**self.body, "spec": {**self.spec, "nodeName": node}})


_METADATA = ("namespace", "labels", "annotations", "ownerReferences")
_METADATA_OWN = ("name", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp")
_CONTAINER = ("name", "resources", "restartPolicy")
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_SPEC_DROPPED = ("volumes", *_CONTAINER_LISTS)
# `resourceClaimStatuses`: the names of the claims made from the pod's templates (`dra`).
_STATUS = ("phase", "startTime", "nominatedNodeName", "resourceClaimStatuses")
# Written by `kubectl apply`: a second copy of the whole manifest.
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


# Values at most this long are shared between pods (`_shared`): labels are at most 63.
SHARED_MAX = 64


def _shared(value: Any) -> Any:
    """One string for every pod that has it: namespaces, nodes, phases, policies, container
    names and quantities repeat across thousands of pods, each decoded page giving every
    pod its own copy. Longer values (an assignment, a signature) are one pod's own."""
    # `type(...) is str`: `sys.intern` takes no subclass (a StrEnum from Python callers).
    return sys.intern(value) if type(value) is str and len(value) <= SHARED_MAX else value


def _compact(found: Any) -> Any:
    """`found` rebuilt, new dicts and lists, keys and short values `_shared`: nothing of the
    decoded page stays referenced from a kept view but its long strings."""
    if isinstance(found, Mapping):
        return {_shared(k): _compact(v) for k, v in found.items()}
    if isinstance(found, list):
        return [_compact(v) for v in found]
    return _shared(found)


def _picked(found: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {name: _compact(found[name]) for name in names if name in found}


def _containers(found: object, names: tuple[str, ...]) -> list[Any]:
    if not isinstance(found, list):
        return []
    return [_picked(c, names) if isinstance(c, Mapping) else c for c in found]


def slim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The slim view of `pod` (new dicts and lists throughout; `pod` is left as it is)."""
    view: dict[str, Any] = _picked(pod, ("apiVersion", "kind"))
    metadata = pod.get("metadata")
    if isinstance(metadata, Mapping):
        kept = _picked(metadata, _METADATA)
        # One pod's own: not worth a place among the shared strings.
        kept.update((name, metadata[name]) for name in _METADATA_OWN if name in metadata)
        annotations = kept.get("annotations")
        if isinstance(annotations, Mapping) and _LAST_APPLIED in annotations:
            kept["annotations"] = {k: v for k, v in annotations.items() if k != _LAST_APPLIED}
        view["metadata"] = kept
    spec = pod.get("spec")
    if isinstance(spec, Mapping):
        kept = {_shared(k): _compact(v) for k, v in spec.items() if k not in _SPEC_DROPPED}
        for name in _CONTAINER_LISTS:
            if name in spec:
                kept[name] = _containers(spec[name], _CONTAINER)
        view["spec"] = kept
    status = pod.get("status")
    if isinstance(status, Mapping):
        kept = _picked(status, _STATUS)
        statuses = status.get("containerStatuses")
        if isinstance(statuses, list) and statuses:
            kept["containerStatuses"] = _containers(statuses, ("name",))
        view["status"] = kept
    return view
