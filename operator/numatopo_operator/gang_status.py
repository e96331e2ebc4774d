"""`NetworkTopology.status` and the domain metrics, written by the deciding replica.

`network_status` is pure: per level the number of domains among the labelled nodes,
the free GPUs of every node in the tree (booked ones, planned group members included,
are not free), and the largest free domain: the domain of the narrowest level with the
most free GPUs (what the next big group can count on). `write_network_statuses` is the
loop: every status debounce period it computes each topology's status and writes the
ones that changed (a merge patch of the status subresource: conditions stay).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from numatopo_engine.domains import DomainTree
from numatopo_engine.network_topology import (
    DomainCount,
    FreeDomain,
    NetworkTopologySpec,
    NetworkTopologyStatus,
)
from numatopo_operator import gang_release
from numatopo_operator.errors import KubeError, KubeNotFoundError
from numatopo_operator.runtime import Runtime

__all__ = ["network_status", "write_network_statuses"]

logger = logging.getLogger(__name__)


def network_status(
    tree: DomainTree, free: Mapping[str, int], capacity: Mapping[str, int]
) -> tuple[NetworkTopologyStatus, dict[tuple[str, str], float]]:
    """The status fields the operator owns, and GPU utilization per (level, domain)
    (booked / all GPUs of the domain's nodes with a Numatopology; domains without GPUs
    are left out). `free` and `capacity`: GPUs per node with a Numatopology."""
    domains = []
    largest: FreeDomain | None = None
    utilization: dict[tuple[str, str], float] = {}
    for level in tree.levels:
        found = tree.domains(level)
        domains.append(DomainCount(level=level, count=len(found)))
        for path, nodes in found.items():
            total = sum(capacity.get(n, 0) for n in nodes)
            idle = sum(free.get(n, 0) for n in nodes)
            if total:
                utilization[(level, path[-1])] = (total - idle) / total
            if (
                largest is None
                or tree.depth[level] > tree.depth[largest.level]
                or (level == largest.level and idle > largest.free_gpus)
            ):
                largest = FreeDomain(level=level, value=path[-1], free_gpus=idle)
    in_tree = {node for node, path in tree.paths.items() if path}
    status = NetworkTopologyStatus(
        domains=domains,
        free_gpus=sum(free.get(n, 0) for n in in_tree),
        largest_free_domain=largest,
    )
    return status, utilization


def _status_patch(status: NetworkTopologyStatus) -> dict[str, object]:
    wire = status.to_wire()
    wire.pop("conditions", None)
    wire.setdefault("largestFreeDomain", None)
    return wire


def _topologies(runtime: Runtime) -> dict[str, NetworkTopologySpec]:
    index = runtime.gangs.topologies or {}
    found = {name: next(iter(specs), None) for name, specs in index.items()}
    return {name: spec for name, spec in found.items() if spec is not None}


async def write_network_statuses(runtime: Runtime) -> None:
    """Forever: every debounce period, the status of each NetworkTopology that changed,
    and the utilization gauges."""
    written: dict[str, dict[str, object]] = {}
    while True:
        await asyncio.sleep(max(runtime.settings.status_debounce_seconds, 0.1))
        if not runtime.deciding or runtime.gangs.topologies is None:
            continue
        free: dict[str, int] = {}
        capacity: dict[str, int] = {}
        ledger = runtime.ledger
        for node in ledger.nodes():
            topology, state = ledger.topology(node), ledger.state(node)
            if topology is not None and state is not None:
                free[node] = state.free_gpu_count()
                capacity[node] = len(topology.gpus)
        gauge = runtime.metrics.domain_utilization
        gauge.clear()
        for name, spec in sorted(_topologies(runtime).items()):
            tree = gang_release.domain_tree(runtime, spec.labels)
            status, utilization = network_status(tree, free, capacity)
            for (level, domain), ratio in utilization.items():
                gauge.labels(name, level, domain).set(ratio)
            patch = _status_patch(status)
            if written.get(name) == patch:
                continue
            if not runtime.lease_fresh():
                break
            try:
                await runtime.kube.patch_networktopology_status(name, patch)
            except KubeNotFoundError:
                continue
            except KubeError as exc:
                logger.warning("status of NetworkTopology/%s not written (retrying): %s", name, exc)
            else:
                written[name] = patch
