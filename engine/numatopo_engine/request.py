"""A pod's topology request, as the engine sees it: typed, validated, no Kubernetes objects.

`numatopo_engine.pod_request.request_from_pod` builds it from a Pod manifest (dict).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from numatopo_engine.annotations import CpuMode, GpuLinksMode, PolicyName, Scope, SmtMode


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """What one container asks for. Quantities are already converted to integers."""

    name: str
    cpu_milli: int = 0
    memory_bytes: int = 0
    hugepages: Mapping[str, int] = field(default_factory=dict)  # bytes, keyed "2Mi"/"1Gi"
    gpus: int = 0
    gpu_resource: str | None = None
    nics: int = 0
    nic_resource: str | None = None
    # `restartPolicy: Always` (a sidecar, KEP-753): runs beside app containers, counts with them.
    restartable: bool = False

    @property
    def integer_cpus(self) -> int | None:
        """Whole CPUs when the CPU request is an integer (eligible for exclusive CPUs)."""
        return self.cpu_milli // 1000 if self.cpu_milli > 0 and self.cpu_milli % 1000 == 0 else None


@dataclass(frozen=True, slots=True)
class TopologyOptions:
    """The validated `numatopo.io/*` annotations of one pod."""

    policy: PolicyName = PolicyName.NONE
    scope: Scope = Scope.POD
    cpu: CpuMode = CpuMode.EXCLUSIVE
    smt: SmtMode = SmtMode.ANY
    gpu_links: GpuLinksMode = GpuLinksMode.PREFERRED
    max_numa_nodes: int | None = None


@dataclass(frozen=True, slots=True)
class PodRequest:
    """A pod's app and init containers (sized as `allocation._sized` says) and options."""

    namespace: str
    name: str
    containers: tuple[ContainerRequest, ...]
    init_containers: tuple[ContainerRequest, ...] = ()
    options: TopologyOptions = field(default_factory=TopologyOptions)
    uid: str = ""
    node_name: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
