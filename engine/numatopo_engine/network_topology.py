"""The `NetworkTopology` object: how nodes group into network domains (the wire format).

A topology is a list of levels, widest first, each named by a node label key, in the shape of
Kueue's Topology, KAI's topology and Volcano's HyperNodes: for example
`topology.k8s.aws/network-node-layer-1..3` (AWS EC2 instance topology), a rack or leaf switch label,
`nvidia.com/gpu.clique` (an NVLink multi-node domain such as an NVL72 rack). Nodes with equal values
of a level's label (and of every wider level's) form one domain of that level. An optional last
level `kubernetes.io/hostname` makes each node its own domain.

Cluster-scoped, `numatopo.io/v1alpha1`, plural `networktopologies`, short name `nettopo`. The
operator writes `status`; the CRD YAML is generated from these models.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator

from numatopo_engine.kube_names import is_qualified_name
from numatopo_engine.model import Condition, NonNegInt, ObjectMeta, WireModel

HOSTNAME_LABEL = "kubernetes.io/hostname"
NETWORK_TOPOLOGY_KIND = "NetworkTopology"
NETWORK_TOPOLOGY_PLURAL = "networktopologies"


class NetworkTopologyLevel(WireModel):
    node_label: str = Field(
        min_length=1,
        max_length=317,
        description="The node label key whose values name this level's domains.",
    )

    @field_validator("node_label")
    @classmethod
    def _label_key(cls, value: str) -> str:
        if not is_qualified_name(value):
            raise ValueError(f"{value!r} is not a Kubernetes label key")
        return value


class NetworkTopologySpec(WireModel):
    levels: list[NetworkTopologyLevel] = Field(
        min_length=1,
        max_length=16,
        description=(
            "Widest level first (a spine or network block), narrowest last (a leaf "
            "switch, an NVLink clique, or kubernetes.io/hostname). Labels are unique."
        ),
    )

    @field_validator("levels")
    @classmethod
    def _unique(cls, levels: list[NetworkTopologyLevel]) -> list[NetworkTopologyLevel]:
        seen: set[str] = set()
        for level in levels:
            if level.node_label in seen:
                raise ValueError(f"level {level.node_label!r} is listed twice")
            seen.add(level.node_label)
        if HOSTNAME_LABEL in seen and levels[-1].node_label != HOSTNAME_LABEL:
            raise ValueError(f"{HOSTNAME_LABEL} can only be the last (narrowest) level")
        return levels

    @property
    def labels(self) -> list[str]:
        """The level label keys, widest first."""
        return [level.node_label for level in self.levels]


class DomainCount(WireModel):
    level: str
    count: NonNegInt = Field(description="Domains of this level among the labelled nodes.")


class FreeDomain(WireModel):
    level: str
    value: str = Field(description="The domain's label value.")
    free_gpus: NonNegInt = Field(alias="freeGPUs")


class NetworkTopologyStatus(WireModel):
    domains: list[DomainCount] = Field(default_factory=list)
    free_gpus: NonNegInt = Field(default=0, alias="freeGPUs")
    largest_free_domain: FreeDomain | None = Field(
        default=None, description="The domain of the narrowest level with the most free GPUs."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class NetworkTopology(WireModel):
    """The whole custom resource, cluster-scoped."""

    plural: ClassVar[str] = NETWORK_TOPOLOGY_PLURAL

    api_version: Literal["numatopo.io/v1alpha1"] = Field(
        default="numatopo.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["NetworkTopology"] = "NetworkTopology"
    metadata: ObjectMeta
    spec: NetworkTopologySpec
    status: NetworkTopologyStatus | None = None
