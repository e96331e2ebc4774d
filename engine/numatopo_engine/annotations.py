"""The pod annotation contract: keys, allowed values, and the assignment wire format.

Users write `numatopo.io/policy` (opt-in) and the optional knobs below; the operator writes
`numatopo.io/assignment` and `numatopo.io/state`. See DESIGN.md, "Pod annotations".
`TRUSTED_WRITERS` says which annotations something else acts on, and who alone may write them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field, NonNegativeInt, model_validator

from numatopo_engine.cpuset import CPUSet, ids_named
from numatopo_engine.model import WireModel

PREFIX = "numatopo.io/"
POLICY = PREFIX + "policy"
SCOPE = PREFIX + "scope"
CPU = PREFIX + "cpu"
SMT = PREFIX + "smt"
GPU_LINKS = PREFIX + "gpu-links"
MAX_NUMA_NODES = PREFIX + "max-numa-nodes"
ASSIGNMENT = PREFIX + "assignment"
STATE = PREFIX + "state"
# Why a pod is `Unsatisfiable` or `Invalid`, written with `STATE` (DESIGN.md, "Pod annotations").
REASON = PREFIX + "reason"
# What the node agent saw the kubelet give each container (PodResources): the devices it really
# holds, compared with the assignment of sequence `seq`.
OBSERVED = PREFIX + "observed"

USER_ANNOTATIONS = (POLICY, SCOPE, CPU, SMT, GPU_LINKS, MAX_NUMA_NODES)

# Multi-node groups (`numatopo_engine.groups` validates them; DESIGN.md, "Groups").
GROUP = PREFIX + "group"
# Scheduling gate of a pod whose ResourceClaims numatopo allocates (GPUs on DRA clusters).
DRA_GATE = PREFIX + "dra"
GROUP_SIZE = PREFIX + "group-size"
TOPOLOGY_REQUIRED = PREFIX + "topology-required"
TOPOLOGY_PREFERRED = PREFIX + "topology-preferred"
PLACEMENT_STRATEGY = PREFIX + "placement-strategy"
MAX_MEMBERS_PER_DOMAIN = PREFIX + "max-members-per-domain"
SLICE = PREFIX + "slice"
TOPOLOGY = PREFIX + "topology"
RANK = PREFIX + "rank"
# Written by the operator on every planned member: group, level, domain, rank, plan time.
GROUP_PLACEMENT = PREFIX + "group-placement"
GROUP_ANNOTATIONS = (
    GROUP, GROUP_SIZE, TOPOLOGY_REQUIRED, TOPOLOGY_PREFERRED, PLACEMENT_STRATEGY,
    MAX_MEMBERS_PER_DOMAIN, SLICE, TOPOLOGY, RANK,
)  # fmt: skip


class Writer(enum.StrEnum):
    """Who alone may write an annotation that something other than its own pod acts on."""

    OPERATOR = "operator"  # the operator's service account
    NODE_AGENT = "node-agent"  # the node pods' account, on the pod's own node only


# What the node side or the operator trusts, and who alone writes it (docs/operations.md,
# "Annotations and claims"); the chart's admission policies hold exactly these (tests/chart).
TRUSTED_WRITERS: dict[str, Writer] = {
    ASSIGNMENT: Writer.OPERATOR,
    GROUP_PLACEMENT: Writer.OPERATOR,
    OBSERVED: Writer.NODE_AGENT,
}


class PolicyName(enum.StrEnum):
    """Topology policies, with the kubelet Topology Manager's semantics."""

    NONE = "none"
    BEST_EFFORT = "best-effort"
    RESTRICTED = "restricted"
    SINGLE_NUMA_NODE = "single-numa-node"


class Scope(enum.StrEnum):
    POD = "pod"
    CONTAINER = "container"


class CpuMode(enum.StrEnum):
    EXCLUSIVE = "exclusive"  # whole CPUs for this container only
    NUMA = "numa"  # the shared CPUs of the chosen NUMA node(s)
    NONE = "none"  # CPUs are not placed (devices and memory still are)


class SmtMode(enum.StrEnum):
    FULL_CORES = "full-cores"
    ANY = "any"


class GpuLinksMode(enum.StrEnum):
    REQUIRED = "required"
    PREFERRED = "preferred"
    IGNORE = "ignore"


