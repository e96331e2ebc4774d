"""The GPU guarantee the agent reports for its node: Steered while the steering plugin
is registered, Followed while PodResources can be read, else None (unverified)."""

from __future__ import annotations

from pathlib import Path

import signing_keys
from numatopo_engine.model import GpuMode
from numatopo_exporter.agent.loop import AgentLoop
from numatopo_kube import KubeClient


def _agent(steered: bool | None) -> AgentLoop:
    agent = AgentLoop(
        KubeClient(component="t", host="n"),
        node_name="n",
        verifier=signing_keys.VERIFIER,
        cgroup_root=Path("/x"),
    )
    if steered is not None:
        agent.steered = lambda: steered
    return agent


def test_steered_wins_then_followed_then_none() -> None:
    assert _agent(True)._gpu_mode(follows=True)[0] is GpuMode.STEERED
    assert _agent(True)._gpu_mode(follows=False)[0] is GpuMode.STEERED
    assert _agent(False)._gpu_mode(follows=True)[0] is GpuMode.FOLLOWED
    assert _agent(None)._gpu_mode(follows=True)[0] is GpuMode.FOLLOWED
    mode, reason, message = _agent(False)._gpu_mode(follows=False)
    assert (mode, reason) == (GpuMode.NONE, "Unverified")
    assert "Follow is off" in message
