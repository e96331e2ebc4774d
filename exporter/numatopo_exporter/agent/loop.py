"""The agent loop: watch this node's pods, enforce their cpusets, report (I/O).

A pass runs on every pod event (an assignment appears, a container restarts with a new id, a pod
ends) and every `resync_seconds` (someone rewrote a cpuset: drift). Each pass reads the cgroups
afresh, so a restart of the agent loses nothing. The parts it runs: docs/DESIGN.md, "Node agent
(enforcement)".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from numatopo_engine.resources import ResourceNames
from numatopo_engine.signing import Verifier
from numatopo_exporter.agent import cgroupfs, enforce
from numatopo_exporter.agent.devices import KubeletDevices
from numatopo_exporter.agent.node_status import NodeStatus, gpu_mode
from numatopo_exporter.agent.pod_records import PodRecords
from numatopo_exporter.agent.pods import select_assignments
from numatopo_exporter.agent.report import PodReporter
from numatopo_exporter.agent.watch import PodWatch
from numatopo_exporter.discovery import kubelet
from numatopo_exporter.metrics import AgentMetrics
from numatopo_exporter.node_process import watch_own_numatopology
from numatopo_kube import KubeClient
from numatopo_kube.backoff import Backoff
from numatopo_kube.event_posts import EventPosts
from numatopo_kube.supervise import keep_running

logger = logging.getLogger("numatopo.agent")

# Events waiting at most: each pod of a crowded node (the kubelet's 110 by default, a
# few hundred where raised) announced a few times over while the Events API is away.
EVENT_QUEUE_SIZE = 1_000
# One post at a time: a node makes a few Events a pass, and one poster posts them in the
# order they were made (a pod's failure before its recovery).
EVENT_POSTERS = 1


@dataclass
class AgentLoop:
    client: KubeClient
    node_name: str
    cgroup_root: Path
    kubelet_state: Path | None = kubelet.STATE_PATH
    metrics: AgentMetrics = field(default_factory=AgentMetrics)
    resync_seconds: float = 10.0
    """Drift check period; the kubelet reconciles its own cpusets every 10 s too."""
    backoff: Backoff = field(default_factory=Backoff)
    probe_seconds: float = 2.0
    """While backing off after an API error, probe this often, to be back promptly."""
    clock: Callable[[], float] = time.time
    pod_resources_socket: Path | None = None
    """The kubelet's PodResources socket (Follow); None: GPUs are not checked, and pods holding
    GPUs are never reported `Aligned`."""
    resources: ResourceNames = field(default_factory=ResourceNames)
    """Which extended resources are GPUs (patterns, as the operator's `--gpu-resource`)."""
    steered: Callable[[], bool] | None = None
    """Whether the steering device plugin is registered with the kubelet (Steer)."""
    verifier: Verifier = field(default_factory=Verifier)
    """The operator's public keys: only assignments they verify are enforced or steered to (by
    default none: nothing is enforced)."""
    spec_refresh_seconds: float = 300.0
    """Read the node's Numatopology spec (to name the kubelet's device IDs) at least this often,
    and whenever the kubelet's allocatable devices change."""

    pods: PodRecords = field(init=False)
    synced: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    devices: KubeletDevices = field(init=False)
    node_status: NodeStatus = field(init=False)
    reporter: PodReporter = field(init=False)
    events: EventPosts = field(init=False)
    """The pass's Events, posted beside it (`run`): an Events API that is slow or gone holds up
    no pod's cpusets or status."""
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    def __post_init__(self) -> None:
        self.pods = PodRecords(self.node_name, self.clock, self.resources.is_gpu, self.verifier)
        self.devices = KubeletDevices(
            self.client,
            self.node_name,
            self.pod_resources_socket,
            self.resources,
            self.metrics,
            self.clock,
            self.spec_refresh_seconds,
        )
        self.events = EventPosts(
            self.metrics.events_dropped.inc,
            size=EVENT_QUEUE_SIZE,
            posters=EVENT_POSTERS,
            metric="numatopo_agent_events_dropped_total",
            process="the agent",
            crashed=self.metrics.task_restarts.labels(task="events poster").inc,
        )
        self.node_status = NodeStatus(self.client, self.node_name, self.kubelet_state, self.events)
        self.reporter = PodReporter(self.client, self.pods, self.metrics, self.clock, self.events)

    async def watch_pods(self) -> None:
        """List, then watch, this node's pods; relist after any error. Runs until cancelled."""
        watch = PodWatch(
            self.client,
            self.node_name,
            self.pods,
            self.backoff,
            self.probe_seconds,
            synced=self.synced,
            changed=self._wake,
        )
        await watch.run()

    async def watch_numatopology(self) -> None:
        """Follow the node's own Numatopology: a new `status.dra` (or spec) wakes a pass at once
        (the periodic re-read in `read_health` stays, for a watch that is down)."""

        def seen(event_type: str, numatopology: Mapping[str, Any]) -> None:
            if event_type in ("ADDED", "MODIFIED") and self.devices.take_numatopology(numatopology):
                self._wake.set()

        again = replace(self.backoff)  # a fresh one (no attempts), configured alike
        await watch_own_numatopology(self.client, self.node_name, again, seen, logger)

    async def run(self) -> None:
        # A pass below that raises ends the process (the kubelet restarts the agent); a
        # watch would end alone, and the passes go on with what it last saw: it is run
        # again after an unexpected error (docs/operations.md, "Background tasks").
        watches = {"pod watch": self.watch_pods, "Numatopology watch": self.watch_numatopology}
        crashed = self.metrics.task_restarts.labels
        watchers = [
            asyncio.create_task(keep_running(n, loop, crashed=crashed(task=n).inc, log=logger))
            for n, loop in watches.items()
        ]
        watchers.append(asyncio.create_task(self.events.run(self.client)))
        try:
            await self.synced.wait()
            while True:
                self._wake.clear()
                await self.reconcile()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.resync_seconds):
                        await self._wake.wait()
        finally:
            # Awaited, so that the watch connections (and an Event's POST) are closed
            # before the caller's session.
            for watcher in watchers:
                watcher.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)

    async def reconcile(self) -> None:
        """One pass: stand aside for a static (or unknown) kubelet, else select, enforce, verify,
        report."""
        # Taken before the listing is asked for: only those pods' entries are surely theirs.
        listing = await self.devices.read_holdings(self.pods.admitted())
        self.pods.publish_in_flight(listing)
        if listing is not None:
            await self.devices.read_health()
        if await self.publish_node_status(follows=listing is not None):
            return
        try:
            hierarchy = cgroupfs.detect_hierarchy(self.cgroup_root)
            online = hierarchy.online()
        except cgroupfs.CgroupError as exc:
            logger.error("%s", exc)
            self.metrics.failures.labels(reason="NoCgroupHierarchy").inc()
            return
        accepted, refused = select_assignments(
            self.pods.views(),
            node_name=self.node_name,
            online=online,
            verifier=self.verifier,
            newest=self.pods.newest_seqs,
        )
        outcomes = {entry.uid: enforce.locate(hierarchy, entry) for entry in accepted}
        for entry in accepted:
            await self.devices.check(entry, listing, self.pods, outcomes[entry.uid])
        done = enforce.write_cpusets(hierarchy, online, accepted, outcomes, self.metrics)
        for entry in accepted:
            await self.reporter.report(hierarchy, entry, outcomes[entry.uid], done)
        for refusal in refused:
            await self.reporter.report_refusal(refusal)

    async def publish_node_status(self, *, follows: bool = False) -> bool:
        """Publish the node's Enforcing verdict and GPU mode (when they changed); whether the
        agent stands aside this pass."""
        mode = gpu_mode(
            steered=self.steered is not None and self.steered(),
            follows=follows,
            unverified=self.devices.why_unverified(),
            dra_gpus=self.devices.dra_gpus,
        )
        return await self.node_status.stand_aside(mode, self.devices.unhealthy, self.clock())
