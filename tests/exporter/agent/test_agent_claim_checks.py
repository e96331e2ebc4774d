"""Which claims the agent enforces when they conflict with each other or with the machine:
earlier decisions (by `seq`) win, and one impossible claim costs only its own pod."""

from __future__ import annotations

import json
from typing import Any

import kmock

import signing_keys
from metric_samples import sample
from numatopo_engine.cpuset import CPUSet
from numatopo_exporter.agent import pods
from numatopo_exporter.agent.feedback import ALIGNED
from numatopo_exporter.agent.planning import Cpuset
from numatopo_exporter.agent.pod_view import PodView

from ..conftest import NodeClient, pod_path
from ..daemon.conftest import NODE
from .conftest import CgroupTree, make_agent
from .test_agent_loop import CID_A, CID_B, PODS, UID_A, UID_B, pod

CID_C = "c0c0c0c0c0c0"
UID_C = "cccccccc-0000-4000-8000-000000000003"


def claim(cpus: str, *, seq: int, mems: str = "0", exclusive: bool = True) -> str:
    container = {"cpus": cpus, "mems": mems, "exclusive": exclusive}
    return json.dumps({"v": 1, "node": NODE, "seq": seq, "containers": {"main": container}})


def cgroup(uid: str, cid: str) -> str:
    return f"kubepods/burstable/pod{uid}/{cid}"


def condition(cluster: kmock.KubernetesEmulator, name: str) -> tuple[str, str]:
    body = cluster.objects[PODS, "default", name].raw
    for found in body.get("status", {}).get("conditions", []):
        if found["type"] == ALIGNED:
            return str(found["status"]), str(found["reason"])
    return "", ""


class Pods:
    """Pods on the emulated API, and an agent that reconciles them on `tree`."""

    def __init__(self, client: NodeClient, tree: CgroupTree) -> None:
        self.client, self.tree = client, tree
        self.bodies: dict[str, dict[str, Any]] = {}
        self.agent = make_agent(client, tree)

    async def add(
        self, name: str, uid: str, cid: str, annotation: str, *, created: str, signed: bool = True
    ) -> None:
        self.tree.make(cgroup(uid, cid))
        if self.tree.real:
            self.tree.spawn_in(cgroup(uid, cid))
        body = pod(name, uid, cid=cid, annotation=annotation, created=created, signed=signed)
        await self.client.create("/api/v1/namespaces/default/pods", body)
        self.bodies[uid] = body

    async def reconcile(self) -> None:
        self.agent.pods.replace(
            [
                PodView.of(await self.client.get(pod_path("default", body["metadata"]["name"])))
                for body in self.bodies.values()
            ]
        )
        await self.agent.reconcile()

    def cpus(self, relative: str) -> str:
        return (self.tree.root / relative / "cpuset.cpus").read_text().strip()


async def test_an_older_pod_assigned_later_does_not_displace_an_enforced_one(
    cluster: kmock.KubernetesEmulator, client: NodeClient, cgroup_tree: CgroupTree
) -> None:
    """Pod b (decision 1) runs on CPU 1. Pod a, created before b but decided after it
    (decision 2, a stale or hand-made claim on the same CPU), must not take it."""
    node = Pods(client, cgroup_tree)
    await node.add("b", UID_B, CID_B, claim("1", seq=1), created="2024-01-02T00:00:00Z")
    await node.reconcile()
    assert "1" == node.cpus(cgroup(UID_B, CID_B))

    await node.add("a", UID_A, CID_A, claim("1", seq=2), created="2024-01-01T00:00:00Z")
    await node.reconcile()

    assert "1" == node.cpus(cgroup(UID_B, CID_B))
    assert ("True", "CpusetsApplied") == condition(cluster, "b")
    assert ("False", "AssignmentOverlaps") == condition(cluster, "a")


def test_equal_sequences_are_ordered_by_pod_uid() -> None:
    """Two legacy claims (seq 0) on one CPU: the lower UID wins, whatever the listing
    order or creation times."""
    bodies = [
        pod("z", UID_B, cid=CID_B, annotation=claim("1", seq=0), created="2024-01-01T00:00:00Z"),
        pod("y", UID_A, cid=CID_A, annotation=claim("1", seq=0), created="2024-01-09T00:00:00Z"),
    ]
    online = Cpuset(CPUSet.parse("0-3"), CPUSet([0]))

    for order in (bodies, bodies[::-1]):
        accepted, refused = pods.select_assignments(
            [PodView.of(body) for body in order],
            node_name=NODE,
            online=online,
            verifier=signing_keys.VERIFIER,
        )
        assert ([UID_A], [UID_B]) == ([a.uid for a in accepted], [r.uid for r in refused])


async def test_a_memory_node_the_machine_lacks_refuses_only_that_pod(
    cluster: kmock.KubernetesEmulator, client: NodeClient, cgroup_tree: CgroupTree
) -> None:
    """mems 5 does not exist here: kubepods must not be widened (the kernel would refuse
    and every pod would fail with it); pod c alone is refused, and says why."""
    node = Pods(client, cgroup_tree)
    await node.add("a", UID_A, CID_A, claim("1", seq=1), created="2024-01-01T00:00:00Z")
    await node.add(
        "c",
        UID_C,
        CID_C,
        claim("0", seq=2, mems="5", exclusive=False),
        created="2024-01-02T00:00:00Z",
    )

    await node.reconcile()

    assert "0" == (cgroup_tree.root / "kubepods" / "cpuset.mems").read_text().strip()
    assert ("True", "CpusetsApplied") == condition(cluster, "a")
    assert ("False", "AssignmentNotOnNode") == condition(cluster, "c")
    message = cluster.objects[PODS, "default", "c"].raw["status"]["conditions"][-1]["message"]
    assert "memory nodes 5" in message


