"""What groups read of Nodes and NetworkTopologies, by name (pure).

Node views are `cluster_feed`'s, NetworkTopologies a kopf index's; the group worker reads
both live (`GroupState.attach`). Only what placement needs is kept: a Node's frequent
status updates change nothing here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf
import pydantic

from numatopo_engine.model import GROUP, VERSION
from numatopo_engine.network_topology import (
    HOSTNAME_LABEL,
    NETWORK_TOPOLOGY_PLURAL,
    NetworkTopologySpec,
)

# Kubernetes' own words for a node that must not get new pods.
UNSCHEDULABLE_TAINTS = frozenset(
    {
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }
)


@dataclass(frozen=True, slots=True)
class NodeView:
    """What group placement reads of a Node."""

    labels: Mapping[str, str]
    schedulable: bool
    """False when cordoned, not Ready, or tainted so (no replacement onto a failed node)."""
    taints: tuple[Mapping[str, Any], ...] = ()

    def as_node(self, name: str) -> dict[str, Any]:
        """The fields `node_rules.refusal` reads, with the kubelet's hostname label."""
        return {
            "metadata": {"name": name, "labels": {HOSTNAME_LABEL: name, **self.labels}},
            "spec": {"unschedulable": not self.schedulable, "taints": list(self.taints)},
        }


def _schedulable(body: Mapping[str, Any]) -> bool:
    spec = body.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    for taint in spec.get("taints") or []:
        if isinstance(taint, Mapping) and taint.get("key") in UNSCHEDULABLE_TAINTS:
            return False
    for condition in (body.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return True


def node_views(*, body: kopf.Body, **_: Any) -> dict[str, NodeView]:
    labels = {str(k): str(v) for k, v in (body.metadata.labels or {}).items()}
    taints = (body.get("spec") or {}).get("taints")
    listed = taints if isinstance(taints, list) else []
    kept = tuple(dict(t) for t in listed if isinstance(t, Mapping))
    return {body.metadata.name: NodeView(labels, _schedulable(body), kept)}


def network_topologies(
    *, body: kopf.Body, logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any
) -> dict[str, NetworkTopologySpec]:
    """name -> its spec; an invalid one is logged and left out (groups naming it wait)."""
    name = body.metadata.name
    try:
        spec = NetworkTopologySpec.model_validate(body.get("spec") or {})
    except pydantic.ValidationError as exc:
        logger.error("NetworkTopology/%s has an invalid spec, ignoring it: %s", name, exc)
        return {}
    return {name: spec}


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.index(GROUP, VERSION, NETWORK_TOPOLOGY_PLURAL, registry=registry)(network_topologies)
