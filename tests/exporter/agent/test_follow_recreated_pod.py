"""Follow for a pod deleted and created again under the same name (every StatefulSet pod, a
Job's pod re-created by hand): the kubelet's PodResources `List` names pods by namespace
and name, never by UID, so until the kubelet has let go of the predecessor its entry under
that name holds the predecessor's devices. The agent must not report those as the new pod's
(a false `numatopo.io/observed` makes the operator move the pod onto GPUs it will never
hold), nor take them for the new pod's own when it offers GPU claims to its steering plugin.

Real parts: the agent's passes against the API emulator, the kubelet harness's PodResources
server over gRPC and its device manager with an NVIDIA-shaped plugin (which gives the lowest
free GPUs of the NUMA node the Topology Manager hint allows)."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import kmock

import signing_keys
from kubelet_harness import GPU, Container, FakeGpu, Harness, Pod
from metric_samples import sample
from numatopo_engine.annotations import OBSERVED
from numatopo_exporter.agent.loop import AgentLoop
from numatopo_exporter.agent.pod_view import PodView
from numatopo_exporter.agent.watch import take_event

from ..conftest import NodeClient, pod_path
from ..daemon.conftest import NODE
from .conftest import CgroupTree, make_agent

GPUS = [FakeGpu.numbered(i, i // 2) for i in range(4)]  # GPUs 0, 1 on NUMA 0; 2, 3 on 1
OLD, NEW = "0ld00000-0000-4000-8000-000000000001", "9e900000-0000-4000-8000-000000000002"
CID = "c0ffee00c0ffee00"


def predecessor() -> Pod:
    # Its hint puts it on NUMA node 1: GPUs 2 and 3, not those its successor gets.
    main = Container("main", {GPU: 2}, numa_affinity=frozenset({1}))
    return Pod(OLD, "web-0", containers=(main,))


def successor() -> Pod:
    return Pod(NEW, "web-0", containers=(Container("main", {GPU: 2}),))


def new_pod(*, running: bool) -> dict[str, Any]:
    """The successor as the API has it: assigned GPUs 0 and 1 (what the kubelet will give
    it), before the kubelet took it in, or running."""
    assignment = {"v": 1, "node": NODE, "seq": 7,
                  "containers": {"main": {"gpus": [GPUS[0].id, GPUS[1].id], "gpuIndices": [0, 1],
                                          "cpus": "1", "mems": "0"}}}  # fmt: skip
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default", "uid": NEW,
                     "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": {}},
        "spec": {"nodeName": NODE,
                 "containers": [{"name": "main", "resources": {"limits": {GPU: "2"}}}]},
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }  # fmt: skip
    body["metadata"]["annotations"]["numatopo.io/assignment"] = signing_keys.signed_annotation(
        body, json.dumps(assignment)
    )
    if running:
        body["status"] = {
            "phase": "Running",
            "qosClass": "Burstable",
            "startTime": "2026-01-01T00:00:01Z",
            "containerStatuses": [
                {"name": "main", "containerID": f"containerd://{CID}", "state": {"running": {}}}
            ],
        }
    return body


@dataclass
class Node:
    kubelet: Harness
    agent: AgentLoop
    client: NodeClient
    cluster: kmock.KubernetesEmulator

    def annotations(self) -> dict[str, str]:
        meta = self.cluster.objects["v1/pods", "default", "web-0"].raw["metadata"]
        return dict(meta.get("annotations") or {})

    def observed_gpus(self) -> list[str] | None:
        text = self.annotations().get(OBSERVED)
        if text is None:
            return None
        return sorted(json.loads(text)["containers"]["main"]["devices"][GPU])

    async def show(self, body: dict[str, Any]) -> None:
        """The pod as the API has it now, as the agent's watch delivers it."""
        await self.client.patch(pod_path("default", "web-0"), {"status": body["status"]})
        take_event(self.agent.pods, "MODIFIED", await self.client.get(pod_path("default", "web-0")))

    async def replace_predecessor(self) -> None:
        """The kubelet lets the predecessor go, admits the successor and starts it; its
        status says so."""
        self.kubelet.remove_pod(OLD)
        admission = await self.kubelet.admit(successor())
        assert admission.ok, admission.error
        assert sorted(admission.ids("main")) == [GPUS[0].id, GPUS[1].id]
        await self.show(new_pod(running=True))


@asynccontextmanager
async def node_with_predecessor(
    cluster: kmock.KubernetesEmulator, client: NodeClient, tree: CgroupTree
) -> AsyncIterator[Node]:
    """A kubelet still running `web-0`'s predecessor (GPUs 2, 3), and an agent that has
    seen only the successor, not taken in by the kubelet yet."""
    tree.make(f"kubepods/burstable/pod{NEW}/{CID}")
    async with Harness(rng=random.Random(5)) as kubelet:
        await kubelet.start_plugin(GPUS)
        admission = await kubelet.admit(predecessor())
        assert admission.ok, admission.error
        assert sorted(admission.ids("main")) == [GPUS[2].id, GPUS[3].id]
        agent = make_agent(client, tree, pod_resources_socket=kubelet.pod_resources_socket)
        await client.create("/api/v1/namespaces/default/pods", new_pod(running=False))
        agent.pods.replace([PodView.of(await client.get(pod_path("default", "web-0")))])
        yield Node(kubelet, agent, client, cluster)


