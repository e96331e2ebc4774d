"""Real cgroup v1 cpusets: the planned writes pin a real process to its assigned CPU."""

from __future__ import annotations

import os
from pathlib import PurePosixPath

import pytest

from numatopo_engine.cpuset import CPUSet
from numatopo_exporter.agent import cgroupfs
from numatopo_exporter.agent.planning import CpusetWrite, Target, desire_cpusets, plan_writes

from .conftest import CgroupTree

UID = "6c1f9e0a-2b3d-4c5e-9f80-1a2b3c4d5e6f"
CID = "a1b2c3d4e5f6"

LAYOUTS = [
    pytest.param(f"kubepods/burstable/pod{UID}/{CID}", id="cgroupfs-burstable-containerd"),
    pytest.param(f"kubepods/pod{UID}/crio-{CID}", id="cgroupfs-guaranteed-crio"),
    pytest.param(
        "kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope",
        id="systemd-besteffort-containerd",
    ),
]


@pytest.mark.parametrize("container", LAYOUTS)
def test_planned_writes_pin_a_real_process(real_cgroups: CgroupTree, container: str) -> None:
    """The assigned container runs only on CPU 1; its pod sandbox is kept on the rest."""
    sandbox = str(PurePosixPath(container).parent / "sandbox0")
    real_cgroups.make(container)
    real_cgroups.make(sandbox)
    pid = real_cgroups.spawn_in(container)
    other = real_cgroups.spawn_in(sandbox)
    hierarchy = cgroupfs.detect_hierarchy(real_cgroups.root)
    paths = [c.path for c in hierarchy.list_containers()]
    observed = {p: hierarchy.read(p) for c in paths for p in [*hierarchy.ancestors(c), c]}
    exclusive = CPUSet([1])
    target = Target(cpus=exclusive, mems=CPUSet([0]))

    desired = desire_cpusets(
        online=hierarchy.online(),
        containers=paths,
        exclusive_targets={PurePosixPath(container): target},
        numa_targets={},
        exclusive=exclusive,
        observed=observed,
    )
    for write in plan_writes(desired, observed):
        hierarchy.write(write)

    assert {1} == os.sched_getaffinity(pid)
    assert {0} == os.sched_getaffinity(other)


def test_the_kernel_refuses_the_unsafe_order(real_cgroups: CgroupTree) -> None:
    """Narrowing a pod under a wider child is EBUSY: why the planner goes child first."""
    container = f"kubepods/burstable/pod{UID}/{CID}"
    real_cgroups.make(container)
    real_cgroups.spawn_in(container)
    hierarchy = cgroupfs.detect_hierarchy(real_cgroups.root)
    pod = PurePosixPath(container).parent

    with pytest.raises(cgroupfs.CgroupError, match="child cgroup still uses"):
        hierarchy.write(CpusetWrite(pod, "cpuset.cpus", CPUSet([1])))
