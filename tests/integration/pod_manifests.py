"""Hypothesis strategies for Pod manifests sized to one real node.

Pods are plain dicts, as the API server returns them, read by the real
`request_from_pod`. Sizes are fractions of what the node has, so a handful of pods fill
it whatever its size: a 2-CPU ARM board and a 256-thread POWER8 get equally many.
GPUs are asked for only where the node has GPUs, memory only where the source knows
it (nvidia-smi topo does not), huge pages only of a size the node has pages of.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from numatopo_engine.annotations import CpuMode, PolicyName, Scope
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.quantity import parse_bytes

MiB = 2**20
POLICIES = [policy.value for policy in PolicyName]
SCOPES = [scope.value for scope in Scope]
# `cpu: none` pods ask the engine for no CPUs at all; the node is filled by the others.
CPU_MODES = [CpuMode.EXCLUSIVE.value, CpuMode.NUMA.value]


def allocatable_cpus(spec: NumatopologySpec) -> int:
    return len(spec.online_cpus().ids - spec.reserved_cpus.ids)


def hugepage_sizes(spec: NumatopologySpec) -> list[tuple[str, int]]:
    """(size, most pages one NUMA node has) for every size some node has pages of."""
    most: dict[str, int] = {}
    for node in spec.numa_nodes:
        for size, pages in node.hugepages.items():
            if pages > 0:
                most[size] = max(most.get(size, 0), pages)
    return sorted(most.items())


@st.composite
def containers(draw: st.DrawFn, spec: NumatopologySpec, name: str, cpu_mode: str) -> Any:
    cpus = allocatable_cpus(spec)
    requests: dict[str, str | int] = {}
    if cpu_mode == CpuMode.EXCLUSIVE.value:
        requests["cpu"] = str(draw(st.integers(1, max(1, cpus // 3))))
    else:
        requests["cpu"] = f"{draw(st.integers(100, max(100, cpus * 1000 // 3)))}m"
    memory_mib = spec.capacity.memory_bytes // MiB
    if memory_mib and draw(st.booleans()):
        requests["memory"] = f"{draw(st.integers(1, max(1, memory_mib // 4)))}Mi"
    for size, pages in hugepage_sizes(spec):
        if draw(st.booleans()):
            count = draw(st.integers(1, max(1, pages // 2)))
            requests[f"hugepages-{size}"] = f"{count * parse_bytes(size) // MiB}Mi"
    if spec.gpus and draw(st.booleans()):
        resource = spec.gpus[0].resource
        same_kind = sum(1 for gpu in spec.gpus if gpu.resource == resource)
        requests[resource] = draw(st.integers(1, min(same_kind, 4)))
    if spec.nics and draw(st.integers(0, 3)) == 0:
        requests[spec.nics[0].resource] = 1
    # Requests equal to limits: the Guaranteed pods the kubelet gives exclusive CPUs to.
    limits = {key: str(value) for key, value in requests.items()}
    return {"name": name, "resources": {"requests": dict(limits), "limits": limits}}


@st.composite
def pod_manifests(draw: st.DrawFn, spec: NumatopologySpec, name: str) -> dict[str, Any]:
    """One opted-in Pod for `spec`: any policy and scope, one or two containers."""
    cpu_mode = draw(st.sampled_from(CPU_MODES))
    count = draw(st.integers(1, 2))
    bodies = [draw(containers(spec, f"c{index}", cpu_mode)) for index in range(count)]
    annotations = {
        "numatopo.io/policy": draw(st.sampled_from(POLICIES)),
        "numatopo.io/scope": draw(st.sampled_from(SCOPES)),
        "numatopo.io/cpu": cpu_mode,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "it", "annotations": annotations},
        "spec": {"containers": bodies},
    }
