"""`NodeResourceTopology` (`topology.node.k8s.io/v1alpha2`), as NFD's topology-updater writes it and
scheduler-plugins' NodeResourceTopologyMatch reads it (zones, costs, attributes: docs/DESIGN.md,
"Exports"). Amounts are quantities (strings), as the API server stores them.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from numatopo_engine.exports.wire import ForeignObject, ForeignWire
from numatopo_engine.exports.zones import MANAGED_LABEL, DeviceNames, numa_zones
from numatopo_engine.model import NumatopologySpec, ObjectMeta
from numatopo_engine.state import NodeState

GROUP = "topology.node.k8s.io"
VERSION = "v1alpha2"
KIND = "NodeResourceTopology"

_POLICY_WORDS = {
    "single-numa-node": "SingleNUMANode",
    "restricted": "Restricted",
    "best-effort": "BestEffort",
}
_SCOPE_WORDS = {"container": "ContainerLevel", "pod": "PodLevel"}


class AttributeInfo(ForeignWire):
    name: str
    value: str


class CostInfo(ForeignWire):
    name: str
    value: int


class ResourceInfo(ForeignWire):
    """Amounts of one resource in a zone, as quantity strings (int-or-string upstream)."""

    name: str
    capacity: str
    allocatable: str
    available: str


class Zone(ForeignWire):
    name: str
    type: str
    parent: str | None = None
    costs: list[CostInfo] = Field(default_factory=list)
    attributes: list[AttributeInfo] | None = None
    resources: list[ResourceInfo] = Field(default_factory=list)


class NodeResourceTopology(ForeignObject):
    """The whole object, cluster-scoped, named after its node."""

    plural: ClassVar[str] = "noderesourcetopologies"

    api_version: Literal["topology.node.k8s.io/v1alpha2"] = Field(
        default="topology.node.k8s.io/v1alpha2", alias="apiVersion"
    )
    kind: Literal["NodeResourceTopology"] = "NodeResourceTopology"
    metadata: ObjectMeta
    topology_policies: list[str] = Field(default_factory=list, alias="topologyPolicies")
    attributes: list[AttributeInfo] = Field(default_factory=list)
    zones: list[Zone]


def zone_name(numa: int) -> str:
    """The zone of NUMA node `numa`, named as NFD names it."""
    return f"node-{numa}"


def topology_policy(policy: str, scope: str) -> str:
    """The `topologyPolicies` word (`SingleNUMANodeContainerLevel`...); "None" if NFD has none."""
    word, level = _POLICY_WORDS.get(policy), _SCOPE_WORDS.get(scope)
    return word + level if word and level else "None"


def node_resource_topology(
    node: str, spec: NumatopologySpec, state: NodeState, names: DeviceNames | None = None
) -> NodeResourceTopology:
    """The NodeResourceTopology of `node`: `spec`'s NUMA nodes with what `state` leaves available,
    devices under `names` (`zones.DeviceNames`) where it names them."""
    # Plain dicts, validated by the model in one pass (a 64-NUMA node has 4,096 costs).
    zones = [
        {
            "name": zone_name(zone.numa),
            "type": "Node",
            "costs": [
                {"name": zone_name(other), "value": distance}
                for other, distance in sorted(zone.distances.items())
            ],
            "resources": [
                {
                    "name": name,
                    "capacity": str(amounts.capacity),
                    "allocatable": str(amounts.allocatable),
                    "available": str(amounts.available),
                }
                for name, amounts in zone.resources.items()
            ],
        }
        for zone in numa_zones(spec, state, names)
    ]
    policies = spec.policies
    return NodeResourceTopology.model_validate(
        {
            "metadata": {"name": node, "labels": MANAGED_LABEL},
            "topologyPolicies": [
                topology_policy(policies.topology_manager_policy, policies.topology_manager_scope)
            ],
            # Their attribute names (NFD's topology-updater), read by NodeResourceTopologyMatch.
            "attributes": [
                {"name": "topologyManagerPolicy", "value": policies.topology_manager_policy},
                {"name": "topologyManagerScope", "value": policies.topology_manager_scope},
            ],
            "zones": zones,
        }
    )
