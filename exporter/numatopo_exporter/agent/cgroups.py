"""Where the kubelet puts pod and container cgroups (pure: names and paths only).

Paths are relative to the root of the cpuset hierarchy (`/sys/fs/cgroup/cpuset` on cgroup v1,
`/sys/fs/cgroup` on v2). The kubelet's two cgroup drivers name pod cgroups

  tier        cgroupfs driver                  systemd driver
  Guaranteed  kubepods/pod<uid>                kubepods.slice/kubepods-pod<uid_>.slice
  Burstable   kubepods/burstable/pod<uid>      kubepods.slice/kubepods-burstable.slice/
                                                 kubepods-burstable-pod<uid_>.slice
  BestEffort  kubepods/besteffort/pod<uid>     (same with besteffort)

where <uid_> is the pod UID with dashes turned into underscores (systemd reserves `-` for nesting).
Below the pod is one cgroup per container (`container_dir_names`) and one for the sandbox; CRI-O's
`crio-conmon-<id>.scope`, for its monitor process, is never a container.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import PurePosixPath


class Driver(enum.StrEnum):
    CGROUPFS = "cgroupfs"
    SYSTEMD = "systemd"


class QosClass(enum.StrEnum):
    """`status.qosClass` of a pod."""

    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


@dataclass(frozen=True)
class ContainerId:
    runtime: str
    id: str

    def __str__(self) -> str:
        return f"{self.runtime}://{self.id}"


def parse_container_id(text: str) -> ContainerId | None:
    """`containerd://abc…` / `cri-o://abc…` from `status.containerStatuses[].containerID`; None
    when the container has not started yet (empty) or the id is malformed."""
    runtime, sep, ident = text.partition("://")
    if not sep or not runtime or not ident or not ident.isalnum():
        return None
    return ContainerId(runtime=runtime, id=ident)


def tier_dir(driver: Driver, qos: QosClass) -> PurePosixPath:
    """The directory that holds the pod cgroups of `qos` (Guaranteed: kubepods itself)."""
    top = PurePosixPath("kubepods.slice" if driver is Driver.SYSTEMD else "kubepods")
    if qos is QosClass.GUARANTEED:
        return top
    tier = qos.value.lower()
    return top / (f"kubepods-{tier}.slice" if driver is Driver.SYSTEMD else tier)


def pod_dir(driver: Driver, qos: QosClass, pod_uid: str) -> PurePosixPath:
    if driver is Driver.CGROUPFS:
        return tier_dir(driver, qos) / f"pod{pod_uid}"
    prefix = "kubepods" if qos is QosClass.GUARANTEED else f"kubepods-{qos.value.lower()}"
    return tier_dir(driver, qos) / f"{prefix}-pod{pod_uid.replace('-', '_')}.slice"


def parse_pod_dir(name: str, driver: Driver) -> str | None:
    """The pod UID (with dashes) from a pod cgroup's directory name, else None."""
    if driver is Driver.CGROUPFS:
        return name[3:] if name.startswith("pod") and len(name) > 3 else None
    if not name.endswith(".slice") or "-pod" not in name:
        return None
    uid = name[: -len(".slice")].rsplit("-pod", 1)[1]
    return uid.replace("_", "-") or None


def container_dir_names(container: ContainerId, driver: Driver) -> list[str]:
    """Directory names the container's cgroup may have, most likely first (the runtime in the
    id, `containerd://`, usually tells; every known form is listed, as a wrong guess costs
    nothing: the match is on the exact name)."""
    ident = container.id
    if driver is Driver.SYSTEMD:
        names = {
            "containerd": f"cri-containerd-{ident}.scope",
            "cri-o": f"crio-{ident}.scope",
            "docker": f"docker-{ident}.scope",
        }
    else:
        names = {"containerd": ident, "cri-o": f"crio-{ident}", "docker": ident}
    first = names.get(container.runtime)
    return sorted(set(names.values()), key=lambda name: (name != first, name))
