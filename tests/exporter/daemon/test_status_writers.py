"""The two node-side writers of `Numatopology.status.conditions` never undo each other.

The exporter (`Exported`, `Degraded`, heartbeat) and the agent (`Enforcing`) write the
same list from two processes. Both run for real here, over HTTP, each with its own
client; the clients hold every status write until the other writer has also read and
is about to write, which is the interleaving in which a read-modify-write of the whole
list loses one writer's condition. The emulator merges server-side applies of the
CRD's map lists as a real API server does (`ApplyingEmulator`).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import kmock
import pytest

import signing_keys
from numatopo_engine.model import NumaNode, NumatopologySpec
from numatopo_exporter.agent.loop import AgentLoop
from numatopo_exporter.daemon.publishing import Publisher, spec_hash
from numatopo_kube import KubeClient

from ..conftest import NodeClient, numatopology_path
from .conftest import NODE, ApplyingEmulator

NTP = "numatopo.io/v1alpha1/numatopologies"


class RacingClient(KubeClient):
    """A real client whose status writes wait at `barrier` (when set) for the other
    writer's, so that both have read the object before either writes."""

    barrier: asyncio.Barrier | None = None

    async def apply_numatopology_status(
        self, name: str, status: dict[str, Any], *, field_manager: str
    ) -> dict[str, Any]:
        if self.barrier is not None:
            await self.barrier.wait()
        return await super().apply_numatopology_status(name, status, field_manager=field_manager)


def spec(cpus: str) -> NumatopologySpec:
    return NumatopologySpec(numa_nodes=[NumaNode(id=0, cpus=cpus, memory_bytes=1 << 34)])


def conditions(cluster: kmock.KubernetesEmulator) -> dict[str, str]:
    status = dict(cluster.objects[NTP, None, NODE].raw).get("status") or {}
    return {c["type"]: c["status"] for c in status.get("conditions") or []}


def messages(cluster: kmock.KubernetesEmulator) -> dict[str, str]:
    status = dict(cluster.objects[NTP, None, NODE].raw).get("status") or {}
    return {c["type"]: c.get("message", "") for c in status.get("conditions") or []}


@pytest.mark.kmock(cls=ApplyingEmulator)
async def test_exporter_and_agent_racing_keep_both_conditions(
    cluster: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    state = tmp_path / "cpu_manager_state"
    url = str(cluster.url)
    async with (
        RacingClient.connect(url) as exporter_client,
        RacingClient.connect(url) as agent_client,
    ):
        publisher = Publisher(exporter_client, node_name=NODE, clock=lambda: 1_700_000_000.0)
        agent = AgentLoop(
            client=agent_client,
            node_name=NODE,
            verifier=signing_keys.VERIFIER,
            cgroup_root=tmp_path,
            kubelet_state=state,
        )
        await publisher.publish(spec("0-7"), scanned_at=1.0)  # the object exists
        barrier = asyncio.Barrier(2)
        exporter_client.barrier = agent_client.barrier = barrier
        seen = []
        for round_, (cpus, policy) in enumerate([("0-3", "static"), ("0-5", "none")]):
            state.write_text(json.dumps({"policyName": policy, "checksum": 1}))
            async with asyncio.timeout(10):
                await asyncio.gather(
                    publisher.publish(spec(cpus), scanned_at=2.0 + round_),
                    agent.publish_node_status(),
                )
            stored = messages(cluster)
            seen.append(
                (
                    spec_hash(spec(cpus)) in stored.get("Exported", ""),
                    conditions(cluster).get("Enforcing"),
                )
            )

    # Each round: the exporter's new `Exported` and the agent's new `Enforcing` both stay.
    assert [(True, "False"), (True, "True")] == seen


@pytest.mark.kmock(cls=ApplyingEmulator)
async def test_an_apply_removes_only_what_the_same_manager_left_out(
    cluster: kmock.KubernetesEmulator, client: NodeClient
) -> None:
    """The emulator's merge itself, so the racing test above can be trusted."""
    await client.create(numatopology_path(), {"metadata": {"name": NODE}, "spec": {}})

    def cond(kind: str) -> dict[str, str]:
        return {"type": kind, "status": "True"}

    await client.apply_numatopology_status(
        NODE, {"conditions": [cond("A"), cond("B")]}, field_manager="one"
    )
    await client.apply_numatopology_status(NODE, {"conditions": [cond("C")]}, field_manager="two")
    await client.apply_numatopology_status(NODE, {"conditions": [cond("B")]}, field_manager="one")

    assert {"B": "True", "C": "True"} == conditions(cluster)
