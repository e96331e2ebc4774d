"""Pods as the harness admits them: only what the device manager reads."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Container:
    """A container with its device requests (`{resource: count}`, limits = requests).

    `restartable` makes an init container a sidecar (`restartPolicy: Always`).
    `numa_affinity` is the Topology Manager's hint for the container: the NUMA nodes of
    the merged affinity, or None (no preference; policy `none` always gives None).
    """

    name: str
    requests: Mapping[str, int] = field(default_factory=dict)
    restartable: bool = False
    numa_affinity: frozenset[int] | None = None


@dataclass(frozen=True)
class Pod:
    uid: str
    name: str
    namespace: str = "default"
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()

    def all_containers(self) -> Iterator[Container]:
        """Init containers first, then app containers: the order the kubelet admits."""
        yield from self.init_containers
        yield from self.containers

    def container(self, name: str) -> Container:
        for container in self.all_containers():
            if container.name == name:
                return container
        raise KeyError(f"pod {self.name} has no container {name!r}")

    def is_init_container(self, name: str) -> bool:
        return any(c.name == name for c in self.init_containers)
