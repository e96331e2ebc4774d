"""Groups placed all or nothing across nodes: the real operator (kopf over HTTP) against
kmock's emulator, with labelled Nodes, one Numatopology per node (the 8x H100 server)
and a NetworkTopology of three network layers.

The cluster: one spine; two blocks (layer 2) of two leaves (layer 3) of two nodes each:

    spine-1 / block-1 / leaf-1: n1 n2   leaf-2: n3 n4
              block-2 / leaf-3: n5 n6   leaf-4: n7 n8
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from numatopo_engine import annotations as keys

from .conftest import Cluster
from .test_leadership_lease import OPERATOR_NAMESPACE, operator_pod, replica

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


async def build_cluster(
    env: Any, layout: Mapping[str, tuple[str, ...]] = LAYOUT, *, topology: bool = True
) -> None:
    cluster, _, h100, _, topology_object, _ = env.parts()
    for node, (spine, block, leaf) in layout.items():
        await cluster.create_node(node, {L1: spine, L2: block, L3: leaf})
        await cluster.create_numatopology(topology_object(node, h100))
    if topology:
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


def domain(node: str, level: str = L2) -> str:
    return LAYOUT[node][[L1, L2, L3].index(level)]


async def test_members_wait_for_the_whole_group_then_are_placed(env):
    cluster, start_operator, _, _, _, wait = env.parts()
    await build_cluster(env)
    await start_operator(**FAST)
    names = [f"w-{i}" for i in range(3)]
    for i, name in enumerate(names[:2]):
        await cluster.create_pod(member(env, name, "w", 3, gpus=4, rank=i))

    await wait(
        lambda: all("GroupWaiting" in reasons(cluster, n) for n in names[:2]),
        what="GroupWaiting on the first two members",
    )
    [(_, message)] = [e for e in cluster.events_for("w-1") if e[0] == "GroupWaiting"]
    assert "2 of 3 members seen" in message
    assert not any(keys.ASSIGNMENT in cluster.annotations(n) for n in names[:2])

    await cluster.create_pod(member(env, names[2], "w", 3, gpus=4, rank=2))
    await wait(lambda: all(released(cluster, n) for n in names), what="placed once complete")
    nodes = [assigned_node(cluster, n) for n in names]

    # Consolidated (the default): 4-GPU members two to a node, ranks 0 and 1 together.
    assert nodes[0] == nodes[1] != nodes[2]
    assert domain(nodes[0], L3) == domain(nodes[2], L3)


async def test_a_preferred_level_falls_back_to_a_wider_domain(env):
    cluster, start_operator, _, _, _, wait = env.parts()
    await build_cluster(env)
    await start_operator(**FAST)
    names = [f"p-{i}" for i in range(3)]
    for i, name in enumerate(names):
        await cluster.create_pod(
            member(env, name, "p", 3, rank=i, annotations={keys.TOPOLOGY_PREFERRED: L3})
        )

    await wait(lambda: all(released(cluster, n) for n in names), what="every member released")
    nodes = [assigned_node(cluster, n) for n in names]
    records = [placement(cluster, n) for n in names]

    # A leaf has two nodes: three whole-node members share a block instead.
    assert {(L2, domain(nodes[0]))} == {(r["level"], r["domain"]) for r in records}
    assert 1 == len({domain(n) for n in nodes})
    assert 3 == len(set(nodes))


async def test_the_coscheduling_pod_group_label_declares_a_group(env):
    cluster, start_operator, _, _, _, wait = env.parts()
    await build_cluster(env)
    await start_operator(**FAST)
    names = ["cs-0", "cs-1"]
    for name in names:
        pod = member(env, name, "unused", 2, labels={"scheduling.x-k8s.io/pod-group": "cs"})
        found = pod["metadata"]["annotations"]
        del found[keys.GROUP], found[keys.GROUP_SIZE]
        found["scheduling.x-k8s.io/min-available"] = "2"
        await cluster.create_pod(pod)

    await wait(lambda: all(released(cluster, n) for n in names), what="both members released")

    assert {"cs"} == {placement(cluster, n)["group"] for n in names}
    assert 2 == len({assigned_node(cluster, n) for n in names})


async def test_members_that_disagree_on_the_group_are_not_placed(env):
    cluster, start_operator, _, _, _, wait = env.parts()
    await build_cluster(env)
    await start_operator(**FAST)
    await cluster.create_pod(member(env, "d-0", "d", 2, gpus=1, rank=0))
    await cluster.create_pod(member(env, "d-1", "d", 3, gpus=1, rank=1))
    await cluster.create_pod(member(env, "d-2", "d", 3, gpus=1, rank=2))

    await wait(
        lambda: all("GroupInvalid" in reasons(cluster, n) for n in ("d-0", "d-1", "d-2")),
        what="GroupInvalid on every member",
    )
    [(_, message)] = [e for e in cluster.events_for("d-0") if e[0] == "GroupInvalid"]

    assert "disagree" in message
    assert keys.GROUP_SIZE in message
    assert not any(keys.ASSIGNMENT in cluster.annotations(n) for n in ("d-0", "d-1", "d-2"))


async def test_a_gated_pod_without_a_group_is_reported(env):
    cluster, start_operator, _, _, _, wait = env.parts()
    await build_cluster(env)
    await start_operator(**FAST)
    pod = member(env, "lost", "unused", 1)
    found = pod["metadata"]["annotations"]
    del found[keys.GROUP], found[keys.GROUP_SIZE]
    await cluster.create_pod(pod)

    await wait(lambda: "GroupInvalid" in reasons(cluster, "lost"), what="GroupInvalid Event")
    [(_, message)] = cluster.events_for("lost")

    assert f"carries the scheduling gate {GATE} but names no group" in message
    assert not released(cluster, "lost")


async def test_the_extender_passes_a_released_member_on_its_planned_node_only(env):
    cluster, start_operator, _, _, _, wait = env.parts()
    await build_cluster(env)
    operator = await start_operator(**FAST)
    for i in range(2):
        await cluster.create_pod(member(env, f"x-{i}", "x", 2, rank=i))
    await wait(lambda: released(cluster, "x-0") and released(cluster, "x-1"), what="released")
    pod = cluster.pods()["x-1"]
    planned = assigned_node(cluster, "x-1")

    _, filtered = await operator.post("/filter", {"Pod": pod, "NodeNames": sorted(LAYOUT)})
    _, scores = await operator.post("/prioritize", {"Pod": pod, "NodeNames": sorted(LAYOUT)})

    assert [planned] == filtered["NodeNames"]
    assert set(LAYOUT) - {planned} == set(filtered["FailedAndUnresolvableNodes"])
    assert {planned: 10} == {s["Host"]: s["Score"] for s in scores if s["Score"]}


async def fail_and_replace(env: Any, victim: str, replacement: dict[str, Any]) -> str:
    """Mark the victim's node NotReady, delete the victim, create its replacement; returns
    the failed node."""
    cluster = env.cluster
    node = assigned_node(cluster, victim)
    await cluster.patch_node(
        node, {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    )
    await cluster.delete_pod(victim)
    await cluster.create_pod(replacement)
    return node


async def test_a_replacement_member_is_placed_in_its_groups_domain(env):
    cluster, start_operator, _, _, _, wait = env.parts()
    await build_cluster(env)
    operator = await start_operator(**FAST)
    names = [f"r-{i}" for i in range(3)]
    required = {keys.TOPOLOGY_REQUIRED: L2}
    for i, name in enumerate(names):
        await cluster.create_pod(member(env, name, "r", 3, rank=i, annotations=required))
    await wait(lambda: all(released(cluster, n) for n in names), what="group placed")
    block = placement(cluster, "r-0")["domain"]

    failed = await fail_and_replace(
        env, "r-1", member(env, "r-1-again", "r", 3, rank=1, annotations=required)
    )
    await wait(lambda: released(cluster, "r-1-again"), what="the replacement released")
    node = assigned_node(cluster, "r-1-again")
    await wait(
        lambda: "GroupRecovered" in reasons(cluster, "r-1-again"), what="GroupRecovered Event"
    )
    [(_, message)] = [e for e in cluster.events_for("r-1-again") if e[0] == "GroupRecovered"]

    assert node != failed
    assert block == domain(node)
    assert {"level": L2, "domain": block, "rank": 1} == {
        k: placement(cluster, "r-1-again")[k] for k in ("level", "domain", "rank")
    }
    assert f"in its group's domain {L2}={block}" in message
    assert 1 == await metric(operator, "numatopo_group_recovery_duration_seconds_count")
    assert 1 == await metric(
        operator, 'numatopo_group_placement_decisions_total{outcome="recovered"}'
    )


async def test_a_replacement_with_no_room_in_its_domain_goes_to_the_next_wider_one(env):
    cluster, start_operator, _, _, _, wait = env.parts()
    await build_cluster(env)
    await start_operator(**FAST)
    names = [f"f-{i}" for i in range(4)]
    preferred = {keys.TOPOLOGY_PREFERRED: L2}
    for i, name in enumerate(names):
        await cluster.create_pod(member(env, name, "f", 4, rank=i, annotations=preferred))
    await wait(lambda: all(released(cluster, n) for n in names), what="group placed")
    block = placement(cluster, "f-0")["domain"]

    await fail_and_replace(
        env, "f-2", member(env, "f-2-again", "f", 4, rank=2, annotations=preferred)
    )
    await wait(lambda: released(cluster, "f-2-again"), what="the replacement released")
    await wait(
        lambda: "GroupRecovered" in reasons(cluster, "f-2-again"), what="GroupRecovered Event"
    )
    [event] = [e for e in cluster.events() if e["reason"] == "GroupRecovered"]

    assert block != domain(assigned_node(cluster, "f-2-again"))
    assert "Warning" == event["type"]
    assert (
        f"outside its group's domain {L2}={block} under spine-1 (no room there), in {L1}=spine-1"
        in (event["message"])
    )


SPINE = "example.com/spine"
LEAF = "example.com/leaf"


async def test_a_replacement_never_leaves_its_domain_for_a_leaf_of_the_same_name(env):
    """Leaves under two spines share the value l0 (Kueue allows it): a replacement of a
    group required to share a spine stays in its spine's l0, gated while there is no
    room there, rather than going to the other spine's l0."""
    cluster, start_operator, h100, _, topology_object, wait = env.parts()
    layout = {"n-a": "s0", "n-b": "s0", "n-c": "s1", "n-d": "s1"}
    for node, spine in layout.items():
        await cluster.create_node(node, {SPINE: spine, LEAF: "l0"})
        await cluster.create_numatopology(topology_object(node, h100))
    await cluster.create_network_topology("default", [SPINE, LEAF])
    await start_operator(**FAST)
    required = {keys.TOPOLOGY_REQUIRED: SPINE}
    names = ["s-0", "s-1"]
    for i, name in enumerate(names):
        await cluster.create_pod(member(env, name, "s", 2, rank=i, annotations=required))
    await wait(lambda: all(released(cluster, n) for n in names), what="group placed")
    nodes = {assigned_node(cluster, n) for n in names}
    spine = layout[assigned_node(cluster, "s-0")]
    assert {n for n, s in layout.items() if s == spine} == nodes
    assert {"level": LEAF, "domain": "l0", "path": [spine, "l0"]} == {
        k: placement(cluster, "s-0").get(k) for k in ("level", "domain", "path")
    }

    await fail_and_replace(
        env, "s-0", member(env, "s-0-again", "s", 2, rank=0, annotations=required)
    )
    await wait(
        lambda: "GroupUnsatisfiable" in reasons(cluster, "s-0-again"), what="GroupUnsatisfiable"
    )
    [(_, message)] = [e for e in cluster.events_for("s-0-again") if e[0] == "GroupUnsatisfiable"]
    assert keys.ASSIGNMENT not in cluster.annotations("s-0-again")
    assert not released(cluster, "s-0-again")
    assert f"inside {LEAF}=l0 under {spine}" in message or f"inside {SPINE}={spine}" in message

    # Room in the group's spine, in another leaf: the replacement goes there, told so.
    await cluster.create_node("n-e", {SPINE: spine, LEAF: "l1"})
    await cluster.create_numatopology(topology_object("n-e", h100))
    await wait(lambda: released(cluster, "s-0-again"), what="the replacement released")
    await wait(
        lambda: "GroupRecovered" in reasons(cluster, "s-0-again"), what="GroupRecovered Event"
    )
    [event] = [e for e in cluster.events() if e["reason"] == "GroupRecovered"]
    assert "n-e" == assigned_node(cluster, "s-0-again")
    assert "Warning" == event["type"]
    assert (
        f"outside its group's domain {LEAF}=l0 under {spine} (no room there), in {SPINE}={spine}"
        in event["message"]
    )


