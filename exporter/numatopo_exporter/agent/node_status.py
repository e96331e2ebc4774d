"""Node status: whether the agent enforces on this node (the kubelet's CPU manager), the node's GPU
guarantee and the devices the kubelet cannot hand out, published on the node's Numatopology status
under the agent's own field manager (API I/O)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from numatopo_engine.model import GpuMode, UnhealthyDevices
from numatopo_exporter.agent.feedback import now_text
from numatopo_exporter.discovery import kubelet
from numatopo_exporter.discovery.errors import DiscoveryError
from numatopo_kube import KubeClient, KubeError
from numatopo_kube.event_posts import EventPosts

COMPONENT = "numatopo-agent"
ENFORCING = "Enforcing"
AGENT_ENFORCING = "AgentEnforcing"
GPU_ASSIGNMENT = "GPUAssignment"

logger = logging.getLogger("numatopo.agent")


def kubelet_verdict(kubelet_state: Path | None) -> tuple[str, str]:
    """(reason, message) of the `Enforcing` condition, from the kubelet's checkpoint. A static
    kubelet writes exclusive cpusets itself and rewrites them on every reconcile (10 s): two
    writers would fight forever, so the agent stands aside."""
    try:
        policy = None if kubelet_state is None else kubelet.read_cpu_manager_policy(kubelet_state)
    except DiscoveryError as exc:
        # Unknown is not `none`: the kubelet may be static, and writing would fight it.
        return (
            "KubeletCPUManagerStateUnknown",
            f"cannot tell the kubelet's CPU manager policy, so numatopo does not write "
            f"cpusets on this node until it can (checked again every resync): {exc}",
        )
    if policy == "static":
        return (
            "KubeletCPUManagerStatic",
            "the kubelet's CPU manager policy is static: it owns the cpusets, "
            "numatopo does not write them on this node",
        )
    return AGENT_ENFORCING, "numatopo-agent writes the cpusets of assigned pods"


def gpu_mode(
    *, steered: bool, follows: bool, unverified: str, dra_gpus: bool = False
) -> tuple[GpuMode, str, str]:
    """(mode, reason, message) of the node's GPU guarantee: Allocated where the node's GPUs are DRA
    devices (`status.dra`), Steered while the steering plugin is registered, Followed while
    PodResources is read, else none (`unverified` says why)."""
    if dra_gpus:
        return (
            GpuMode.ALLOCATED,
            "Allocated",
            "the node's GPUs are DRA devices (status.dra): a container holds its "
            "ResourceClaims' devices, which numatopo allocates for the pods it decides",
        )
    if steered:
        return (
            GpuMode.STEERED,
            "Steered",
            "the kubelet is given numatopo's GPUs (steering device plugin registered); "
            "what it gave is still read back and followed",
        )
    if follows:
        return (
            GpuMode.FOLLOWED,
            "Followed",
            "the kubelet picks GPUs; numatopo reads what it gave (PodResources) and "
            "re-aligns CPUs and memory to them",
        )
    return (GpuMode.NONE, "Unverified", "GPUs in assignments are not verified: " + unverified)


@dataclass
class NodeStatus:
    client: KubeClient
    node_name: str
    kubelet_state: Path | None
    events: EventPosts
    _published: tuple[object, ...] | None = field(default=None, init=False)
    """The last node status applied (Enforcing verdict, GPU mode and its message)."""

    async def stand_aside(
        self, mode: tuple[GpuMode, str, str], unhealthy: UnhealthyDevices | None, now: float
    ) -> bool:
        """Whether to stand aside this pass: the kubelet's CPU manager is static, or its state
        cannot be read. Reported with the node's GPU `mode` (conditions, `gpuMode`) when either
        changes; a Node Event when the agent stands aside."""
        verdict = kubelet_verdict(self.kubelet_state)
        static = verdict[0] != AGENT_ENFORCING
        published = (verdict, mode, unhealthy)
        if published == self._published:
            return static
        announce = self._published is None or verdict != self._published[0]
        self._published = published
        if not await self._apply(verdict, mode, unhealthy, now_text(now)):
            self._published = None  # try again next time
        if static and announce:
            node = {"apiVersion": "v1", "kind": "Node", "name": self.node_name}
            self.events.post(node, reason=verdict[0], message=verdict[1], warning=True)
        return static

    async def _apply(
        self,
        verdict: tuple[str, str],
        mode: tuple[GpuMode, str, str],
        unhealthy: UnhealthyDevices | None,
        now: str,
    ) -> bool:
        """Apply the status; False when it should be tried again."""
        conditions = [
            {
                "type": kind,
                "status": "True" if holds else "False",
                "reason": reason,
                "message": message,
                "lastTransitionTime": now,
            }
            for kind, holds, (reason, message) in (
                (ENFORCING, verdict[0] == AGENT_ENFORCING, verdict),
                (GPU_ASSIGNMENT, mode[0] is not GpuMode.NONE, mode[1:]),
            )
        ]
        status: dict[str, object] = {"conditions": conditions, "gpuMode": mode[0].value}
        if unhealthy is not None:
            status["unhealthy"] = unhealthy.to_wire()
        try:
            # Our own fields under our own field manager, all in one apply (an apply drops what
            # the same manager applied before and left out); the exporter's conditions in the
            # same list are merged by type, never touched.
            await self.client.apply_numatopology_status(
                self.node_name, status, field_manager=COMPONENT
            )
        except KubeError as exc:
            # Absent (the exporter has not created it yet): nothing to report on, as before.
            if not exc.not_found:
                logger.warning("reporting the %s condition: %s", ENFORCING, exc)
                return False
        return True
