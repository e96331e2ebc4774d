"""The GPU guarantee the agent reports for its node: Steered while the steering plugin
is registered, Followed while PodResources can be read, else None (unverified)."""

from __future__ import annotations

from pathlib import Path

import signing_keys
from numatopo_engine.model import GpuMode
from numatopo_exporter.agent.loop import AgentLoop
from numatopo_exporter.agent.node_status import gpu_mode
from numatopo_kube import KubeClient


def _agent() -> AgentLoop:
    return AgentLoop(
        KubeClient(component="t", host="n"),
        node_name="n",
        verifier=signing_keys.VERIFIER,
        cgroup_root=Path("/x"),
    )


def _mode(steered: bool | None, *, follows: bool) -> tuple[GpuMode, str, str]:
    """The mode an agent reports, with the steering plugin registered (True), not
    registered (False) or absent (None), as the agent loop asks for it."""
    return gpu_mode(
        steered=bool(steered), follows=follows, unverified=_agent().devices.why_unverified()
    )


def test_steered_wins_then_followed_then_none() -> None:
    assert _mode(True, follows=True)[0] is GpuMode.STEERED
    assert _mode(True, follows=False)[0] is GpuMode.STEERED
    assert _mode(False, follows=True)[0] is GpuMode.FOLLOWED
    assert _mode(None, follows=True)[0] is GpuMode.FOLLOWED
    mode, reason, message = _mode(False, follows=False)
    assert (mode, reason) == (GpuMode.NONE, "Unverified")
    assert "Follow is off" in message
