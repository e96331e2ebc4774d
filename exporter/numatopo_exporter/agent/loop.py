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

from pydantic import ValidationError

from numatopo_engine.annotations import OBSERVED, Assignment, Observed
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.dra.pods import devices_from_claims
from numatopo_engine.model import GpuMode, NumatopologySpec, UnhealthyDevices
from numatopo_engine.resources import ResourceNames
from numatopo_engine.signing import Verifier
from numatopo_exporter.agent import cgroupfs, feedback, follow, health, planning, pods
from numatopo_exporter.agent.metrics import AgentMetrics
from numatopo_exporter.agent.pod_resources import (
    Holdings,
    PodResourcesError,
    list_allocatable,
    list_holdings,
)
from numatopo_exporter.daemon.backoff import Backoff
from numatopo_exporter.discovery import kubelet
from numatopo_exporter.discovery.errors import DiscoveryError
from numatopo_exporter.steering.choice import InFlight
from numatopo_kube import KubeClient, KubeError

__all__ = ["COMPONENT", "ENFORCING", "AgentLoop"]

COMPONENT = "numatopo-agent"
ENFORCING = "Enforcing"
AGENT_ENFORCING = "AgentEnforcing"
GPU_ASSIGNMENT = "GPUAssignment"
GPU_MISMATCH = "GPUMismatch"
GPUS_UNVERIFIED = "GPUsUnverified"
# Reasons that are their own Event reason (others are announced as EnforcementFailed).
_EVENT_REASONS = frozenset({GPU_MISMATCH, GPUS_UNVERIFIED})

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
    """The kubelet's PodResources socket (Follow); None: GPUs are not checked, and
    pods holding GPUs are never reported `Aligned`."""
    resources: ResourceNames = field(default_factory=ResourceNames)
    """Which extended resources are GPUs (patterns, as the operator's `--gpu-resource`)."""
    steered: Callable[[], bool] | None = None
    """Whether the steering device plugin is registered with the kubelet (Steer)."""
    verifier: Verifier = field(default_factory=Verifier)
    """The operator's public keys: only assignments they verify are enforced or steered
    to. The default trusts none (nothing is enforced)."""
    spec_refresh_seconds: float = 300.0
    """Read the node's Numatopology spec (to name the kubelet's device IDs) at least this
    often; also whenever the kubelet's allocatable devices change."""

    in_flight: tuple[InFlight, ...] = field(default=(), init=False)
    """Containers assigned GPUs the kubelet has not given yet, for the steering plugin's
    answer: replaced whole (never changed in place) on every pod event and pass, since
    the steering plugin reads it from another thread."""

    pod_cache: dict[str, dict[str, Any]] = field(default_factory=dict, init=False)
    """This node's pods by UID, as the watch last showed them."""
    synced: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _first_seen: dict[tuple[str, str], float] = field(default_factory=dict, init=False)
    _enforced: dict[str, _Enforced] = field(default_factory=dict, init=False)
    _reported: dict[str, tuple[str, str]] = field(default_factory=dict, init=False)
    _standing_aside: tuple[str, str] | None = field(default=None, init=False)
    """The last (reason, message) reported in the `Enforcing` condition."""
    _published: tuple[object, ...] | None = field(default=None, init=False)
    """The last node status applied (Enforcing verdict, GPU mode and its message)."""
    _holdings_error: str | None = field(default=None, init=False)
    _dra_gpus: bool = field(default=False, init=False)  # status.dra lists the node's GPUs
    _last_holdings: Holdings = field(default_factory=dict, init=False)
    _gpu_claims: dict[str, tuple[str, str, tuple[InFlight, ...]]] = field(
        default_factory=dict, init=False
    )
    """Pod uid -> (its assignment annotation, phase, its GPU containers)."""
    _mismatches: dict[str, int] = field(default_factory=dict, init=False)
    """Pod uid -> the assignment sequence whose GPU mismatch was counted."""
    unhealthy: UnhealthyDevices | None = field(default=None, init=False)
    """The devices the kubelet cannot hand out (`status.unhealthy`); None until known.
    Kept while PodResources or the Numatopology cannot be read."""
    _spec: tuple[NumatopologySpec, float, dict[str, set[str]]] | None = field(
        default=None, init=False
    )
    """The node's spec, when it was read, and the allocatable listing it was read for."""

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

    def handle_event(self, event_type: str, pod: dict[str, Any]) -> bool:
        """Take one watch event into the pod cache; whether it changed anything."""
        if event_type == "DELETED":
            self.pod_cache.pop(str(pod.get("metadata", {}).get("uid")), None)
        elif event_type in ("ADDED", "MODIFIED"):
            self._remember(pod)
        else:
            return False
        uid = str(pod.get("metadata", {}).get("uid"))
        if self._update_claims(uid, self.pod_cache.get(uid)):
            self._refresh_in_flight()
        return True

    def _update_claims(self, uid: str, pod: dict[str, Any] | None) -> bool:
        """Keep `_gpu_claims` (the pod's GPU containers) in step with the cache; whether
        they changed. An assignment is parsed once per distinct annotation."""
        annotation = _annotations(pod).get(feedback.ASSIGNMENT_KEY) if pod is not None else None
        known = self._gpu_claims.get(uid)
        if pod is None or annotation is None:
            return self._gpu_claims.pop(uid, None) is not None
        if known is not None and known[0] == annotation and known[1] == _phase(pod):
            return False
        claims = follow.in_flight([pod], self.node_name, self.resources.is_gpu)
        if claims and self._unsigned(pod, annotation):
            claims = []  # steering the kubelet by a forged assignment would hand out GPUs
        self._gpu_claims[uid] = (annotation, _phase(pod), tuple(claims))
        return bool(claims) or bool(known and known[2])

    def _unsigned(self, pod: dict[str, Any], annotation: str) -> bool:
        try:
            assignment = Assignment.model_validate_json(annotation)
        except ValidationError:
            return True
        return bool(pods.unsigned(pod, assignment, self.verifier))

    def _refresh_in_flight(self, holdings: Holdings | None = None) -> None:
        """Publish `in_flight`: the GPU containers of the cache that PodResources did not
        list with devices yet."""
        if holdings is not None:
            self._last_holdings = holdings
        held = self._last_holdings

        def holds_devices(claim: InFlight) -> bool:
            namespace, _, name = claim.pod_key.partition("/")
            return any((held.get((namespace, name)) or {}).get(claim.container, {}).values())

        self.in_flight = tuple(
            claim
            for _, _, claims in self._gpu_claims.values()
            for claim in claims
            if not holds_devices(claim)
        )

    def forget_departed(self) -> None:
        """Drop what is remembered about pods that left, and about assignments a pod no
        longer has: every map below is bounded by the pods on this node."""
        live = self.pod_cache
        for memo in (self._enforced, self._reported, self._mismatches, self._gpu_claims):
            for uid in [u for u in memo if u not in live]:
                del memo[uid]
        current = {
            (uid, annotation)
            for uid, pod in live.items()
            if (annotation := _annotations(pod).get(feedback.ASSIGNMENT_KEY)) is not None
        }
        for key in [k for k in self._first_seen if k not in current]:
            del self._first_seen[key]

    async def watch_pods(self) -> None:
        """List, then watch, this node's pods; relist after any error. Runs until cancelled."""
        selector = {"spec.nodeName": self.node_name}
        while True:
            try:
                listing = await self.client.list_pods(field_selector=selector)
                self.backoff.reset()
                self.pod_cache.clear()
                for pod in listing.items:
                    self._remember(pod)
                self._gpu_claims = {
                    uid: claim for uid, claim in self._gpu_claims.items() if uid in self.pod_cache
                }
                for uid, cached in self.pod_cache.items():
                    self._update_claims(uid, cached)
                self._refresh_in_flight()
                self.synced.set()
                self._wake.set()
                async for event in self.client.watch_pods(
                    field_selector=selector, resource_version=listing.resource_version
                ):
                    self.backoff.reset()
                    if self.handle_event(event.type, event.object):
                        self._wake.set()
            except KubeError as exc:
                logger.warning("watching pods on %s: %s", self.node_name, exc)
            await self._wait_for_api(self.backoff.next_delay(), selector=selector)

    async def _wait_for_api(self, seconds: float, *, selector: dict[str, str]) -> None:
        """Sleep up to `seconds` (the backoff), but end as soon as a cheap probe (a list
        of at most one of this node's pods) succeeds: after an outage the agent is back
        within `probe_seconds`, not after the next backoff step (up to a minute)."""
        deadline = asyncio.get_running_loop().time() + seconds
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            await asyncio.sleep(min(self.probe_seconds, left))
            try:
                await self.client.probe_pods(field_selector=selector)
            except KubeError:
                continue
            self.backoff.reset()
            return

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
        """One pass: stand aside for a static (or unknown) kubelet, else plan, write,
        verify, report."""
        try:
            await self._reconcile()
        finally:
            self.forget_departed()

    async def _reconcile(self) -> None:
        holdings = await self._read_holdings()
        self._refresh_in_flight(holdings)
        if holdings is not None:
            await self._read_health()
        if await self._kubelet_is_static(holdings is not None):
            return
        try:
            hierarchy = cgroupfs.detect_hierarchy(self.cgroup_root)
            online = hierarchy.online()
        except cgroupfs.CgroupError as exc:
            logger.error("%s", exc)
            self.metrics.failures.labels(reason="NoCgroupHierarchy").inc()
            return
        accepted, refused = pods.select_assignments(
            list(self.pod_cache.values()),
            node_name=self.node_name,
            online=online,
            verifier=self.verifier,
        )
        outcomes = {entry.uid: self._locate(hierarchy, entry) for entry in accepted}
        for entry in accepted:
            await self._follow(entry, holdings, outcomes[entry.uid])
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
            observed = self._observe(hierarchy, containers, write_errors)
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
        gone: set[PurePosixPath] = set()
        for write in writes:
            if any(g == write.path or g in write.path.parents for g in gone):
                continue
            try:
                hierarchy.write(write)
                self.metrics.writes.inc()
                logger.info("wrote %s", write)
            except cgroupfs.CgroupGoneError:
                # The container exited mid-pass: nothing to enforce, nothing to report.
                logger.debug("%s: gone before the write", write.path)
                gone.add(write.path)
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

    # -- Follow: the GPUs the kubelet really gave -------------------------------------

    async def _read_holdings(self) -> Holdings | None:
        """What PodResources lists now; None when Follow is off or the API unreadable
        (logged when that changes)."""
        if self.pod_resources_socket is None:
            return None
        try:
            holdings = await list_holdings(self.pod_resources_socket)
        except PodResourcesError as exc:
            if self._holdings_error != str(exc):
                logger.warning("cannot verify GPUs: %s", exc)
            self._holdings_error = str(exc)
            return None
        if self._holdings_error is not None:
            logger.info("PodResources readable again at %s", self.pod_resources_socket)
        self._holdings_error = None
        return holdings

    async def _read_health(self) -> None:
        """`unhealthy`: the node's devices the kubelet does not list as allocatable."""
        assert self.pod_resources_socket is not None
        try:
            allocatable = await list_allocatable(self.pod_resources_socket)
        except PodResourcesError as exc:
            logger.warning("cannot read the kubelet's allocatable devices: %s", exc)
            return
        known = self._spec
        if (
            known is None
            or known[2] != allocatable
            or (self.clock() - known[1] >= self.spec_refresh_seconds)
        ):
            try:
                body = await self.client.get_numatopology(self.node_name)
                spec = NumatopologySpec.model_validate((body or {}).get("spec") or {})
            except (KubeError, ValidationError) as exc:
                logger.warning("reading Numatopology/%s: %s", self.node_name, exc)
                return
            if body is None:
                return  # the exporter has not published it yet
            dra = ((body.get("status") or {}).get("dra") or {}).get("devices") or []
            self._dra_gpus = any(d.get("gpu") is not None for d in dra)
            known = self._spec = (spec, self.clock(), allocatable)
        found = health.unhealthy_devices(known[0], allocatable)
        if found != self.unhealthy:
            logger.info(
                "devices the kubelet cannot hand out: GPUs %s, NICs %s", found.gpus, found.nics
            )
        self.unhealthy = found

    async def _follow(
        self, entry: pods.PodAssignment, holdings: Holdings | None, outcome: _PodOutcome
    ) -> None:
        """Record what the pod's containers hold (`numatopo.io/observed`) and hold back
        `Aligned` while its GPUs are not the assigned ones, or cannot be known."""
        assignment = entry.assignment
        resources = self.resources
        if devices_from_claims(entry.body, lambda r: resources.is_gpu(r) or resources.is_nic(r)):
            return  # Allocated: the claims hold the assigned devices, no plugin gave any
        with_gpus = any(
            c.gpus or c.gpu_indices or c.mig or c.mig_indices
            for c in assignment.containers.values()
        )
        if not with_gpus and not any(c.nics for c in assignment.containers.values()):
            return
        if holdings is None:
            if not with_gpus:
                return  # NICs alone are followed where PodResources is read, not required

            outcome.problems.append(
                "the GPUs this pod holds cannot be verified: "
                + (self._holdings_error or "Follow is off (no PodResources socket)")
            )
            outcome.reason = outcome.reason or GPUS_UNVERIFIED
            return
        meta = entry.body.get("metadata") or {}
        held = holdings.get((str(meta.get("namespace", "")), str(meta.get("name", ""))))
        observed = follow.observe(
            assignment,
            held,
            containers=follow.running_container_names(entry.body),
            is_gpu=self.resources.is_gpu,
            is_nic=self.resources.is_nic,
            nics=self._spec[0].nics if self._spec is not None else (),
        )
        if observed is None:
            outcome.pending = True  # not admitted yet: reported once the kubelet has chosen
            return
        if _observed_of(entry.body) != observed:
            try:
                await self.client.patch_pod_annotations(
                    str(meta.get("namespace")),
                    str(meta.get("name")),
                    {OBSERVED: observed.to_annotation()},
                )
            except KubeError as exc:
                logger.warning("writing %s of %s: %s", OBSERVED, entry.key, exc)
        if observed.mismatched:
            words = follow.gpu_words(
                observed, assignment, self.resources.is_gpu, self.resources.is_nic
            )
            if self._mismatches.get(entry.uid) != assignment.seq:
                self._mismatches[entry.uid] = assignment.seq
                self.metrics.gpu_mismatches.inc()
                logger.warning("%s: %s", entry.key, words)
            outcome.problems.append(
                f"{words}; the operator re-aligns CPUs and memory to the GPUs held"
            )
            outcome.reason = GPU_MISMATCH

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
        self,
        hierarchy: cgroupfs.Hierarchy,
        containers: list[PurePosixPath],
        errors: dict[PurePosixPath, str],
    ) -> dict[PurePosixPath, planning.Cpuset]:
        """What each container cgroup, its ancestors and the cgroups nested in it have.

        A container whose cgroup (or a nested one) vanished while being read is left
        out: it exited, and its replacement comes with a pod event. One that cannot be
        read is left out too, with the error in `errors` for its pod's report; an
        unreadable ancestor raises (nothing under it can be planned).
        """
        observed: dict[PurePosixPath, planning.Cpuset] = {}
        for path in containers:
            found: dict[PurePosixPath, planning.Cpuset] = {}
            try:
                for cgroup in hierarchy.ancestors(path):
                    if cgroup not in observed:
                        found[cgroup] = hierarchy.read(cgroup)
                try:
                    for cgroup in [path, *hierarchy.descendants(path)]:
                        found[cgroup] = hierarchy.read(cgroup)
                except cgroupfs.CgroupGoneError:
                    raise
                except cgroupfs.CgroupError as exc:
                    errors[path] = str(exc)
                    continue
            except cgroupfs.CgroupGoneError:
                continue
            observed.update(found)
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
        # A failed write belongs to the pod whose container (or a cgroup nested in it)
        # it was for. A failed widening of a shared ancestor (kubepods, a QoS tier) is
        # nobody's in particular: the pods that needed it fail their own writes next.
        for path in outcome.paths:
            for failed, message in sorted(write_errors.items()):
                if failed == path or path in failed.parents:
                    problems.append(message)
                    reason = reason or "CpusetWriteFailed"
        applied: dict[PurePosixPath, planning.Cpuset] = {}
        if not problems:
            # Verify against what was planned (a NUMA-pool container is cut to the
            # shared pool), reading the files back rather than trusting the writes.
            for path in outcome.paths:
                target = desired.get(path, outcome.paths[path])
                try:
                    now_has = hierarchy.read(path)
                except cgroupfs.CgroupGoneError:
                    outcome.pending = True  # exited mid-pass; its restart is an event
                    continue
                except cgroupfs.CgroupError as exc:
                    problems.append(str(exc))
                    continue
                applied[path] = now_has
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

        # A recovered pod's next failure is news again, even for the same reason.
        self._reported.pop(entry.uid, None)
        ids = frozenset(str(c.container_id) for c in entry.running)
        previous = self._enforced.get(entry.uid)
        self._enforced[entry.uid] = _Enforced(entry.annotation, ids)
        # What the kernel now has (read back), not what the assignment says: a
        # NUMA-pool container runs on that node's shared CPUs only.
        summary = ", ".join(
            f"{_container_of(entry, p)}: cpus {c.cpus or '-'} mems {c.mems or '-'}"
            for p, c in sorted(applied.items())
        )
        touched = any(p in written for p in outcome.paths)
        event: tuple[str, str] | None = None
        if previous is None and feedback.already_enforced(entry.body, message=summary):
            # Enforced and reported before this agent (re)started: only a drift is news.
            if touched:
                self.metrics.drift_corrections.inc()
                event = ("DriftCorrected", f"cpusets had been changed; restored ({summary})")
        elif previous is None or previous.annotation != entry.annotation:
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
        self._enforced.pop(refusal.uid, None)
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
        now = _now_text(self.clock())
        status_patch, meta_patch = feedback.plan_pod_patches(
            pod, aligned=aligned, reason=reason, message=message, now=now
        )
        meta = pod.get("metadata", {})
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        if not aligned and status_patch is not None:
            uid = str(meta.get("uid"))
            if self._reported.get(uid, ("", ""))[0] != reason:
                self._reported[uid] = (reason, "")
                event = reason if reason in _EVENT_REASONS else "EnforcementFailed"
                await self._event(pod, event, message, warning=True)
        try:
            if status_patch is not None:
                await self._patch_condition(
                    pod, status_patch, aligned=aligned, reason=reason, message=message, now=now
                )
            if meta_patch is not None:
                await self.client.patch_pod_annotations(
                    namespace, name, meta_patch["metadata"]["annotations"]
                )
        except KubeError as exc:
            logger.warning("reporting to pod %s/%s: %s", namespace, name, exc)

    async def _patch_condition(
        self,
        pod: dict[str, Any],
        patch: feedback.StatusPatch,
        *,
        aligned: bool,
        reason: str,
        message: str,
        now: str,
    ) -> None:
        """Write the `Aligned` condition; when the patch no longer fits the pod (its
        conditions moved since the cached copy), plan it again on a fresh copy, once."""
        meta = pod.get("metadata", {})
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        try:
            await self.client.patch_pod_status(
                namespace, name, patch.body, content_type=patch.content_type
            )
            return
        except KubeError as exc:
            # A failed `test` is 422 on a real API server and 500 on the emulator; either
            # way a fresh copy settles it. Unreachable or gone: nothing to retry on.
            if exc.not_found or exc.status == 0:
                raise
        fresh = await self.client.get_pod_status(namespace, name)
        condition = feedback.plan_condition(
            fresh, aligned=aligned, reason=reason, message=message, now=now
        )
        if condition is not None:
            again = feedback.plan_status_patch(condition, fresh)
            await self.client.patch_pod_status(
                namespace, name, again.body, content_type=again.content_type
            )

    async def _event(
        self, regarding: dict[str, Any], reason: str, message: str, *, warning: bool = False
    ) -> None:
        await self.client.post_event(
            _about(regarding, kind="Pod"), reason=reason, message=message, warning=warning
        )

    # -- the kubelet's CPU manager --------------------------------------------------------

    def _kubelet_verdict(self) -> tuple[str, str]:
        """(reason, message) of the `Enforcing` condition, from the kubelet's checkpoint.

        A static kubelet writes exclusive cpusets itself and rewrites them on every
        reconcile (10 s): two writers would fight forever, so the agent stands aside.
        """
        if self.kubelet_state is None:
            return AGENT_ENFORCING, "numatopo-agent writes the cpusets of assigned pods"
        try:
            policy = kubelet.read_cpu_manager_policy(self.kubelet_state)
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

    def _gpu_mode(self, follows: bool) -> tuple[GpuMode, str, str]:
        """(mode, reason, message) of the node's GPU guarantee this pass."""
        if self._dra_gpus:
            return (
                GpuMode.ALLOCATED,
                "Allocated",
                "the node's GPUs are DRA devices (status.dra): a container holds its "
                "ResourceClaims' devices, which numatopo allocates for the pods it decides",
            )
        if self.steered is not None and self.steered():
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
        return (
            GpuMode.NONE,
            "Unverified",
            "GPUs in assignments are not verified: "
            + (self._holdings_error or "Follow is off (no PodResources socket)"),
        )

    async def _kubelet_is_static(self, follows: bool = False) -> bool:
        """Whether to stand aside this pass: the kubelet's CPU manager is static, or its
        state cannot be read. Reported with the node's GPU mode (conditions, `gpuMode`)
        when either changes; a Node Event when the agent stands aside."""
        verdict = self._kubelet_verdict()
        static = verdict[0] != AGENT_ENFORCING
        mode = self._gpu_mode(follows)
        published = (verdict, mode, self.unhealthy)
        if published == self._published:
            return static
        announce = verdict != self._standing_aside
        self._standing_aside = verdict
        self._published = published
        now = _now_text(self.clock())
        conditions = [
            {
                "type": ENFORCING,
                "status": "False" if static else "True",
                "reason": verdict[0],
                "message": verdict[1],
                "lastTransitionTime": now,
            },
            {
                "type": GPU_ASSIGNMENT,
                "status": "False" if mode[0] is GpuMode.NONE else "True",
                "reason": mode[1],
                "message": mode[2],
                "lastTransitionTime": now,
            },
        ]
        status: dict[str, object] = {"conditions": conditions, "gpuMode": mode[0].value}
        if self.unhealthy is not None:
            status["unhealthy"] = self.unhealthy.to_wire()
        try:
            # Only our own fields, under our own field manager, all in one apply (an
            # apply drops what the same manager applied before and left out): the
            # exporter's conditions in the same list are merged by type, never touched.
            await self.client.apply_numatopology_status(
                self.node_name, status, field_manager=COMPONENT
            )
        except KubeError as exc:
            # Absent (the exporter has not created it yet): nothing to report on, as before.
            if not exc.not_found:
                logger.warning("reporting the %s condition: %s", ENFORCING, exc)
                self._standing_aside = None  # try again next time
                self._published = None
        if static and announce:
            node = {"apiVersion": "v1", "kind": "Node", "name": self.node_name}
            await self.client.post_event(node, reason=verdict[0], message=verdict[1], warning=True)
        return static


def _about(regarding: dict[str, Any], *, kind: str) -> dict[str, str]:
    """What an Event is about (`KubeClient.post_event`), from the object's body."""
    meta = regarding.get("metadata") or {}
    return {
        "apiVersion": str(regarding.get("apiVersion") or "v1"),
        "kind": str(regarding.get("kind") or kind),
        "namespace": str(meta.get("namespace") or ""),
        "name": str(meta.get("name") or ""),
        "uid": str(meta.get("uid") or ""),
    }


def _observed_of(pod: dict[str, Any]) -> Observed | None:
    text = _annotations(pod).get(OBSERVED)
    if text is None:
        return None
    try:
        return Observed.model_validate_json(text)
    except ValidationError:
        return None  # rewritten with what is held now


def _phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _annotations(pod: dict[str, Any]) -> dict[str, str]:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return annotations if isinstance(annotations, dict) else {}


def _container_of(entry: pods.PodAssignment, path: PurePosixPath) -> str:
    """The container name whose running id names the cgroup `path` ('' if none)."""
    for container in entry.running:
        if container.container_id.id in path.name:
            return container.name
    return ""
