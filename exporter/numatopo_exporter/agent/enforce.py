"""Enforce: find the accepted pods' container cgroups, plan their cpusets, write them (I/O: the
cgroup filesystem; the plan itself is `planning`'s, pure). What was written, planned and refused
goes to `report` for the pods' verdicts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from numatopo_engine.cpuset import CPUSet
from numatopo_exporter.agent import cgroupfs, planning, pods
from numatopo_exporter.metrics import AgentMetrics

logger = logging.getLogger("numatopo.agent")


@dataclass
class CgroupPass:
    """What one pass planned and wrote, for the pods' reports."""

    desired: dict[PurePosixPath, planning.Target] = field(default_factory=dict)
    written: set[PurePosixPath] = field(default_factory=set)
    write_errors: dict[PurePosixPath, str] = field(default_factory=dict)


def locate(hierarchy: cgroupfs.Hierarchy, entry: pods.PodAssignment) -> pods.PodOutcome:
    """The cgroups of the pod's assigned, running containers, with their targets."""
    outcome = pods.PodOutcome()
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


def write_cpusets(
    hierarchy: cgroupfs.Hierarchy,
    online: planning.Cpuset,
    accepted: list[pods.PodAssignment],
    outcomes: dict[str, pods.PodOutcome],
    metrics: AgentMetrics,
) -> CgroupPass:
    """Plan every container's cpuset (exclusive ones, NUMA pools, the shared rest) and write what
    differs; a plan that cannot be made fails every accepted pod."""
    exclusive_targets, numa_targets = _targets(accepted, outcomes)
    done = CgroupPass()
    try:
        containers = [c.path for c in hierarchy.list_containers()]
        observed = _observe(hierarchy, containers, done.write_errors)
        containers = [c for c in containers if c in observed]
        done.desired = planning.desire_cpusets(
            online=online,
            containers=containers,
            exclusive_targets=exclusive_targets,
            numa_targets=numa_targets,
            exclusive=CPUSet(c for e in accepted for c in pods.exclusive_cpus(e.assignment)),
            observed=observed,
        )
        writes = planning.plan_writes(done.desired, observed)
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
            metrics.writes.inc()
            logger.info("wrote %s", write)
        except cgroupfs.CgroupGoneError:
            # The container exited mid-pass: nothing to enforce, nothing to report.
            logger.debug("%s: gone before the write", write.path)
            gone.add(write.path)
        except cgroupfs.CgroupError as exc:
            logger.error("%s", exc)
            done.write_errors[write.path] = str(exc)
    done.written = {w.path for w in writes}
    return done


def _targets(
    accepted: list[pods.PodAssignment], outcomes: dict[str, pods.PodOutcome]
) -> tuple[dict[PurePosixPath, planning.Target], dict[PurePosixPath, planning.Target]]:
    """(exclusive containers' targets, NUMA-pool containers' targets)."""
    exclusive_targets: dict[PurePosixPath, planning.Target] = {}
    numa_targets: dict[PurePosixPath, planning.Target] = {}
    for entry in accepted:
        paths = outcomes[entry.uid].paths
        for name, container in entry.assignment.containers.items():
            target_map = exclusive_targets if container.exclusive else numa_targets
            for path in paths:
                if path.name and entry.container_at(path) == name:
                    target_map[path] = paths[path]
    return exclusive_targets, numa_targets


def _observe(
    hierarchy: cgroupfs.Hierarchy, containers: list[PurePosixPath], errors: dict[PurePosixPath, str]
) -> dict[PurePosixPath, planning.Cpuset]:
    """What each container cgroup, its ancestors and the cgroups nested in it have. A container
    whose cgroup (or a nested one) vanished while being read is left out: it exited, and its
    replacement comes with a pod event. One that cannot be read is left out too, its error in
    `errors` for its pod's report; an unreadable ancestor raises (nothing under it is plannable)."""
    observed: dict[PurePosixPath, planning.Cpuset] = {}
    for path in containers:
        try:
            found = {c: hierarchy.read(c) for c in hierarchy.ancestors(path) if c not in observed}
            try:
                found |= {c: hierarchy.read(c) for c in [path, *hierarchy.descendants(path)]}
            except cgroupfs.CgroupGoneError:
                raise
            except cgroupfs.CgroupError as exc:
                errors[path] = str(exc)
                continue
        except cgroupfs.CgroupGoneError:
            continue
        observed.update(found)
    return observed
