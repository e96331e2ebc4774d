"""Report: verify each pod's cpusets by reading them back, and tell the pod (its `Aligned` condition
and state annotation) and the cluster (Events, queued to be posted off the pass; metrics). What was
enforced and announced is kept in the pod's record, so only news is an Event: a first enforcement,
a restart re-enforced, a drift corrected, a new failure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from numatopo_exporter.agent import cgroupfs, feedback, planning, pods
from numatopo_exporter.agent.devices import GPU_MISMATCH, GPUS_UNVERIFIED
from numatopo_exporter.agent.enforce import CgroupPass
from numatopo_exporter.agent.feedback import StatusPatch, now_text
from numatopo_exporter.agent.pod_records import Enforced, PodRecord, PodRecords
from numatopo_exporter.metrics import AgentMetrics
from numatopo_kube import KubeClient, KubeError, KubePodReplacedError
from numatopo_kube.event_posts import EventPosts

# Reasons that are their own Event reason (others are announced as EnforcementFailed).
_EVENT_REASONS = frozenset({GPU_MISMATCH, GPUS_UNVERIFIED})

logger = logging.getLogger("numatopo.agent")


@dataclass
class PodReporter:
    client: KubeClient
    records: PodRecords
    metrics: AgentMetrics
    clock: Callable[[], float]
    events: EventPosts

    async def report(
        self,
        hierarchy: cgroupfs.Hierarchy,
        entry: pods.PodAssignment,
        outcome: pods.PodOutcome,
        done: CgroupPass,
    ) -> None:
        problems, reason = self._write_problems(entry, outcome, done)
        applied: dict[PurePosixPath, planning.Cpuset] = {}
        if not problems:
            problems = self._read_back(hierarchy, outcome, done, applied)
            reason = "CpusetMismatch" if problems else ""
        if outcome.pending and not problems:
            return
        record = self.records.get(entry.uid)
        if problems:
            self.metrics.failures.labels(reason=reason).inc()
            await self.feedback(
                entry.body, aligned=False, reason=reason, message="; ".join(problems)
            )
            if record is not None:
                record.enforced = None
            return
        # What the kernel has (read back), not the assignment: a NUMA-pool container runs on its
        # node's shared CPUs only.
        summary = ", ".join(
            f"{entry.container_at(p)}: cpus {c.cpus or '-'} mems {c.mems or '-'}"
            for p, c in sorted(applied.items())
        )
        touched = any(p in done.written for p in outcome.paths)
        event = self._news(entry, record, summary, touched=touched)
        if event is not None:
            self.event(entry.body, *event)
        await self.feedback(entry.body, aligned=True, reason="CpusetsApplied", message=summary)

    @staticmethod
    def _write_problems(
        entry: pods.PodAssignment, outcome: pods.PodOutcome, done: CgroupPass
    ) -> tuple[list[str], str]:
        problems = list(outcome.problems)
        reason = outcome.reason
        # A failed write belongs to the pod whose container (or a cgroup nested in it)
        # it was for. A failed widening of a shared ancestor (kubepods, a QoS tier) is
        # nobody's in particular: the pods that needed it fail their own writes next.
        for path in outcome.paths:
            for failed, message in sorted(done.write_errors.items()):
                if failed == path or path in failed.parents:
                    problems.append(message)
                    reason = reason or "CpusetWriteFailed"
        return problems, reason

    @staticmethod
    def _read_back(
        hierarchy: cgroupfs.Hierarchy,
        outcome: pods.PodOutcome,
        done: CgroupPass,
        applied: dict[PurePosixPath, planning.Cpuset],
    ) -> list[str]:
        """Verify against what was planned (a NUMA-pool container is cut to the shared pool),
        reading the files back rather than trusting the writes."""
        problems: list[str] = []
        for path in outcome.paths:
            target = done.desired.get(path, outcome.paths[path])
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
        return problems

    def _news(
        self, entry: pods.PodAssignment, record: PodRecord | None, summary: str, *, touched: bool
    ) -> tuple[str, str] | None:
        """Remember the pod as enforced (in its `record`); the Event (reason, message) that says
        what is new, counted in the metrics, or None."""
        previous = record.enforced if record is not None else None
        ids = frozenset(str(c.container_id) for c in entry.running)
        if record is not None:
            # A recovered pod's next failure is news again, even for the same reason.
            record.reported = None
            record.enforced = Enforced(entry.annotation, ids)
        # Enforced and reported before this agent (re)started: only a drift is news.
        fresh = previous is None and not feedback.already_enforced(entry.body, message=summary)
        reassigned = previous is not None and previous.annotation != entry.annotation
        if fresh or (reassigned and touched):
            self.metrics.enforcements.inc()
            now = self.clock()
            seen = record.first_seen if record is not None else None
            self.metrics.latency.observe(max(0.0, now - (seen if seen is not None else now)))
            return ("Enforced", f"cpusets applied ({summary})")
        if reassigned:
            return None
        if previous is not None and previous.container_ids != ids:
            self.metrics.enforcements.inc()
            return ("Reenforced", f"a container restarted; cpusets applied again ({summary})")
        if touched:
            self.metrics.drift_corrections.inc()
            return ("DriftCorrected", f"cpusets had been changed; restored ({summary})")
        return None

    async def report_refusal(self, refusal: pods.Refusal) -> None:
        record = self.records.get(refusal.uid)
        announced = (refusal.reason, refusal.annotation)
        if record is None or record.reported != announced:
            self.metrics.failures.labels(reason=refusal.reason).inc()
            self.event(refusal.body, refusal.reason, refusal.message, warning=True)
        if record is not None:
            record.enforced = None
            record.reported = announced
        await self.feedback(
            refusal.body, aligned=False, reason=refusal.reason, message=refusal.message
        )

    async def feedback(
        self, pod: dict[str, Any], *, aligned: bool, reason: str, message: str
    ) -> None:
        now = now_text(self.clock())
        status_patch, annotations = feedback.plan_pod_patches(
            pod, aligned=aligned, reason=reason, message=message, now=now
        )
        meta = pod.get("metadata", {})
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        if not aligned and status_patch is not None:
            record = self.records.get(str(meta.get("uid")))
            if record is None or (record.reported or ("", ""))[0] != reason:
                if record is not None:
                    record.reported = (reason, "")
                event = reason if reason in _EVENT_REASONS else "EnforcementFailed"
                self.event(pod, event, message, warning=True)
        try:
            if status_patch is not None:
                await self._patch_condition(
                    pod, status_patch, aligned=aligned, reason=reason, message=message, now=now
                )
            if annotations is not None:
                await self.client.patch_pod_annotations(namespace, name, annotations, uid=_uid(pod))
        except KubePodReplacedError as exc:
            logger.info("not reporting to a namesake of pod %s/%s: %s", namespace, name, exc)
        except KubeError as exc:
            logger.warning("reporting to pod %s/%s: %s", namespace, name, exc)

    async def _patch_condition(
        self,
        pod: dict[str, Any],
        patch: StatusPatch,
        *,
        aligned: bool,
        reason: str,
        message: str,
        now: str,
    ) -> None:
        """Write the `Aligned` condition; when the patch no longer fits the pod (its conditions
        moved since the cached copy), plan it again on a fresh copy, once."""
        meta = pod.get("metadata", {})
        namespace, name, uid = str(meta.get("namespace")), str(meta.get("name")), _uid(pod)
        try:
            await self.client.patch_pod_status(
                namespace, name, patch.body, content_type=patch.content_type, uid=uid
            )
            return
        except KubeError as exc:
            # A failed `test` is 422 on a real API server and 500 on the emulator; either
            # way a fresh copy settles it. Unreachable or gone: nothing to retry on.
            if exc.not_found or exc.status == 0:
                raise
        fresh = await self.client.get_pod_status(namespace, name)
        if uid and _uid(fresh) != uid:
            raise KubePodReplacedError(409, "Conflict", f"pod {namespace}/{name} was re-created")
        condition = feedback.plan_condition(
            fresh, aligned=aligned, reason=reason, message=message, now=now
        )
        if condition is not None:
            again = feedback.plan_status_patch(condition, fresh)
            await self.client.patch_pod_status(
                namespace, name, again.body, content_type=again.content_type, uid=uid
            )

    def event(
        self, pod: dict[str, Any], reason: str, message: str, *, warning: bool = False
    ) -> None:
        meta = pod.get("metadata") or {}
        regarding = {"apiVersion": "v1", "kind": "Pod"}
        regarding |= {k: str(meta.get(k) or "") for k in ("namespace", "name", "uid")}
        self.events.post(regarding, reason=reason, message=message, warning=warning)


def _uid(pod: Mapping[str, Any]) -> str:
    """The uid the agent read the pod with: its writes are for that pod only."""
    uid = (pod.get("metadata") or {}).get("uid")
    return uid if isinstance(uid, str) else ""
