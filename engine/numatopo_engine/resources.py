"""Which Kubernetes resource names count as GPUs and as RDMA NICs (pure).

Device plugins advertise devices as extended resources (`nvidia.com/gpu`, `amd.com/gpu`, `rdma/ib`,
`rdma/hca_shared_devices_a`, ...). The names differ per cluster, so they are configuration:
fnmatch-style patterns, matched case-sensitively because Kubernetes resource names are.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

from numatopo_engine.accelerators import DEFAULT_ACCELERATORS, resource_patterns

MIG_PATTERN = "nvidia.com/mig-*"
"""NVIDIA's device plugin with `--mig-strategy=mixed` names each MIG profile
`nvidia.com/mig-<profile>` (`nvidia.com/mig-3g.40gb`)."""

DEFAULT_GPU_PATTERNS = (*resource_patterns(DEFAULT_ACCELERATORS), MIG_PATTERN)
"""Every default accelerator's resource (one table: `accelerators`) and the MIG profiles."""


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """Resource-name patterns for devices the engine places."""

    gpu: tuple[str, ...] = DEFAULT_GPU_PATTERNS
    """Patterns of accelerator resources (GPUs, NPUs, MIG devices); a container may ask
    for accelerators under one of them only."""

    nic: tuple[str, ...] = ("rdma/*",)
    """Patterns of RDMA NIC resources; the RDMA shared-device plugin names them `rdma/<pool>`."""

    def is_gpu(self, resource: str) -> bool:
        return _matcher(self.gpu)(resource)

    def is_nic(self, resource: str) -> bool:
        """True for a NIC resource that is not also a GPU resource (GPU patterns win)."""
        return not self.is_gpu(resource) and _matcher(self.nic)(resource)


@functools.cache
def _matcher(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    """Whether a name matches any of `patterns` (`fnmatchcase`), in one compiled expression: every
    resource of every pod event is asked, and a call per pattern cost a tenth of a decision."""
    if not patterns:
        return lambda _: False
    either = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))
    return lambda name: either.match(name) is not None


DEFAULT_RESOURCES = ResourceNames()


def accelerator_word(resource: str | None) -> str:
    """How refusals name what a pod asked: "GPUs" for GPU resources or none, else the name."""
    if resource is None or resource in ("nvidia.com/gpu", "amd.com/gpu"):
        return "GPUs"
    return resource
