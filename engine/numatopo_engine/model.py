"""The `Numatopology` object: one node's hardware topology (spec) and what is free (status).

The one definition of the wire format: the CRD schema (`numatopo crd`, `crds/numatopology.yaml`),
`numatopo inspect -o json|yaml` and the `NODE.json` `numatopo assign` reads.

Glossary (as in the kubelet's CPU manager):
  CPU     a logical CPU (hardware thread), the unit of `cpuset.cpus`
  core    a physical core; its `core` id is the lowest logical CPU id among its threads, so
          it is unique across the whole node (sysfs core_id is only unique within a package)
  socket  a physical package (`physical_package_id`)
  NUMA    a NUMA node as the kernel numbers it (ids need not be 0..N-1; a node may have
          memory and no CPUs)
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from numatopo_engine.cpuset import CPUSet

GROUP = "numatopo.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Numatopology"

NonNegInt = Annotated[int, Field(ge=0)]


# Distinct sets of named fields `WireModel.model_post_init` shares at most (each wire type has a
# few: the fields its writers fill); past it the table starts again.
FIELDS_SETS_KEPT = 1024
_FIELDS_SETS: dict[frozenset[str], set[str]] = {}


class WireModel(BaseModel):
    """Base of every wire type: camelCase on the wire, snake_case in Python, no unknown keys."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    def model_post_init(self, context: Any, /) -> None:
        # pydantic gives every instance a set of the fields its input named: 728 bytes for a
        # ContainerAssignment, twice the rest of it, kept per annotated pod (50,000 at 5,000 nodes)
        # and per device of every node. Instances naming the same fields share one set; models are
        # frozen, so pydantic never adds to it (a copy gets a set of its own).
        fields = self.__pydantic_fields_set__
        key = frozenset(fields)
        shared = _FIELDS_SETS.get(key)
        if shared is None:
            if len(_FIELDS_SETS) >= FIELDS_SETS_KEPT:
                _FIELDS_SETS.clear()
            shared = _FIELDS_SETS[key] = fields
        object.__setattr__(self, "__pydantic_fields_set__", shared)

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict as Kubernetes stores it (aliases, no unset optionals)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def to_annotation(self) -> str:
        """The same as compact JSON text, as an annotation holds it."""
        return self.model_dump_json(by_alias=True, exclude_none=True)


class PathType(enum.StrEnum):
    """PCIe path between two devices, narrowest first, as `nvidia-smi topo -m` names it."""

    PIX = "PIX"  # at most one PCIe bridge between them
    PXB = "PXB"  # several PCIe bridges, no host bridge
    PHB = "PHB"  # through a PCIe host bridge (the CPU's root complex)
    NODE = "NODE"  # across host bridges within one NUMA node
    SYS = "SYS"  # across the inter-socket link (QPI/UPI/Infinity Fabric)

    @property
    def rank(self) -> int:
        """0 for PIX (closest) .. 4 for SYS (farthest)."""
        return list(PathType).index(self)


class LinkType(enum.StrEnum):
    """A direct GPU-to-GPU link."""

    NVLINK = "NVLINK"
    XGMI = "XGMI"


class Policies(WireModel):
    """The kubelet's CPU and Topology Manager settings on this node."""

    cpu_manager_policy: str = "none"
    topology_manager_policy: str = "none"
    topology_manager_scope: str = "container"
    topology_manager_policy_options: dict[str, str] = Field(default_factory=dict)


class NumaNode(WireModel):
    id: NonNegInt
    cpus: CPUSet = Field(default_factory=CPUSet, description="Online CPUs of this node.")
    memory_bytes: NonNegInt = 0
    hugepages: dict[str, NonNegInt] = Field(
        default_factory=dict,
        description="Total huge pages per page size ('2Mi', '1Gi'), as page counts.",
    )
    distances: dict[str, NonNegInt] = Field(
        default_factory=dict,
        description="SLIT distance to every NUMA node, keyed by node id (10 = local).",
    )