class State(enum.StrEnum):
    ASSIGNED = "Assigned"
    UNSATISFIABLE = "Unsatisfiable"
    INVALID = "Invalid"
    ENFORCED = "Enforced"
    ENFORCEMENT_FAILED = "EnforcementFailed"


NumaKey = Annotated[str, Field(pattern=r"^\d+$")]


class ContainerAssignment(WireModel):
    """What one container was given. `cpus` is exclusive unless `exclusive` is false."""

    cpus: CPUSet = Field(default_factory=CPUSet)
    exclusive: bool = True
    mems: CPUSet = Field(default_factory=CPUSet, description="NUMA node ids, cpulist format.")
    gpus: list[str] = Field(default_factory=list, description="GPU UUIDs (or PCI bus ids).")
    gpu_indices: list[int] = Field(default_factory=list)
    mig: list[str] = Field(
        default_factory=list,
        description="MIG device UUIDs (MIG-...), else <GPU name>/mig-<index>; never whole GPUs.",
    )
    mig_indices: list[int] = Field(
        default_factory=list, description="MigDevice.index of each entry of `mig`."
    )
    nics: list[str] = Field(default_factory=list)
    memory: dict[NumaKey, int] = Field(
        default_factory=dict, description="Bytes of memory booked per NUMA node id."
    )
    hugepages: dict[NumaKey, dict[str, int]] = Field(
        default_factory=dict, description="Bytes of huge pages booked per NUMA node and size."
    )


# The most ids all of an assignment's CPU lists may name, counted before any is read
# (docs/operations.md, "Annotations and claims"); this many read in ~40 ms.
MAX_ASSIGNED_IDS = 1 << 18


class Assignment(WireModel):
    """The `numatopo.io/assignment` annotation (JSON), version 1."""

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        containers = data.get("containers") if isinstance(data, dict) else None
        if not isinstance(containers, dict):
            return data
        named = sum(
            ids_named(text)
            for container in containers.values()
            if isinstance(container, dict)
            for text in (container.get("cpus"), container.get("mems"))
            if isinstance(text, str)
        )
        if named > MAX_ASSIGNED_IDS:
            raise ValueError(
                f"its CPU lists name {named} ids in all, more than the {MAX_ASSIGNED_IDS} "
                "an assignment may"
            )
        return data

    v: Literal[1] = 1
    node: str
    numa_nodes: list[int] = Field(default_factory=list)
    policy: PolicyName = PolicyName.NONE
    containers: dict[str, ContainerAssignment] = Field(default_factory=dict)
    seq: NonNegativeInt = Field(
        default=0,
        description=(
            "Decision sequence on the node: the operator writes one more than the highest "
            "sequence booked there. The agent orders exclusive claims by it, so what is "
            "already enforced is never displaced by a later claim. 0: decided before "
            "sequences existed (oldest)."
        ),
    )

    sig: str | None = Field(
        default=None,
        description=(
            "The operator's signature over the pod (uid, namespace/name) and every other "
            "field (`numatopo_engine.signing`): the agent and the operator book only "
            "assignments it verifies. Absent in the CLI's output (nothing books that)."
        ),
    )


class ObservedContainer(WireModel):
    """The devices one container holds, as the kubelet's PodResources API lists them."""

    devices: dict[str, list[str]] = Field(
        default_factory=dict, description="Resource name -> device plugin IDs."
    )
    matches: bool = Field(
        default=True,
        description=(
            "Whether its GPUs, and its RDMA NICs where their device IDs name the node's "
            "NICs, are the ones its assignment names."
        ),
    )

    def gpu_ids(self, is_gpu: Callable[[str], bool]) -> list[str]:
        """The IDs of the devices held under GPU resources (`is_gpu` tells which)."""
        return [d for resource, ids in self.devices.items() if is_gpu(resource) for d in ids]


class Observed(WireModel):
    """The `numatopo.io/observed` annotation (JSON), version 1, by the node agent."""

    v: Literal[1] = 1
    seq: NonNegativeInt = Field(
        description="The `Assignment.seq` these devices were compared with."
    )
    containers: dict[str, ObservedContainer] = Field(default_factory=dict)

    @property
    def mismatched(self) -> list[str]:
        return sorted(name for name, c in self.containers.items() if not c.matches)
