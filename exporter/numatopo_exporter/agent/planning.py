"""From assignments to ordered cpuset writes (pure).

The kernel (cgroup v1) refuses a cpuset that is not a subset of its parent's (EINVAL) and a parent
cpuset that no longer covers a child's (EBUSY), so the writes go in two phases:
  1. widen, parents before children: a cgroup lacking something gets `observed | desired` (it keeps
     what its children still use);
  2. narrow, children before parents: a cgroup not yet at `desired` gets it.
After each single write every child is still a subset of its parent; after both, every cgroup holds
its desired value, and planning again yields no writes.

Pools (the kubelet's words): EXCLUSIVE CPUs belong to one container with an exclusive assignment;
the SHARED pool is every online CPU that is not exclusive, and every other container on the node
(pod sandboxes included) runs on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from numatopo_engine.cpuset import CPUSet

CpusetFile = Literal["cpuset.cpus", "cpuset.mems"]


class PlanError(ValueError):
    """The desired state cannot be reached safely; the message says which cgroup and why."""


@dataclass(frozen=True)
class Cpuset:
    """What a cgroup has: CPUs and memory (NUMA) nodes."""

    cpus: CPUSet
    mems: CPUSet


@dataclass(frozen=True)
class Target:
    """What a cgroup should have; None leaves that file as it is."""

    cpus: CPUSet | None = None
    mems: CPUSet | None = None


@dataclass(frozen=True)
class CpusetWrite:
    path: PurePosixPath
    file: CpusetFile
    value: CPUSet

    def __str__(self) -> str:
        return f"{self.path}/{self.file} = {self.value or '(empty)'}"


def _nearest_ancestor(
    path: PurePosixPath, known: Mapping[PurePosixPath, object]
) -> PurePosixPath | None:
    return next((parent for parent in path.parents if parent in known), None)


def _check(
    file: CpusetFile, want: dict[PurePosixPath, CPUSet], have: dict[PurePosixPath, CPUSet]
) -> None:
    # Only existing cgroups can be written; a cgroup with tasks needs a CPU and a memory node;
    # once done, every cgroup must be a subset of its nearest known ancestor (what the kernel
    # would otherwise refuse mid-way, or leave inconsistent).
    for path, value in sorted(want.items()):
        if path not in have:
            raise PlanError(f"cgroup {path} does not exist")
        if not value:
            raise PlanError(f"{path}/{file} would be empty")
    final = {**have, **want}
    for path in sorted(final):
        parent = _nearest_ancestor(path, final)
        # Pairs the plan does not touch are the kernel's business (v2 does not enforce it).
        if parent is None or (path not in want and parent not in want):
            continue
        if missing := final[path] - final[parent]:
            raise PlanError(
                f"{path}/{file} would need {missing}, which its parent {parent} "
                f"would not have ({final[parent] or 'empty'})"
            )


def plan_writes(
    desired: Mapping[PurePosixPath, Target], observed: Mapping[PurePosixPath, Cpuset]
) -> list[CpusetWrite]:
    """The writes that take `observed` to `desired` in the module's order; [] when converged.
    `observed` must hold every cgroup `desired` names, their ancestors and the other children that
    constrain them. `PlanError` when the end state would break the subset rule."""
    widen: list[CpusetWrite] = []
    narrow: list[CpusetWrite] = []
    files: tuple[tuple[CpusetFile, str], ...] = (("cpuset.cpus", "cpus"), ("cpuset.mems", "mems"))
    for file, field in files:
        want = {p: v for p, t in desired.items() if (v := getattr(t, field)) is not None}
        have = {p: getattr(c, field) for p, c in observed.items()}
        _check(file, want, have)
        for path, value in want.items():
            current = have[path]
            if not value <= current:
                current = current | value
                widen.append(CpusetWrite(path, file, current))
            if current != value:
                narrow.append(CpusetWrite(path, file, value))
    widen.sort(key=lambda w: (len(w.path.parts), str(w.path), w.file))
    narrow.sort(key=lambda w: (-len(w.path.parts), str(w.path), w.file))
    return widen + narrow


def desire_cpusets(
    *,
    online: Cpuset,
    containers: Iterable[PurePosixPath],
    exclusive_targets: Mapping[PurePosixPath, Target],
    numa_targets: Mapping[PurePosixPath, Target],
    exclusive: CPUSet,
    observed: Mapping[PurePosixPath, Cpuset],
) -> dict[PurePosixPath, Target]:
    """Targets for every container cgroup on the node, plus the ancestors to widen.
    `exclusive_targets`: containers with exclusive CPUs; `numa_targets`: containers with
    `exclusive: false` (a NUMA node's CPUs), cut to the shared pool so that they never run on
    another's exclusive CPUs; `exclusive`: every exclusive assignment on the node, running or not.
    Every other container gets the SHARED pool (memory nodes left alone). Ancestors (pod, QoS tier,
    kubepods) are only widened, never narrowed: the kubelet owns them. Cgroups nested in a
    container are narrowed with it (`_narrow_descendants`)."""
    shared = online.cpus - exclusive
    if not shared:
        raise PlanError(
            f"exclusive assignments take every online CPU ({online.cpus}); "
            "nothing would be left for the shared pool"
        )
    targets: dict[PurePosixPath, Target] = {}
    container_set = set(containers)
    for path in sorted(container_set):
        if path in exclusive_targets:
            targets[path] = exclusive_targets[path]
        elif path in numa_targets:
            target = numa_targets[path]
            cpus = None if target.cpus is None else (target.cpus & shared) or shared
            targets[path] = Target(cpus=cpus, mems=target.mems)
        else:
            targets[path] = Target(cpus=shared)
    needs: dict[PurePosixPath, Cpuset] = {}
    for path, target in list(targets.items()):
        for parent in path.parents:
            if str(parent) == "." or parent not in observed:
                continue
            before = needs.get(parent, Cpuset(CPUSet(), CPUSet()))
            needs[parent] = Cpuset(
                cpus=before.cpus | (target.cpus or CPUSet()),
                mems=before.mems | (target.mems or CPUSet()),
            )
    for parent, need in needs.items():
        have = observed[parent]
        cpus = None if need.cpus <= have.cpus else have.cpus | need.cpus
        mems = None if need.mems <= have.mems else have.mems | need.mems
        if cpus is not None or mems is not None:
            targets[parent] = Target(cpus=cpus, mems=mems)
    container_targets = {p: t for p, t in targets.items() if p in container_set}
    targets.update(_narrow_descendants(container_targets, observed))
    return targets


def _narrow_descendants(
    containers: Mapping[PurePosixPath, Target], observed: Mapping[PurePosixPath, Cpuset]
) -> dict[PurePosixPath, Target]:
    """Targets for cgroups nested inside container cgroups (a process manager's). The kernel
    refuses to narrow a cgroup below what a child still uses (EBUSY), so each nested cgroup that
    has something its container will lose is narrowed too, top-down, within its parent's new
    value: it keeps what it has inside that bound, or gets the whole bound when nothing is left."""
    bounds: dict[PurePosixPath, Target] = dict(containers)
    nested: dict[PurePosixPath, Target] = {}
    for path in sorted(observed, key=lambda p: (len(p.parts), str(p))):
        if path in containers:
            continue
        parent = _nearest_ancestor(path, bounds)
        if parent is None:
            continue
        bound, have = bounds[parent], observed[path]
        cpus = _within(have.cpus, bound.cpus)
        mems = _within(have.mems, bound.mems)
        bounds[path] = Target(
            cpus=bound.cpus if cpus is None else cpus, mems=bound.mems if mems is None else mems
        )
        if cpus is not None or mems is not None:
            nested[path] = Target(cpus=cpus, mems=mems)
    return nested


def _within(have: CPUSet, bound: CPUSet | None) -> CPUSet | None:
    """What a nested cgroup should hold under `bound`; None when it already fits."""
    if bound is None or have <= bound:
        return None
    return (have & bound) or bound