class Cpu(WireModel):
    id: NonNegInt
    core: NonNegInt = Field(description="Lowest logical CPU id of the physical core.")
    socket: NonNegInt
    numa: NonNegInt | None = Field(
        default=None,
        description=(
            "NUMA node whose cpulist names the CPU; absent when none does (its node is "
            "offline or absent): such a CPU is in no numaNodes[].cpus and never handed out."
        ),
    )
    online: bool = True


MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


# A MIG device sits on its GPU's NUMA node and PCIe position and has no NVLink (MIG turns
# peer-to-peer off); NVIDIA's device plugin (`--mig-strategy=mixed`) advertises `nvidia.com/mig-*`.
class MigDevice(WireModel):
    """One MIG device (GPU instance + compute instance) of a GPU in MIG mode."""

    index: NonNegInt = Field(
        description=(
            "numatopo's device index: unique among gpus[].index and every MIG device of the "
            "node. Assignments name it in migIndices."
        )
    )
    profile: str = Field(
        min_length=1, max_length=40, pattern=r"^[0-9a-z][0-9a-z.+]*$",
        description="GPU instance profile as nvidia-smi names it, e.g. 3g.40gb, 1g.10gb+me.",
    )  # fmt: skip
    uuid: str = Field(default="", description="MIG-<uuid>: the device plugin's device ID.")
    resource: str = Field(
        default="",
        description=(
            "Extended resource; when not given, nvidia.com/mig-<profile> ('+' written as '.', "
            "which resource names allow)."
        ),
    )
    gpu_instance: NonNegInt | None = None
    compute_instance: NonNegInt | None = None
    memory_bytes: NonNegInt = 0

    @model_validator(mode="after")
    def _default_resource(self) -> MigDevice:
        if not self.resource:
            resource = MIG_RESOURCE_PREFIX + self.profile.replace("+", ".")
            object.__setattr__(self, "resource", resource)
        return self


class Gpu(WireModel):
    index: NonNegInt
    uuid: str = ""
    pci_bus_id: str = ""
    numa: int | None = Field(default=None, description="NUMA node; absent when unknown.")
    vendor: str = "nvidia"
    model: str = ""
    memory_bytes: NonNegInt = 0
    resource: str = "nvidia.com/gpu"
    mig_mode: bool | None = Field(
        default=None,
        description=(
            "MIG enabled: the GPU is never handed out whole and has no NVLink peers; its "
            "migDevices are. Absent: unknown (no NVML)."
        ),
    )
    mig_devices: list[MigDevice] | None = Field(
        default=None, description="The MIG devices of a GPU in MIG mode; absent: none known."
    )

    @model_validator(mode="after")
    def _mig_only_in_mig_mode(self) -> Gpu:
        if self.mig_devices and self.mig_mode is not True:
            raise ValueError(f"GPU {self.index} lists migDevices but migMode is not true")
        return self


class GpuLink(WireModel):
    """A direct link between GPUs `a` < `b`; a pair that is absent has none."""

    a: NonNegInt
    b: NonNegInt
    type: LinkType = LinkType.NVLINK
    links: NonNegInt = 0
    bandwidth_g_bps: float = Field(default=0.0, ge=0, alias="bandwidthGBps")


class GpuPath(WireModel):
    """The PCIe path class between GPUs `a` < `b` (what traffic takes without a direct link)."""

    a: NonNegInt
    b: NonNegInt
    path: PathType


class Nic(WireModel):
    name: str
    pci_bus_id: str = ""
    numa: int | None = None
    resource: str = "rdma/ib"
    link_layer: str = ""
    netdevs: list[str] = Field(default_factory=list)


class PciPath(WireModel):
    gpu: NonNegInt
    nic: str
    path: PathType


class Capacity(WireModel):
    """Counts derived from the spec, so `kubectl get` columns can show them."""

    numa_nodes: NonNegInt = 0
    cpus: NonNegInt = 0
    gpus: NonNegInt = 0
    nics: NonNegInt = 0
    memory_bytes: NonNegInt = 0