async def test_a_preferred_level_steers_to_the_fewest_of_its_domains(env):
    """No leaf holds four 1-GPU members; spine s0 (the busier) would take three leaves,
    s1 takes two: with preferred leaf the group goes to s1, and GroupPlaced says so."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    layout = {"a": ("s0", "l0", 7), "b": ("s0", "l1", 7), "c": ("s0", "l2", 6)}
    layout |= {"d": ("s1", "l0", 6), "e": ("s1", "l1", 6), "f": ("s1", "l2", 6)}
    for node, (spine, leaf, busy) in layout.items():
        await cluster.create_node(node, {SPINE: spine, LEAF: leaf})
        await cluster.create_numatopology(topology_object(node, h100))
        await cluster.create_pod(pod(f"busy-{node}", node=node, gpus=busy, policy="best-effort"))
    await cluster.create_network_topology("default", [SPINE, LEAF])
    await start_operator(**FAST)
    names = [f"pf-{i}" for i in range(4)]
    preferred = {keys.TOPOLOGY_PREFERRED: LEAF}
    for i, name in enumerate(names):
        await cluster.create_pod(member(env, name, "pf", 4, gpus=1, rank=i, annotations=preferred))
    await wait(lambda: all(released(cluster, n) for n in names), what="group placed")
    await wait(lambda: "GroupPlaced" in reasons(cluster, "pf-0"), what="GroupPlaced")
    [(_, message)] = [e for e in cluster.events_for("pf-0") if e[0] == "GroupPlaced"]
    nodes = {assigned_node(cluster, n) for n in names}

    assert {"d", "e"} == nodes
    assert f"across 2 domains of the preferred level {LEAF}, the fewest possible" in message
    assert f"placed in {SPINE}=s1" in message


async def test_at_most_one_member_per_leaf(env):
    cluster, start_operator, _, _, _, wait = env.parts()
    await build_cluster(env)
    await start_operator(**FAST)
    names = [f"cap-{i}" for i in range(4)]
    settings = {keys.TOPOLOGY_REQUIRED: L1, keys.MAX_MEMBERS_PER_DOMAIN: f"{L3}=1"}
    for i, name in enumerate(names):
        await cluster.create_pod(member(env, name, "cap", 4, gpus=2, rank=i, annotations=settings))
    await wait(lambda: all(released(cluster, n) for n in names), what="group placed")
    nodes = [assigned_node(cluster, n) for n in names]

    # Four 2-GPU members would fit one node; one per leaf puts them on four leaves.
    assert ["leaf-1", "leaf-2", "leaf-3", "leaf-4"] == [domain(n, L3) for n in nodes]
    assert {L1} == {placement(cluster, n)["level"] for n in names}


async def test_a_replacement_goes_next_to_its_neighbouring_ranks(env):
    """Six 4-GPU members span block-1: n2 (ranks 0, 1), n3 (2, 3), n4 (4, 5); n1 runs a
    4-GPU pod. Rank 3 is deleted: n1 and n3 now have the same room and the same
    fragmentation, n1 first in tree order; the replacement goes to n3, beside ranks 2
    and 4."""
    cluster, start_operator, _, pod, _, wait = env.parts()
    await build_cluster(env)
    await cluster.create_pod(pod("busy", node="n1", gpus=4, policy="best-effort"))
    await start_operator(**FAST)
    names = [f"nb-{i}" for i in range(6)]
    required = {keys.TOPOLOGY_REQUIRED: L2}
    for i, name in enumerate(names):
        await cluster.create_pod(member(env, name, "nb", 6, gpus=4, rank=i, annotations=required))
    await wait(lambda: all(released(cluster, n) for n in names), what="group placed")
    assert ["n2", "n2", "n3", "n3", "n4", "n4"] == [assigned_node(cluster, n) for n in names]

    await cluster.delete_pod("nb-3")
    await cluster.create_pod(
        member(env, "nb-3-again", "nb", 6, gpus=4, rank=3, annotations=required)
    )
    await wait(lambda: released(cluster, "nb-3-again"), what="the replacement released")
    await wait(
        lambda: "GroupRecovered" in reasons(cluster, "nb-3-again"), what="GroupRecovered Event"
    )
    [event] = [e for e in cluster.events() if e["reason"] == "GroupRecovered"]

    assert "n3" == assigned_node(cluster, "nb-3-again")
    assert "Normal" == event["type"]
    assert {"level": L2, "domain": "block-1", "path": ["spine-1", "block-1"]} == {
        k: placement(cluster, "nb-3-again").get(k) for k in ("level", "domain", "path")
    }


async def test_slices_of_two_ranks_each_share_a_leaf(env):
    """`numatopo.io/slice` leaf=2: six whole-node members are three slices of two, each
    in one leaf. With n1 and n3 partly busy only two leaves hold a slice, so the group
    waits (placed anyhow, ranks 0 and 1 would straddle leaf-1 and leaf-2); once n1 is
    free it takes leaf-1, leaf-3 and leaf-4."""
    cluster, start_operator, _, pod, _, wait = env.parts()
    await build_cluster(env)
    await cluster.create_pod(pod("busy-1", node="n1", gpus=1, policy="best-effort"))
    await cluster.create_pod(pod("busy-3", node="n3", gpus=1, policy="best-effort"))
    await start_operator(**FAST)
    names = [f"sl-{i}" for i in range(6)]
    settings = {keys.TOPOLOGY_REQUIRED: L1, keys.SLICE: f"{L3}=2"}
    for i, name in enumerate(names):
        await cluster.create_pod(member(env, name, "sl", 6, rank=i, annotations=settings))
    await wait(
        lambda: all("GroupUnsatisfiable" in reasons(cluster, n) for n in names),
        what="GroupUnsatisfiable",
    )
    assert not any(keys.ASSIGNMENT in cluster.annotations(n) for n in names)

    await cluster.delete_pod("busy-1")
    await wait(lambda: all(released(cluster, n) for n in names), what="group placed")
    leaves = [domain(assigned_node(cluster, n), L3) for n in names]

    assert ["leaf-1", "leaf-1", "leaf-3", "leaf-3", "leaf-4", "leaf-4"] == leaves


async def test_with_groups_off_gated_members_stay_gated(env):
    cluster, start_operator, _, _, _, wait = env.parts()
    await build_cluster(env)
    operator = await start_operator(groups=False, **FAST)
    await wait(lambda: operator.runtime.deciding, what="the operator decides")
    for i in range(2):
        await cluster.create_pod(member(env, f"off-{i}", "off", 2, rank=i))
    await cluster.create_pod(env.pod("plain", node="n1", gpus=1))
    # An ordinary pod created after the members is decided: the members had their turn.
    await wait(lambda: keys.ASSIGNMENT in cluster.annotations("plain"), what="plain assigned")

    assert not any(keys.ASSIGNMENT in cluster.annotations(f"off-{i}") for i in range(2))
    assert not any(released(cluster, f"off-{i}") for i in range(2))
    assert [] == cluster.events_for("off-0")


async def test_only_the_lease_holder_plans_and_its_successor_finishes(env):
    """Two replicas watch the same group: the holder plans it once; when the holder
    stops with the group waiting for a member, the other one completes it."""
    cluster, start_operator, _, _, _, wait = env.parts()
    await build_cluster(env)
    for name in ("op-a", "op-b"):
        await cluster.create(f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods", operator_pod(name))
    a = await start_operator(**replica("op-a"), **FAST)
    await wait(lambda: a.runtime.deciding, what="A decides")
    b = await start_operator(**replica("op-b"), **FAST)
    names = [f"ha-{i}" for i in range(3)]
    for i, name in enumerate(names[:2]):
        await cluster.create_pod(member(env, name, "ha", 3, rank=i))
    await wait(lambda: all("GroupWaiting" in reasons(cluster, n) for n in names[:2]), what="wait")
    await asyncio.sleep(0.5)  # time for a standby that wrongly decided to post its own
    before = [reasons(cluster, n).count("GroupWaiting") for n in names[:2]]

    await a.stop()
    await wait(lambda: b.runtime.deciding, what="B takes over")
    await cluster.create_pod(member(env, names[2], "ha", 3, rank=2))
    await wait(lambda: all(released(cluster, n) for n in names), what="B places the group")
    plans = [name for name, kind in pod_patches(cluster) if kind == "plan"]

    assert sorted(plans) == names  # one plan write per member, by one replica
    assert 1 == len({placement(cluster, n)["planned"] for n in names})
    assert [1, 1] == before  # the standby said nothing


async def test_a_group_naming_a_level_waits_for_its_network_topology(env):
    cluster, start_operator, _, _, _, wait = env.parts()
    await build_cluster(env, topology=False)
    await start_operator(**FAST)
    names = ["t-0", "t-1"]
    for i, name in enumerate(names):
        await cluster.create_pod(
            member(env, name, "t", 2, rank=i, annotations={keys.TOPOLOGY_REQUIRED: L3})
        )
    await wait(lambda: "GroupUnsatisfiable" in reasons(cluster, "t-0"), what="no topology yet")
    [(_, message)] = cluster.events_for("t-0")[-1:]

    assert "no NetworkTopology exists" in message

    await cluster.create_network_topology("default", [L1, L2, L3])
    await wait(lambda: all(released(cluster, n) for n in names), what="placed once it exists")

    assert 1 == len({domain(assigned_node(cluster, n), L3) for n in names})


TEAM_B = {"key": "dedicated", "value": "team-b", "effect": "NoSchedule"}


async def test_members_are_never_planned_on_a_node_whose_taint_they_do_not_tolerate(env):
    cluster, start_operator, _, pod, _, wait = env.parts()
    await build_cluster(env)
    # n1 busy: block-1 has three whole nodes left, so only block-2 holds 4 x 8 GPUs, and
    # n5 of block-2 is reserved for team b.
    await cluster.create_pod(pod("busy", node="n1", gpus=1))
    await cluster.patch_node("n5", {"spec": {"taints": [TEAM_B]}})
    await start_operator(**FAST)
    names = [f"a-{i}" for i in range(4)]
    for i, name in enumerate(names):
        await cluster.create_pod(
            member(env, name, "a", 4, rank=i, annotations={keys.TOPOLOGY_REQUIRED: L2})
        )
    await wait(
        lambda: all("GroupUnsatisfiable" in reasons(cluster, n) for n in names),
        what="GroupUnsatisfiable: no block has four nodes the members may go to",
    )
    assert not any(released(cluster, n) for n in names)
    assert not any(keys.ASSIGNMENT in cluster.annotations(n) for n in names)

    # Team b's group tolerates its taint: block-2, n5 included.
    tolerant = [f"b-{i}" for i in range(4)]
    for i, name in enumerate(tolerant):
        body = member(env, name, "b", 4, rank=i, annotations={keys.TOPOLOGY_REQUIRED: L2})
        body["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
        await cluster.create_pod(body)
    await wait(lambda: all(released(cluster, n) for n in tolerant), what="team b placed")
    assert ["n5", "n6", "n7", "n8"] == [assigned_node(cluster, n) for n in tolerant]


async def test_members_go_only_where_their_required_node_affinity_allows(env):
    cluster, start_operator, _, _, _, wait = env.parts()
    await build_cluster(env)
    await start_operator(**FAST)
    names = [f"aff-{i}" for i in range(2)]
    not_leaf_1 = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": L3, "operator": "NotIn", "values": ["leaf-1"]}]}
                ]
            }
        }
    }
    for i, name in enumerate(names):
        body = member(env, name, "aff", 2, rank=i, annotations={keys.TOPOLOGY_REQUIRED: L3})
        body["spec"]["affinity"] = not_leaf_1
        await cluster.create_pod(body)
    await wait(lambda: all(released(cluster, n) for n in names), what="placed")

    # Without the affinity the first leaf in tree order (leaf-1) would take the group.
    assert {"leaf-2"} == {domain(assigned_node(cluster, n), L3) for n in names}


async def test_a_leader_and_its_workers_from_two_templates_are_placed_as_one(env):
    """Kueue's `podset-group-name`: a launcher (1 GPU) and workers (8 GPUs each) made
    from two pod templates share one group name and one size, and one plan."""
    cluster, start_operator, _, pod, _, wait = env.parts()
    await build_cluster(env)
    # n1 busy: block-1 keeps three whole nodes; the launcher's 1 GPU fits next to them.
    await cluster.create_pod(pod("busy", node="n1", gpus=1))
    await start_operator(**FAST)
    settings = {keys.TOPOLOGY_REQUIRED: L2}
    await cluster.create_pod(
        member(env, "launcher", "mpi", 4, gpus=1, rank=0, annotations=settings)
    )
    workers = [f"worker-{i}" for i in range(1, 4)]
    for i, name in enumerate(workers, start=1):
        await cluster.create_pod(member(env, name, "mpi", 4, rank=i, annotations=settings))
    names = ["launcher", *workers]
    await wait(lambda: all(released(cluster, n) for n in names), what="the group placed")

    nodes = [assigned_node(cluster, n) for n in names]
    # One plan for both templates, in one block: 3 x 8 + 1 GPUs fit block-1 with n1 busy.
    assert 1 == len({placement(cluster, n)["planned"] for n in names})
    assert 1 == len({domain(n) for n in nodes})
    assert len(set(nodes[1:])) == 3