async def test_a_successor_the_kubelet_has_not_taken_in_is_not_given_its_predecessors_gpus(
    cluster: kmock.KubernetesEmulator, client: NodeClient, file_cgroups: CgroupTree
) -> None:
    async with node_with_predecessor(cluster, client, file_cgroups) as node:
        await node.agent.reconcile()

        assert node.observed_gpus() is None, "the predecessor's GPUs reported as the new pod's"
        assert sample(node.agent.metrics, "numatopo_agent_gpu_mismatches_total") == 0

        await node.replace_predecessor()
        await node.agent.reconcile()

        assert node.observed_gpus() == [GPUS[0].id, GPUS[1].id]
        observed = json.loads(node.annotations()[OBSERVED])
        assert observed["seq"] == 7
        assert observed["containers"]["main"]["matches"] is True
        assert sample(node.agent.metrics, "numatopo_agent_gpu_mismatches_total") == 0


async def test_a_listing_read_before_the_successor_was_seen_running_is_not_its_listing(
    cluster: kmock.KubernetesEmulator, client: NodeClient, file_cgroups: CgroupTree
) -> None:
    """The pass reads PodResources while the kubelet still holds the predecessor; before the
    pass compares, the kubelet has moved on and the watch has delivered the successor
    running. That listing speaks for the predecessor, whatever the pod shows by then."""
    async with node_with_predecessor(cluster, client, file_cgroups) as node:
        read = node.agent.devices.read_holdings

        async def kubelet_moves_on_meanwhile(*args: Any) -> Any:
            listing = await read(*args)
            await node.replace_predecessor()
            return listing

        node.agent.devices.read_holdings = kubelet_moves_on_meanwhile  # type: ignore[method-assign]
        await node.agent.reconcile()

        assert node.observed_gpus() is None, "the predecessor's GPUs reported as the new pod's"
        assert sample(node.agent.metrics, "numatopo_agent_gpu_mismatches_total") == 0

        node.agent.devices.read_holdings = read  # type: ignore[method-assign]
        await node.agent.reconcile()

        assert node.observed_gpus() == [GPUS[0].id, GPUS[1].id]
        assert json.loads(node.annotations()[OBSERVED])["containers"]["main"]["matches"] is True


async def test_the_successor_is_steered_while_its_predecessor_is_still_listed(
    cluster: kmock.KubernetesEmulator, client: NodeClient, file_cgroups: CgroupTree
) -> None:
    """The steering plugin is offered the successor's GPUs as a claim in flight although the
    last listing has `web-0` holding GPUs: those are the predecessor's."""
    async with node_with_predecessor(cluster, client, file_cgroups) as node:
        await node.agent.reconcile()

        assert [(NEW, "main", (GPUS[0].id, GPUS[1].id))] == in_flight(node.agent)

        await node.replace_predecessor()
        await node.agent.reconcile()  # a listing read once the kubelet had taken it in

        assert [] == in_flight(node.agent)


def in_flight(agent: AgentLoop) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.pod_uid, c.container, c.gpus) for c in agent.pods.in_flight]


def test_only_the_kubelets_report_on_a_pod_makes_it_admitted() -> None:
    """What the scheduler and the agent write on a pending pod (conditions) says nothing of
    the kubelet; a start time or container statuses (even waiting, with no id yet) do."""
    body = new_pod(running=False)
    body["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True"},
        {"type": "numatopo.io/Aligned", "status": "False", "reason": "GPUMismatch"},
    ]
    assert not PodView.of(body).admitted

    body["status"]["startTime"] = "2026-01-01T00:00:01Z"
    assert PodView.of(body).admitted

    del body["status"]["startTime"]
    waiting = {"name": "main", "state": {"waiting": {"reason": "ContainerCreating"}}}
    body["status"]["initContainerStatuses"] = [waiting]
    assert PodView.of(body).admitted


THIRD = "7e300000-0000-4000-8000-000000000003"


async def test_what_the_kubelet_gave_a_deleted_pod_is_not_written_on_its_namesake(
    cluster: kmock.KubernetesEmulator, client: NodeClient, file_cgroups: CgroupTree
) -> None:
    """The agent's view still has the running successor when the API already has a third
    `web-0` (its deletion and the namesake's creation not delivered yet). Its `observed` and
    its condition carry the successor's uid, which the API server takes as a precondition
    (the emulator refuses as it does, `uid_preconditions`): the namesake is left as created."""
    async with node_with_predecessor(cluster, client, file_cgroups) as node:
        await node.replace_predecessor()
        await client.request("DELETE", pod_path("default", "web-0"))
        namesake = new_pod(running=False)
        namesake["metadata"].update(uid=THIRD, annotations={})
        await client.create("/api/v1/namespaces/default/pods", namesake)
        created = await client.get(pod_path("default", "web-0"))

        await node.agent.reconcile()

        after = await client.get(pod_path("default", "web-0"))
        assert after["metadata"]["uid"] == THIRD
        assert OBSERVED not in (after["metadata"].get("annotations") or {}), (
            "the successor's devices written on its namesake"
        )
        assert after["metadata"].get("annotations") == created["metadata"].get("annotations")
        assert after.get("status") == created.get("status")