def test_cpus_that_are_not_online_refuse_the_pod_with_a_reason() -> None:
    body = pod("a", UID_A, cid=CID_A, annotation=claim("2-9", seq=1, exclusive=False), created="")
    online = Cpuset(CPUSet.parse("0-3"), CPUSet([0]))

    accepted, refused = pods.select_assignments(
        [PodView.of(body)], node_name=NODE, online=online, verifier=signing_keys.VERIFIER
    )

    assert [] == accepted
    assert [("AssignmentNotOnNode", "container main: CPUs 4-9 are not online here")] == [
        (r.reason, r.message.split(" (")[0]) for r in refused
    ]


async def test_claims_on_every_cpu_refuse_the_latest_and_enforce_the_rest(
    cluster: kmock.KubernetesEmulator, client: NodeClient, cgroup_tree: CgroupTree
) -> None:
    """Pod a holds CPU 1; pod c (a later decision) claims every other CPU. The shared
    pool would be empty: c is refused, a stays enforced, and drift is still corrected."""
    node = Pods(client, cgroup_tree)
    online = CPUSet.parse(node.cpus("."))
    rest = str(online - CPUSet([1]))
    await node.add("a", UID_A, CID_A, claim("1", seq=1), created="x")
    await node.add("c", UID_C, CID_C, claim(rest, seq=2), created="x")

    await node.reconcile()
    (cgroup_tree.root / cgroup(UID_A, CID_A) / "cpuset.cpus").write_text(str(online))
    await node.reconcile()

    assert "1" == node.cpus(cgroup(UID_A, CID_A))
    assert ("True", "CpusetsApplied") == condition(cluster, "a")
    assert ("False", "SharedPoolExhausted") == condition(cluster, "c")
    assert 1 == sample(node.agent.metrics, "numatopo_agent_drift_corrections_total")


async def test_a_copied_assignment_never_takes_an_enforced_claims_cpus(
    cluster: kmock.KubernetesEmulator, client: NodeClient, cgroup_tree: CgroupTree
) -> None:
    """Pod b holds CPU 1 under the operator's signed decision 1. Pod a copies b's
    annotation byte for byte (same seq, and a uid that sorts before b's): it is not
    signed for a, so it books nothing and b keeps its CPU."""
    node = Pods(client, cgroup_tree)
    await node.add("b", UID_B, CID_B, claim("1", seq=1), created="2024-01-02T00:00:00Z")
    await node.reconcile()
    copied = node.bodies[UID_B]["metadata"]["annotations"]["numatopo.io/assignment"]
    await node.add("a", UID_A, CID_A, copied, created="2024-01-01T00:00:00Z", signed=False)

    await node.reconcile()

    assert UID_A < UID_B
    assert "1" == node.cpus(cgroup(UID_B, CID_B))
    assert "1" != node.cpus(cgroup(UID_A, CID_A))
    assert ("True", "CpusetsApplied") == condition(cluster, "b")
    assert ("False", pods.UNSIGNED) == condition(cluster, "a")


async def test_a_hand_written_assignment_with_a_made_up_seq_is_not_enforced(
    cluster: kmock.KubernetesEmulator, client: NodeClient, cgroup_tree: CgroupTree
) -> None:
    """Pod a writes itself CPU 1 with seq 0 (the earliest there is): unsigned, refused."""
    node = Pods(client, cgroup_tree)
    await node.add("b", UID_B, CID_B, claim("1", seq=5), created="2024-01-02T00:00:00Z")
    await node.add(
        "a", UID_A, CID_A, claim("1", seq=0), created="2024-01-01T00:00:00Z", signed=False
    )

    await node.reconcile()

    assert "1" == node.cpus(cgroup(UID_B, CID_B))
    assert ("True", "CpusetsApplied") == condition(cluster, "b")
    assert ("False", pods.UNSIGNED) == condition(cluster, "a")


async def test_an_older_signed_decision_shown_again_never_takes_a_later_pods_cpus(
    cluster: kmock.KubernetesEmulator, client: NodeClient, cgroup_tree: CgroupTree
) -> None:
    """The assignment guard off (a trial): pod a, decided on CPU 1 (seq 1) and then on
    the shared CPUs (seq 3), has its first signed assignment written back once pod b (seq 4) holds
    CPU 1. It verifies (it was signed for a), but a showed a later decision before: b
    keeps CPU 1, and a's old claim is the one refused."""
    node = Pods(client, cgroup_tree)
    await node.add("a", UID_A, CID_A, claim("1", seq=1), created="2024-01-01T00:00:00Z")
    await node.reconcile()
    first = node.bodies[UID_A]["metadata"]["annotations"]["numatopo.io/assignment"]
    path = pod_path("default", "a")
    later = signing_keys.signed_annotation(node.bodies[UID_A], claim("0", seq=3, exclusive=False))
    await client.patch(path, {"metadata": {"annotations": {"numatopo.io/assignment": later}}})
    await node.reconcile()
    await node.add("b", UID_B, CID_B, claim("1", seq=4), created="2024-01-02T00:00:00Z")
    await node.reconcile()
    assert ("0", "1") == (node.cpus(cgroup(UID_A, CID_A)), node.cpus(cgroup(UID_B, CID_B)))
    assert ("True", "CpusetsApplied") == condition(cluster, "a")

    await client.patch(path, {"metadata": {"annotations": {"numatopo.io/assignment": first}}})
    await node.reconcile()

    assert "1" == node.cpus(cgroup(UID_B, CID_B))
    assert "1" != node.cpus(cgroup(UID_A, CID_A))
    assert ("True", "CpusetsApplied") == condition(cluster, "b")
    assert ("False", "AssignmentOverlaps") == condition(cluster, "a")
