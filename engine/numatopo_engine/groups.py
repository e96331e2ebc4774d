"""Read a pod's group membership and rank from its metadata (pure).

The annotations, labels and rank sources are docs/DESIGN.md's "Pod contract"; every bad value raises
`InvalidRequestError` whose `field` is the key.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from numatopo_engine import annotations as keys
from numatopo_engine.errors import InvalidRequestError
from numatopo_engine.kube_names import is_qualified_name
from numatopo_engine.pod_options import choice, echo, whole_number

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
MIN_AVAILABLE = "scheduling.x-k8s.io/min-available"
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"

# Far above any training job (the largest run tens of thousands of GPUs, 8 per pod), small enough
# that a typo is refused instead of waited for forever.
MAX_GROUP_SIZE = 100_000
_RANK = re.compile(r"^[0-9]{1,9}$")
_STATEFUL_ORDINAL = re.compile(r"-([0-9]{1,9})$")
_MAX_NAME = 253


class Strategy(enum.StrEnum):
    """How members spread over the nodes of the chosen domain."""

    CONSOLIDATED = "consolidated"
    DISTRIBUTED = "distributed"
    BALANCED = "balanced"


@dataclass(frozen=True)
class GroupSpec:
    namespace: str
    name: str
    size: int
    required: str | None  # a level's node label key every member shares one domain of
    preferred: str | None  # tried first, wider levels accepted
    strategy: Strategy
    topology: str | None  # NetworkTopology name; None: the only one, or `default`
    most_per_domain: tuple[str, int] | None = None  # (level, n): n members per domain at most
    slice: tuple[str, int] | None = None  # (level, n): n consecutive ranks per domain

    @property
    def key(self) -> str:
        """`namespace/name`, as groups are told apart."""
        return f"{self.namespace}/{self.name}"


def group_of(metadata: Mapping[str, Any]) -> GroupSpec | None:
    """The group a pod belongs to, or None; raises `InvalidRequestError` for a bad value, group
    settings without a group name, a group without a size, or both required and preferred levels."""
    annotations = _strings(metadata, "annotations")
    labels = _strings(metadata, "labels")
    name = annotations.get(keys.GROUP)
    field = keys.GROUP
    if name is None and POD_GROUP_LABEL in labels:
        name, field = labels[POD_GROUP_LABEL], POD_GROUP_LABEL
    if name is None:
        stray = [k for k in keys.GROUP_ANNOTATIONS if k in annotations and k != keys.RANK]
        if stray:
            raise InvalidRequestError(
                stray[0], f"set without {keys.GROUP} (or the label {POD_GROUP_LABEL})"
            )
        return None
    if not name or len(name) > _MAX_NAME or any(c.isspace() for c in name):
        raise InvalidRequestError(
            field, f"{echo(name)} is not a group name (1-{_MAX_NAME} characters, no spaces)"
        )
    size = _size(annotations)
    required = _level(annotations, keys.TOPOLOGY_REQUIRED)
    preferred = _level(annotations, keys.TOPOLOGY_PREFERRED)
    if required is not None and preferred is not None:
        raise InvalidRequestError(
            keys.TOPOLOGY_PREFERRED,
            f"set together with {keys.TOPOLOGY_REQUIRED}; give one of the two",
        )
    strategy = choice(annotations, keys.PLACEMENT_STRATEGY, Strategy, Strategy.CONSOLIDATED)
    most_per_domain = _level_count(annotations, keys.MAX_MEMBERS_PER_DOMAIN)
    sliced = _level_count(annotations, keys.SLICE)
    if sliced is not None and size % sliced[1]:
        raise InvalidRequestError(
            keys.SLICE, f"slices of {sliced[1]} do not divide the group's size {size}"
        )
    topology = annotations.get(keys.TOPOLOGY)
    if topology is not None and (not topology or len(topology) > _MAX_NAME):
        raise InvalidRequestError(keys.TOPOLOGY, f"{echo(topology)} is not a NetworkTopology name")
    namespace = metadata.get("namespace")
    return GroupSpec(
        namespace=namespace if isinstance(namespace, str) and namespace else "default",
        name=name,
        size=size,
        required=required,
        preferred=preferred,
        strategy=strategy,
        topology=topology,
        most_per_domain=most_per_domain,
        slice=sliced,
    )


def rank_of(metadata: Mapping[str, Any]) -> int | None:
    """The member's rank, or None; a rank that is no whole number raises `InvalidRequestError`."""
    annotations = _strings(metadata, "annotations")
    labels = _strings(metadata, "labels")
    for source, key in (
        (annotations, keys.RANK),
        (annotations, JOB_COMPLETION_INDEX),
        (labels, JOB_COMPLETION_INDEX),
        (labels, POD_INDEX_LABEL),
    ):
        if key in source:
            return _rank(source[key], key)
    name = metadata.get("name")
    if isinstance(name, str) and _owned_by_statefulset(metadata):
        found = _STATEFUL_ORDINAL.search(name)
        if found:
            return int(found.group(1))
    return None


