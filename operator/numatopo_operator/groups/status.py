"""`NetworkTopology.status` and the domain metrics, written by the deciding replica.

`network_status` (pure): per level the number of domains, the tree's free GPUs (planned
members booked), and the largest free domain (the narrowest level's with the most free
GPUs: what the next big group can count on). `write_network_statuses` writes changed ones
every debounce period (a merge patch: conditions stay) and sets the domain gauges.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from numatopo_engine.domains import (
    DomainTree,
    NodeCandidate,
    domain_fragmentation,
    domain_utilization,
)
from numatopo_engine.network_topology import DomainCount, FreeDomain, NetworkTopologyStatus
from numatopo_operator.errors import KubeError, KubeNotFoundError
from numatopo_operator.groups import release as group_release
from numatopo_operator.runtime import Runtime

logger = logging.getLogger(__name__)

# Every NetworkTopology's status and gauges are computed again at least this often.
FULL_SECONDS = 30.0


def network_status(tree: DomainTree, nodes: Mapping[str, NodeCandidate]) -> NetworkTopologyStatus:
    """The status fields the operator owns, over the tree's nodes with a Numatopology."""
    free = {node: c.state.free_gpu_count() for node, c in nodes.items()}
    domains = []
    largest: FreeDomain | None = None
    for level in tree.levels:
        found = tree.domains(level)
        domains.append(DomainCount(level=level, count=len(found)))
        for path, members in found.items():
            idle = sum(free.get(n, 0) for n in members)
            if (
                largest is None
                or tree.depth[level] > tree.depth[largest.level]
                or (level == largest.level and idle > largest.free_gpus)
            ):
                largest = FreeDomain(level=level, value=path[-1], free_gpus=idle)
    return NetworkTopologyStatus(
        domains=domains,
        free_gpus=sum(free.get(node, 0) for node, path in tree.paths.items() if path),
        largest_free_domain=largest,
    )


async def write_network_statuses(runtime: Runtime) -> None:
    """Forever: each debounce period, write changed NetworkTopology statuses and the gauges."""
    written: dict[str, dict[str, object]] = {}
    seen: tuple[object, ...] = ()
    computed_at = 0.0
    while True:
        await asyncio.sleep(max(runtime.settings.status_debounce_seconds, 0.1))
        topologies = group_release.known_topologies(runtime) if runtime.deciding else {}
        if not topologies:
            continue
        nodes = {
            found.name: NodeCandidate(found.topology, found.state)
            for found in runtime.ledger.records()
            if found.topology is not None and found.state is not None
        }
        # Nothing to do when unchanged (Node labels are not versioned: FULL_SECONDS). The
        # states are held, not their ids: a rebuilt state may reuse a freed id.
        now = time.monotonic()
        signature = (
            tuple((n, c.state, c.state.version) for n, c in nodes.items()),
            tuple(sorted((name, tuple(spec.labels)) for name, spec in topologies.items())),
            len(runtime.groups.nodes or {}),
        )
        if signature == seen and now - computed_at < FULL_SECONDS:
            continue
        seen, computed_at = signature, now
        metrics = runtime.metrics
        metrics.domain_utilization.clear()
        metrics.domain_fragmentation.clear()
        for name, spec in sorted(topologies.items()):
            tree = group_release.domain_tree(runtime, spec.labels)
            for (level, domain), ratio in domain_utilization(tree, nodes).items():
                metrics.domain_utilization.labels(name, level, domain).set(ratio)
            for level, ratio in domain_fragmentation(tree, nodes).items():
                metrics.domain_fragmentation.labels(name, level).set(ratio)
            # Not `conditions` (others'); a `largestFreeDomain` gone is nulled.
            patch = network_status(tree, nodes).to_wire()
            patch.pop("conditions", None)
            patch.setdefault("largestFreeDomain", None)
            if written.get(name) == patch:
                continue
            if not runtime.lease_fresh():
                seen = ()  # fenced: write it once the lease is fresh again
                break
            try:
                await runtime.kube.patch_networktopology_status(name, patch)
            except KubeNotFoundError:
                continue
            except KubeError as exc:
                logger.warning("status of NetworkTopology/%s not written (retrying): %s", name, exc)
                seen = ()
            else:
                written[name] = patch
