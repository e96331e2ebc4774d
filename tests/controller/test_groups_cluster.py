"""Groups placed all or nothing across nodes: the real operator (kopf over HTTP) against
kmock's emulator, with labelled Nodes, one Numatopology per node (the 8x H100 server)
and a NetworkTopology of three network layers.

The cluster: one spine; two blocks (layer 2) of two leaves (layer 3) of two nodes each:

    spine-1 / block-1 / leaf-1: n1 n2   leaf-2: n3 n4
              block-2 / leaf-3: n5 n6   leaf-4: n7 n8
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from numatopo_engine import annotations as keys

from .conftest import Cluster

L1 = "topology.k8s.aws/network-node-layer-1"
L2 = "topology.k8s.aws/network-node-layer-2"
L3 = "topology.k8s.aws/network-node-layer-3"
HOSTNAME = "kubernetes.io/hostname"
GATE = "numatopo.io/group"
LAYOUT = {
    "n1": ("spine-1", "block-1", "leaf-1"),
    "n2": ("spine-1", "block-1", "leaf-1"),
    "n3": ("spine-1", "block-1", "leaf-2"),
    "n4": ("spine-1", "block-1", "leaf-2"),
    "n5": ("spine-1", "block-2", "leaf-3"),
    "n6": ("spine-1", "block-2", "leaf-3"),
    "n7": ("spine-1", "block-2", "leaf-4"),
    "n8": ("spine-1", "block-2", "leaf-4"),
}
FAST = {"retry_base_seconds": 0.2, "retry_max_seconds": 1.0}


async def build_cluster(env: Any, layout: Mapping[str, tuple[str, ...]] = LAYOUT) -> None:
    cluster, _, h100, _, topology_object, _ = env.parts()
    for node, (spine, block, leaf) in layout.items():
        await cluster.create_node(node, {L1: spine, L2: block, L3: leaf})
        await cluster.create_numatopology(topology_object(node, h100))
    await cluster.create_network_topology("default", [L1, L2, L3, HOSTNAME])


def member(
    env: Any,
    name: str,
    group: str,
    size: int,
    *,
    gpus: int = 8,
    rank: int | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    gated: bool = True,
) -> dict[str, Any]:
    """A gated, unbound member pod of `group` (rank from the Indexed Job annotation)."""
    found = {keys.GROUP: group, keys.GROUP_SIZE: str(size), **(annotations or {})}
    if rank is not None:
        found["batch.kubernetes.io/job-completion-index"] = str(rank)
    pod = env.pod(name, node=None, gpus=gpus, cpu="8", policy="best-effort", annotations=found)
    if labels:
        pod["metadata"]["labels"] = dict(labels)
    if gated:
        pod["spec"]["schedulingGates"] = [{"name": GATE}]
    return pod


def spec_of(cluster: Cluster, name: str) -> dict[str, Any]:
    return dict(cluster.pods()[name]["spec"])


def released(cluster: Cluster, name: str) -> bool:
    pod = cluster.pods().get(name)
    return pod is not None and not any(
        g.get("name") == GATE for g in pod["spec"].get("schedulingGates") or []
    )


def placement(cluster: Cluster, name: str) -> dict[str, Any]:
    return dict(json.loads(cluster.annotations(name)[keys.GROUP_PLACEMENT]))


def assigned_node(cluster: Cluster, name: str) -> str:
    return str(json.loads(cluster.annotations(name)[keys.ASSIGNMENT])["node"])


def reasons(cluster: Cluster, name: str) -> list[str]:
    return [reason for reason, _ in cluster.events_for(name)]


def pod_patches(cluster: Cluster) -> list[tuple[str, str]]:
    """(pod name, "plan" | "void" | "release" | "other") of every PATCH of a pod, in order."""
    found = []
    for request in cluster.api:
        if request.method.value != "PATCH" or request.resource is None:
            continue
        if str(request.resource.plural) != "pods" or request.subresource:
            continue
        data = request.data
        if isinstance(data, list):
            kind = "release"
        elif keys.GROUP_PLACEMENT in (
            written := (data.get("metadata") or {}).get("annotations") or {}
        ):
            kind = "plan" if written[keys.GROUP_PLACEMENT] is not None else "void"
        else:
            kind = "other"
        found.append((str(request.name), kind))
    return found


async def metric(operator: Any, name: str) -> float:
    _, text = await operator.get("/metrics")
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_group_is_planned_in_one_domain_then_released_in_rank_order(env):
    cluster, start_operator, _, pod, _, wait = env.parts()
    await build_cluster(env)
    # One GPU taken on n1: block-1 keeps only three whole nodes, too few for the group.
    await cluster.create_pod(pod("busy", node="n1", gpus=1))
    operator = await start_operator(**FAST)
    names = [f"train-{i}" for i in range(4)]
    for i, name in reversed(list(enumerate(names))):
        await cluster.create_pod(
            member(env, name, "train", 4, rank=i, annotations={keys.TOPOLOGY_REQUIRED: L2})
        )

    await wait(lambda: all(released(cluster, n) for n in names), what="every member released")
    nodes = [assigned_node(cluster, n) for n in names]
    records = [placement(cluster, n) for n in names]
    patches = pod_patches(cluster)
    first_release = next(i for i, (_, kind) in enumerate(patches) if kind == "release")
    await wait(
        lambda: cluster.status_of("networktopologies", "default").get("freeGPUs") == 64 - 1 - 32,
        what="NetworkTopology status counts the group's GPUs",
    )
    status = cluster.status_of("networktopologies", "default")
    await wait(
        lambda: all("GroupPlaced" in reasons(cluster, n) for n in names),
        what="GroupPlaced on every member",
    )

    assert ["n5", "n6", "n7", "n8"] == nodes  # block-2, leaf order follows rank order
    assert [{HOSTNAME: node} for node in nodes] == [
        spec_of(cluster, n)["nodeSelector"] for n in names
    ]
    assert {("train", L2, "block-2")} == {(r["group"], r["level"], r["domain"]) for r in records}
    assert [0, 1, 2, 3] == [r["rank"] for r in records]
    assert 1 == len({r["planned"] for r in records})
    assert {n for n, kind in patches[:first_release] if kind == "plan"} == set(names)
    assert all(kind != "plan" for _, kind in patches[first_release:])
    assert {"level": L2, "count": 2} in status["domains"]
    assert {"level": HOSTNAME, "value": "n2", "freeGPUs": 8} == status["largestFreeDomain"]
    assert 1 == await metric(operator, 'numatopo_group_placement_decisions_total{outcome="placed"}')
    assert 1 == await metric(operator, "numatopo_group_placement_duration_seconds_count")
    assert 1.0 == await metric(
        operator,
        f'numatopo_domain_utilization_ratio{{domain="block-2",level="{L2}",topology="default"}}',
    )


async def test_a_group_that_cannot_fit_plans_nothing_until_room_appears(env):
    cluster, start_operator, h100, _, topology_object, wait = env.parts()
    await build_cluster(env)
    operator = await start_operator(**FAST)
    names = [f"big-{i}" for i in range(5)]
    for i, name in enumerate(names):
        await cluster.create_pod(
            member(env, name, "big", 5, rank=i, annotations={keys.TOPOLOGY_REQUIRED: L2})
        )

    await wait(
        lambda: all("GroupUnsatisfiable" in reasons(cluster, n) for n in names),
        what="GroupUnsatisfiable on every member",
    )
    await wait(
        lambda: all("freeGPUs" in cluster.numatopology_status(n) for n in LAYOUT),
        what="every node's status written",
    )
    held = [n for n in names if keys.ASSIGNMENT in cluster.annotations(n)]
    free = [cluster.numatopology_status(n).get("freeGPUs") for n in LAYOUT]
    assert [] == held
    assert [8] * 8 == free
    assert not any(released(cluster, n) for n in names)
    assert 1 <= await metric(
        operator, 'numatopo_group_placement_decisions_total{outcome="unsatisfiable"}'
    )

    # A fifth node joins block-1: the group is looked at again and fits there.
    await cluster.create_node("n9", {L1: "spine-1", L2: "block-1", L3: "leaf-5"})
    await cluster.create_numatopology(topology_object("n9", h100))
    await wait(lambda: all(released(cluster, n) for n in names), what="placed once room appeared")

    assert {"n1", "n2", "n3", "n4", "n9"} == {assigned_node(cluster, n) for n in names}
