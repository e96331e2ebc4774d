"""The agent loop: list+watch this node's pods, reconcile cpusets, report (I/O).

Reconcile runs on every pod event (an assignment appears, a container restarts with a
new id, a pod ends) and every `resync_seconds` (someone rewrote a cpuset: drift). Each
run reads the cgroups afresh, so a restart of the agent loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from numatopo_engine.cpuset import CPUSet
from numatopo_exporter import kube
from numatopo_exporter.agent import cgroupfs, feedback, kubelet, planning, pods
from numatopo_exporter.agent.metrics import AgentMetrics
from numatopo_exporter.daemon.backoff import Backoff

__all__ = ["COMPONENT", "ENFORCING", "AgentLoop"]

COMPONENT = "numatopo-agent"
ENFORCING = "Enforcing"

logger = logging.getLogger("numatopo.agent")


@dataclass(frozen=True)
class _Enforced:
    annotation: str
    container_ids: frozenset[str]


@dataclass
class _PodOutcome:
    paths: dict[PurePosixPath, planning.Target] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    reason: str = ""
    pending: bool = False


def _now_text(now: float) -> str:
    return datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class AgentLoop:
    client: kube.KubeClient
    node_name: str
    cgroup_root: Path
    kubelet_state: Path | None = kubelet.DEFAULT_STATE_FILE
    metrics: AgentMetrics = field(default_factory=AgentMetrics)
    resync_seconds: float = 10.0
    """Drift check period; the kubelet reconciles its own cpusets every 10 s too."""
    backoff: Backoff = field(default_factory=Backoff)
    clock: Callable[[], float] = time.time

    pod_cache: dict[str, dict[str, Any]] = field(default_factory=dict, init=False)
    """This node's pods by UID, as the watch last showed them."""
    synced: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _first_seen: dict[tuple[str, str], float] = field(default_factory=dict, init=False)
    _enforced: dict[str, _Enforced] = field(default_factory=dict, init=False)
    _reported: dict[str, tuple[str, str]] = field(default_factory=dict, init=False)
    _standing_aside: bool | None = field(default=None, init=False)

    # -- the pod cache -----------------------------------------------------------------

    def _remember(self, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata", {})
        if (pod.get("spec") or {}).get("nodeName") != self.node_name:
            # Servers that ignore the field selector send every pod of the cluster.
            self.pod_cache.pop(str(meta.get("uid")), None)
            return
        self.pod_cache[str(meta.get("uid"))] = pod
        annotation = (meta.get("annotations") or {}).get(feedback.ASSIGNMENT_KEY)
        if annotation is not None:
            self._first_seen.setdefault((str(meta.get("uid")), annotation), self.clock())

    async def watch_pods(self) -> None:
        """List, then watch, this node's pods; relist after any error. Runs until cancelled."""
        params = {"fieldSelector": f"spec.nodeName={self.node_name}"}
        while True:
            try:
                listing = await self.client.get("/api/v1/pods", params=params)
                self.pod_cache.clear()
                for pod in listing.get("items") or []:
                    self._remember(pod)
                self.synced.set()
                self._wake.set()
                version = (listing.get("metadata") or {}).get("resourceVersion")
                watch_params = {**params, "resourceVersion": version} if version else params
                async for event in self.client.watch("/api/v1/pods", params=watch_params):
                    self.backoff.reset()
                    if event.type == "DELETED":
                        self.pod_cache.pop(str(event.object.get("metadata", {}).get("uid")), None)
                    elif event.type in ("ADDED", "MODIFIED"):
                        self._remember(event.object)
                    else:
                        continue
                    self._wake.set()
            except kube.ApiError as exc:
                logger.warning("watching pods on %s: %s", self.node_name, exc)
            await asyncio.sleep(self.backoff.next_delay())

    async def run(self) -> None:
        watcher = asyncio.create_task(self.watch_pods())
        try:
            await self.synced.wait()
            while True:
                self._wake.clear()
                await self.reconcile()
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a
                # cancellation that races with its timeout, and the loop never ends.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.resync_seconds):
                        await self._wake.wait()
        finally:
            # Awaited, so that the watch connection is closed before the caller's session.
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    # -- reconciling ---------------------------------------------------------------------

    async def reconcile(self) -> None:
        """One pass: stand aside for a static kubelet, else plan, write, verify, report."""
        if await self._kubelet_is_static():
            return
        try:
            hierarchy = cgroupfs.detect_hierarchy(self.cgroup_root)
            online = hierarchy.online()
        except cgroupfs.CgroupError as exc:
            logger.error("%s", exc)
            self.metrics.failures.labels(reason="NoCgroupHierarchy").inc()
            return
        accepted, refused = pods.select_assignments(
            list(self.pod_cache.values()), node_name=self.node_name, online=online.cpus
        )
        outcomes = {entry.uid: self._locate(hierarchy, entry) for entry in accepted}
        exclusive_targets: dict[PurePosixPath, planning.Target] = {}
        numa_targets: dict[PurePosixPath, planning.Target] = {}
        exclusive = CPUSet()
        for entry in accepted:
            for name, container in entry.assignment.containers.items():
                if container.exclusive:
                    exclusive = exclusive | container.cpus
                target_map = exclusive_targets if container.exclusive else numa_targets
                for path in outcomes[entry.uid].paths:
                    if path.name and _container_of(entry, path) == name:
                        target_map[path] = outcomes[entry.uid].paths[path]

        write_errors: dict[PurePosixPath, str] = {}
        desired: dict[PurePosixPath, planning.Target] = {}
        try:
            containers = [c.path for c in hierarchy.list_containers()]
            observed = self._observe(hierarchy, containers)
            containers = [c for c in containers if c in observed]
            desired = planning.desire_cpusets(
                online=online,
                containers=containers,
                exclusive_targets=exclusive_targets,
                numa_targets=numa_targets,
                exclusive=exclusive,
                observed=observed,
            )
            writes = planning.plan_writes(desired, observed)
        except (planning.PlanError, cgroupfs.CgroupError) as exc:
            logger.error("cannot plan cpusets: %s", exc)
            writes = []
            for outcome in outcomes.values():
                outcome.problems.append(str(exc))
                outcome.reason = outcome.reason or "PlanRefused"
        for write in writes:
            try:
                hierarchy.write(write)
                self.metrics.writes.inc()
                logger.info("wrote %s", write)
            except cgroupfs.CgroupError as exc:
                logger.error("%s", exc)
                write_errors[write.path] = str(exc)
        written = {w.path for w in writes}

        for entry in accepted:
            await self._report(
                hierarchy,
                entry,
                outcomes[entry.uid],
                desired=desired,
                written=written,
                write_errors=write_errors,
            )
        for refusal in refused:
            await self._report_refusal(refusal)
        live = set(self.pod_cache)
        for memo in (self._enforced, self._reported):
            for uid in [u for u in memo if u not in live]:
                del memo[uid]

    def _locate(self, hierarchy: cgroupfs.Hierarchy, entry: pods.PodAssignment) -> _PodOutcome:
        outcome = _PodOutcome()
        running = {c.name: c for c in entry.running}
        for name, container in sorted(entry.assignment.containers.items()):
            found = running.get(name)
            if found is None:
                outcome.pending = True  # not started yet; reported once it runs
                continue
            path = hierarchy.find_container(entry.uid, entry.qos, found.container_id)
            if path is None:
                outcome.problems.append(
                    f"no cgroup for container {name} ({found.container_id}) of pod {entry.uid} "
                    f"under {hierarchy.root} ({hierarchy.driver} driver, v{hierarchy.version})"
                )
                outcome.reason = "CgroupNotFound"
                continue
            outcome.paths[path] = planning.Target(
                cpus=container.cpus or None, mems=container.mems or None
            )
        return outcome

    def _observe(
        self, hierarchy: cgroupfs.Hierarchy, containers: list[PurePosixPath]
    ) -> dict[PurePosixPath, planning.Cpuset]:
        observed: dict[PurePosixPath, planning.Cpuset] = {}
        for path in containers:
            for cgroup in [*hierarchy.ancestors(path), path]:
                if cgroup in observed:
                    continue
                try:
                    observed[cgroup] = hierarchy.read(cgroup)
                except cgroupfs.CgroupError:
                    if cgroup != path:
                        raise
                    # The container exited between listing and reading: nothing to do.
        return observed

    async def _report(
        self,
        hierarchy: cgroupfs.Hierarchy,
        entry: pods.PodAssignment,
        outcome: _PodOutcome,
        *,
        desired: dict[PurePosixPath, planning.Target],
        written: set[PurePosixPath],
        write_errors: dict[PurePosixPath, str],
    ) -> None:
        problems = list(outcome.problems)
        reason = outcome.reason
        for path in outcome.paths:
            for failed, message in write_errors.items():
                if failed == path or failed in path.parents:
                    problems.append(message)
                    reason = reason or "CpusetWriteFailed"
        if not problems:
            # Verify against what was planned (a NUMA-pool container is cut to the
            # shared pool), reading the files back rather than trusting the writes.
            for path in outcome.paths:
                target = desired.get(path, outcome.paths[path])
                try:
                    now_has = hierarchy.read(path)
                except cgroupfs.CgroupError as exc:
                    problems.append(str(exc))
                    continue
                if (target.cpus is not None and now_has.cpus != target.cpus) or (
                    target.mems is not None and now_has.mems != target.mems
                ):
                    problems.append(
                        f"{path}: has cpus {now_has.cpus} mems {now_has.mems}, "
                        f"assigned cpus {target.cpus} mems {target.mems}"
                    )
            reason = "CpusetMismatch" if problems else ""
        if outcome.pending and not problems:
            return
        now = self.clock()
        if problems:
            self.metrics.failures.labels(reason=reason).inc()
            await self._feedback(
                entry.body, aligned=False, reason=reason, message="; ".join(problems)
            )
            self._enforced.pop(entry.uid, None)
            return

        ids = frozenset(str(c.container_id) for c in entry.running)
        previous = self._enforced.get(entry.uid)
        self._enforced[entry.uid] = _Enforced(entry.annotation, ids)
        summary = ", ".join(
            f"{_container_of(entry, p)}: cpus {t.cpus or '-'} mems {t.mems or '-'}"
            for p, t in sorted(outcome.paths.items())
        )
        touched = any(p in written for p in outcome.paths)
        event: tuple[str, str] | None = None
        if previous is None or previous.annotation != entry.annotation:
            if touched or previous is None:
                self.metrics.enforcements.inc()
                seen = self._first_seen.get((entry.uid, entry.annotation), now)
                self.metrics.latency.observe(max(0.0, now - seen))
                event = ("Enforced", f"cpusets applied ({summary})")
        elif previous.container_ids != ids:
            self.metrics.enforcements.inc()
            event = ("Reenforced", f"a container restarted; cpusets applied again ({summary})")
        elif touched:
            self.metrics.drift_corrections.inc()
            event = ("DriftCorrected", f"cpusets had been changed; restored ({summary})")
        if event is not None:
            await self._event(entry.body, *event)
        await self._feedback(entry.body, aligned=True, reason="CpusetsApplied", message=summary)

    async def _report_refusal(self, refusal: pods.Refusal) -> None:
        if self._reported.get(refusal.uid) != (refusal.reason, refusal.annotation):
            self._reported[refusal.uid] = (refusal.reason, refusal.annotation)
            self.metrics.failures.labels(reason=refusal.reason).inc()
            await self._event(refusal.body, refusal.reason, refusal.message, warning=True)
        await self._feedback(
            refusal.body, aligned=False, reason=refusal.reason, message=refusal.message
        )

    async def _feedback(
        self, pod: dict[str, Any], *, aligned: bool, reason: str, message: str
    ) -> None:
        status_patch, meta_patch = feedback.plan_pod_patches(
            pod, aligned=aligned, reason=reason, message=message, now=_now_text(self.clock())
        )
        meta = pod.get("metadata", {})
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        if not aligned and status_patch is not None:
            uid = str(meta.get("uid"))
            if self._reported.get(uid, ("", ""))[0] != reason:
                self._reported[uid] = (reason, "")
                await self._event(pod, "EnforcementFailed", message, warning=True)
        try:
            if status_patch is not None:
                await self.client.patch(
                    kube.pod_path(namespace, name, subresource="status"),
                    status_patch,
                    content_type=kube.STRATEGIC,
                )
            if meta_patch is not None:
                await self.client.patch(kube.pod_path(namespace, name), meta_patch)
        except kube.ApiError as exc:
            logger.warning("reporting to pod %s/%s: %s", namespace, name, exc)

    async def _event(
        self, regarding: dict[str, Any], reason: str, message: str, *, warning: bool = False
    ) -> None:
        body = {"apiVersion": "v1", "kind": "Pod", **regarding}
        await self.client.post_event(
            regarding=body,
            reason=reason,
            message=message,
            warning=warning,
            component=COMPONENT,
            host=self.node_name,
        )

    # -- the kubelet's CPU manager --------------------------------------------------------

    async def _kubelet_is_static(self) -> bool:
        policy = None
        if self.kubelet_state is not None:
            policy = kubelet.read_cpu_manager_policy(self.kubelet_state)
        static = policy == "static"
        if static == self._standing_aside:
            return static
        self._standing_aside = static
        path = kube.numatopology_path(self.node_name)
        condition = {
            "type": ENFORCING,
            "status": "False" if static else "True",
            "reason": "KubeletCPUManagerStatic" if static else "AgentEnforcing",
            "message": (
                "the kubelet's CPU manager policy is static: it owns the cpusets, "
                "numatopo does not write them on this node"
                if static
                else "numatopo-agent writes the cpusets of assigned pods"
            ),
            "lastTransitionTime": _now_text(self.clock()),
        }
        try:
            current = await self.client.get_optional(path)
            if current is not None:
                conditions = (current.get("status") or {}).get("conditions") or []
                kept = [c for c in conditions if c.get("type") != ENFORCING]
                await self.client.patch(
                    kube.numatopology_path(self.node_name, subresource="status"),
                    {"status": {"conditions": [*kept, condition]}},
                )
        except kube.ApiError as exc:
            logger.warning("reporting the %s condition: %s", ENFORCING, exc)
            self._standing_aside = None  # try again next time
        if static:
            node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node_name}}
            await self.client.post_event(
                regarding=node,
                reason="KubeletCPUManagerStatic",
                message=str(condition["message"]),
                warning=True,
                component=COMPONENT,
                host=self.node_name,
            )
        return static


def _container_of(entry: pods.PodAssignment, path: PurePosixPath) -> str:
    """The container name whose running id names the cgroup `path` ('' if none)."""
    for container in entry.running:
        if container.container_id.id in path.name:
            return container.name
    return ""