class NumatopologySpec(WireModel):
    policies: Policies = Field(default_factory=Policies)
    reserved_cpus: CPUSet = Field(default_factory=CPUSet, alias="reservedCPUs")
    numa_nodes: list[NumaNode] = Field(default_factory=list)
    cpus: list[Cpu] = Field(default_factory=list)
    gpus: list[Gpu] = Field(default_factory=list)
    gpu_links: list[GpuLink] = Field(default_factory=list)
    gpu_paths: list[GpuPath] = Field(default_factory=list)
    nics: list[Nic] = Field(default_factory=list)
    pci_paths: list[PciPath] = Field(default_factory=list)
    sources: list[str] = Field(
        default_factory=list, description="Readers that produced this spec, e.g. sysfs, nvml."
    )
    capacity: Capacity = Field(default_factory=Capacity)

    @model_validator(mode="after")
    def _check_and_count(self) -> NumatopologySpec:
        numa_ids = [n.id for n in self.numa_nodes]
        if len(set(numa_ids)) != len(numa_ids):
            raise ValueError(f"duplicate NUMA node ids in {numa_ids}")
        cpu_ids = [c.id for c in self.cpus]
        if len(set(cpu_ids)) != len(cpu_ids):
            raise ValueError("duplicate CPU ids in spec.cpus")
        gpu_ids = [g.index for g in self.gpus]
        if len(set(gpu_ids)) != len(gpu_ids):
            raise ValueError(f"duplicate GPU indices in {gpu_ids}")
        device_ids = gpu_ids + [m.index for g in self.gpus for m in g.mig_devices or ()]
        if len(set(device_ids)) != len(device_ids):
            raise ValueError(
                f"device indices {sorted(device_ids)} repeat: a MIG device needs an index "
                "no GPU or other MIG device has"
            )
        known_numa = set(numa_ids)
        for cpu in self.cpus:
            if known_numa and cpu.numa is not None and cpu.numa not in known_numa:
                raise ValueError(f"CPU {cpu.id} is on NUMA node {cpu.numa}, which is not listed")
        pairs = [(x.a, x.b) for x in self.gpu_links] + [(x.a, x.b) for x in self.gpu_paths]
        for a, b in pairs:
            if a >= b or not {a, b} <= set(gpu_ids):
                raise ValueError(f"GPU link {a}-{b} must name two listed GPUs with a < b")
        nic_names = {n.name for n in self.nics}
        for path in self.pci_paths:
            if path.gpu not in gpu_ids or path.nic not in nic_names:
                raise ValueError(f"pciPath {path.gpu}->{path.nic} names an unknown GPU or NIC")
        counted = Capacity(
            numa_nodes=len(self.numa_nodes),
            cpus=sum(1 for c in self.cpus if c.online) or sum(len(n.cpus) for n in self.numa_nodes),
            gpus=len(self.gpus),
            nics=len(self.nics),
            memory_bytes=sum(n.memory_bytes for n in self.numa_nodes),
        )
        # Derived, never trusted from input: recomputed on every validation.
        object.__setattr__(self, "capacity", counted)
        return self

    def numa_node(self, numa_id: int) -> NumaNode:
        for node in self.numa_nodes:
            if node.id == numa_id:
                return node
        raise KeyError(f"no NUMA node {numa_id}")

    def online_cpus(self) -> CPUSet:
        return CPUSet(frozenset().union(*(node.cpus.ids for node in self.numa_nodes)))


