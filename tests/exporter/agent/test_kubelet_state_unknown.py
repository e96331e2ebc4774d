"""Unknown is not `none`: a CPU manager checkpoint the agent cannot read stops all writes,
is reported on the Numatopology and as a Node Event, and is read again every pass."""

from __future__ import annotations

import os
from pathlib import Path

import kmock
import pytest

from numatopo_engine.model import API_VERSION, KIND
from numatopo_exporter.agent.node_status import ENFORCING
from numatopo_exporter.agent.pod_view import PodView
from numatopo_exporter.discovery import kubelet
from numatopo_exporter.discovery.errors import DiscoveryError

from ..conftest import NodeClient
from ..daemon.conftest import NODE
from .conftest import CgroupTree, events_posted, make_agent
from .test_agent_loop import CID_A, UID_A, assignment, pod

CONTAINER = f"kubepods/burstable/pod{UID_A}/{CID_A}"
NTP = "numatopo.io/v1alpha1/numatopologies"

UNREADABLE = [
    pytest.param('{"policyName": "static", "defaultCpuSet": "0-', id="cut-short-mid-write"),
    pytest.param("\x00\x00\x00\x00", id="garbage"),
    pytest.param("", id="empty"),
    pytest.param('["static"]', id="not-an-object"),
    pytest.param('{"defaultCpuSet": "0-3"}', id="no-policy-name"),
]


@pytest.mark.parametrize("text", UNREADABLE)
def test_an_unreadable_checkpoint_is_an_error_not_none(tmp_path: Path, text: str) -> None:
    state = tmp_path / "cpu_manager_state"
    state.write_text(text)

    with pytest.raises(DiscoveryError, match=str(state)):
        kubelet.read_cpu_manager_policy(state)


def test_a_checkpoint_without_read_permission_is_an_error(tmp_path: Path) -> None:
    state = tmp_path / "cpu_manager_state"
    state.write_text('{"policyName": "none"}')
    state.chmod(0)
    if os.access(state, os.R_OK):
        pytest.skip("running as root: file modes do not stop reads (a directory stands in below)")

    with pytest.raises(DiscoveryError, match="cannot read"):
        kubelet.read_cpu_manager_policy(state)


def test_a_checkpoint_that_cannot_be_opened_is_an_error(tmp_path: Path) -> None:
    """A directory where the file should be: open(2) fails (EISDIR) even for root."""
    state = tmp_path / "cpu_manager_state"
    state.mkdir()

    with pytest.raises(DiscoveryError, match="cannot read"):
        kubelet.read_cpu_manager_policy(state)


def test_a_missing_checkpoint_is_no_policy(tmp_path: Path) -> None:
    """The kubelet writes none under its default policy (`none`): the agent goes ahead."""
    assert None is kubelet.read_cpu_manager_policy(tmp_path / "cpu_manager_state")


def test_the_named_policy_is_returned(tmp_path: Path) -> None:
    state = tmp_path / "cpu_manager_state"
    state.write_text('{"policyName": "static", "defaultCpuSet": "0-3", "checksum": 1}')

    assert "static" == kubelet.read_cpu_manager_policy(state)


def enforcing(cluster: kmock.KubernetesEmulator) -> dict[str, str]:
    status = cluster.objects[NTP, None, NODE].raw.get("status", {})
    (found,) = [c for c in status.get("conditions", []) if c["type"] == ENFORCING]
    return dict(found)


def node_events(cluster: kmock.KubernetesEmulator) -> list[str]:
    return [
        cluster.objects[k].raw["reason"]
        for k in list(cluster.objects)
        if cluster.objects[k].raw.get("kind") == "Event"
        and cluster.objects[k].raw["involvedObject"]["kind"] == "Node"
    ]


async def test_an_unknown_kubelet_policy_stops_writes_until_it_is_known(
    cluster: kmock.KubernetesEmulator, client: NodeClient, file_cgroups: CgroupTree
) -> None:
    state = file_cgroups.root / "cpu_manager_state"
    state.write_text('{"policyName": "sta')  # the kubelet was killed mid-write
    file_cgroups.make(CONTAINER)
    cluster.objects[NTP, None, NODE] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": NODE},
        "spec": {},
    }
    body = pod("a", UID_A, cid=CID_A, annotation=assignment("1"), created="x")
    await client.create("/api/v1/namespaces/default/pods", body)
    agent = make_agent(client, file_cgroups, kubelet_state=state)
    agent.pods.replace([PodView.of(body)])
    cpus = file_cgroups.root / CONTAINER / "cpuset.cpus"

    await agent.reconcile()
    await agent.reconcile()  # still unknown: still nothing written, no second Event
    await events_posted(agent)

    assert "0-3" == cpus.read_text().strip()
    condition = enforcing(cluster)
    assert ("False", "KubeletCPUManagerStateUnknown") == (
        condition["status"],
        condition["reason"],
    )
    assert str(state) in condition["message"]
    assert ["KubeletCPUManagerStateUnknown"] == node_events(cluster)

    state.write_text('{"policyName": "none"}')
    await agent.reconcile()

    assert "1" == cpus.read_text().strip()
    assert "True" == enforcing(cluster)["status"]