# -- reading ------------------------------------------------------------------------


def _strings(metadata: Mapping[str, Any], where: str) -> dict[str, str]:
    raw = metadata.get(where)
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidRequestError(
            f"metadata.{where}", f"expected a mapping, got {type(raw).__name__}"
        )
    values: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            continue
        if not isinstance(value, str):
            if key in keys.GROUP_ANNOTATIONS or key in (
                POD_GROUP_LABEL, MIN_AVAILABLE, JOB_COMPLETION_INDEX, POD_INDEX_LABEL,
            ):  # fmt: skip
                raise InvalidRequestError(
                    key, f"values must be strings, got {type(value).__name__} (quote it in YAML)"
                )
            continue
        values[key] = value.strip()
    return values


def _size(annotations: Mapping[str, str]) -> int:
    key = keys.GROUP_SIZE if keys.GROUP_SIZE in annotations else MIN_AVAILABLE
    if key not in annotations:
        raise InvalidRequestError(
            keys.GROUP_SIZE,
            f"a group needs a size: set {keys.GROUP_SIZE} (or {MIN_AVAILABLE}) "
            f"to a whole number from 1 to {MAX_GROUP_SIZE}",
        )
    return whole_number(key, annotations[key], MAX_GROUP_SIZE)


def _level(annotations: Mapping[str, str], key: str) -> str | None:
    text = annotations.get(key)
    if text is None:
        return None
    if not is_qualified_name(text):
        raise InvalidRequestError(
            key,
            f"{echo(text)} is not a node label key (such as "
            "topology.k8s.aws/network-node-layer-3 or nvidia.com/gpu.clique)",
        )
    return text


def _level_count(annotations: Mapping[str, str], key: str) -> tuple[str, int] | None:
    """`<level>=<n>`: a level's label key and a whole number."""
    text = annotations.get(key)
    if text is None:
        return None
    level, equals, count = text.rpartition("=")
    if not equals or not is_qualified_name(level.strip()):
        raise InvalidRequestError(
            key,
            f"{echo(text)} is not <level>=<n> (a node label key of a NetworkTopology level, "
            "such as topology.k8s.aws/network-node-layer-3=4)",
        )
    return level.strip(), whole_number(key, count.strip(), MAX_GROUP_SIZE)


def _rank(text: str, key: str) -> int:
    if not _RANK.match(text):
        raise InvalidRequestError(key, f"{echo(text)} is not a whole number from 0")
    return int(text)


def _owned_by_statefulset(metadata: Mapping[str, Any]) -> bool:
    owners = metadata.get("ownerReferences")
    if not isinstance(owners, list):
        return False
    return any(isinstance(o, Mapping) and o.get("kind") == "StatefulSet" for o in owners)