class Condition(WireModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""


class FreeNuma(WireModel):
    numa: NonNegInt
    cpus: CPUSet = Field(default_factory=CPUSet)
    gpus: list[NonNegInt] = Field(
        default_factory=list,
        description="Free device indices: whole GPUs and MIG devices (gpus[].migDevices[].index).",
    )
    nics: list[str] = Field(default_factory=list)
    memory_bytes: NonNegInt = 0


class GpuMode(enum.StrEnum):
    """What numatopo guarantees about the GPUs of an assignment on a node (agent)."""

    STEERED = "Steered"  # the kubelet takes numatopo's GPUs (steering device plugin)
    FOLLOWED = "Followed"  # the kubelet picks; numatopo reads what it gave and re-aligns
    ALLOCATED = "Allocated"  # DRA: the GPUs are the claims' devices, which numatopo allocates
    NONE = "None"  # neither: GPUs in an assignment are unverified


class DraDevice(WireModel):
    """A device a DRA driver publishes for the node, joined with a GPU, NIC or CPU of the
    spec."""

    driver: str
    pool: str
    device: str
    gpu: NonNegInt | None = Field(default=None, description="spec.gpus[].index")
    nic: str | None = Field(default=None, description="spec.nics[].name")
    cpu: NonNegInt | None = Field(default=None, description="spec.cpus[].id (dra-driver-cpu)")


class DraDevices(WireModel):
    """The node's GPUs, NICs and CPUs that Dynamic Resource Allocation hands out."""

    summary: str = Field(
        description="Per driver and pool: how many GPUs, NICs and CPUs it publishes, e.g. "
        "`gpu.nvidia.com/node-a: 8 GPUs`; devices joined to no GPU or NIC are counted apart."
    )
    devices: list[DraDevice] = Field(default_factory=list)


class UnhealthyDevices(WireModel):
    """Devices of the spec the kubelet cannot hand out now, as its PodResources
    `GetAllocatableResources` shows them (it lists healthy devices only)."""

    gpus: list[NonNegInt] = Field(
        default_factory=list,
        description=(
            "Device indices (whole GPUs and MIG devices) whose device plugin ID the "
            "kubelet does not list: reported Unhealthy by their plugin, or their plugin "
            "is not registered."
        ),
    )
    nics: list[str] = Field(
        default_factory=list,
        description=(
            "NIC names the kubelet does not list under their resource, where its device "
            "IDs name NICs (by name, PCI bus id or netdev)."
        ),
    )


class NumatopologyStatus(WireModel):
    conditions: list[Condition] = Field(
        default_factory=list,
        description=(
            "Keyed by type: each node-side writer (exporter, agent) server-side applies "
            "only its own conditions under its own field manager, so none removes another's."
        ),
        # A map list lets the API server merge applied entries by `type` and track an owner per
        # entry; an atomic list would make the last writer drop the others'.
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    free: list[FreeNuma] = Field(default_factory=list)
    free_cpus: NonNegInt = Field(default=0, alias="freeCPUs")
    free_gpus: NonNegInt = Field(default=0, alias="freeGPUs")
    pods: NonNegInt = 0
    heartbeat: str = Field(
        default="",
        description=(
            "RFC 3339 time of the exporter's last successful resync; the operator stops "
            "placing on a node whose heartbeat is older than its staleness bound."
        ),
    )
    gpu_mode: GpuMode | None = Field(
        default=None,
        alias="gpuMode",
        description=(
            "Written by the node agent: Steered (the kubelet is given numatopo's GPUs), "
            "Followed (the kubelet's choice is read back and CPUs and memory re-aligned "
            "to it), Allocated (the node's GPUs are DRA devices, `dra`: a container gets "
            "its ResourceClaims' devices, which numatopo allocates) or None (GPUs "
            "unverified). Absent: no agent has reported."
        ),
    )
    dra: DraDevices | None = Field(
        default=None,
        description=(
            "Written by the operator: the node's GPUs and NICs published by DRA drivers "
            "(ResourceSlices joined with the spec), by driver and pool. Absent: none."
        ),
    )
    unhealthy: UnhealthyDevices | None = Field(
        default=None,
        description=(
            "Written by the node agent (Follow on): devices the kubelet does not list as "
            "allocatable. The operator never assigns them; pods already holding one keep "
            "it. Absent: not known (no agent reads PodResources), every device counts."
        ),
    )


class ObjectMeta(WireModel):
    """The part of Kubernetes ObjectMeta numatopo reads; everything else is kept as is."""

    model_config = ConfigDict(extra="allow")

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class Numatopology(WireModel):
    """The whole custom resource, cluster-scoped, named after its node."""

    plural: ClassVar[str] = "numatopologies"

    api_version: Literal["numatopo.io/v1alpha1"] = Field(
        default="numatopo.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["Numatopology"] = "Numatopology"
    metadata: ObjectMeta
    spec: NumatopologySpec
    status: NumatopologyStatus | None = None
