"""The cpuset hierarchy on disk (I/O): detect it, find container cgroups, read and write.

Under `--cgroup-root` (`/sys/fs/cgroup`) the hierarchy is cgroup v2 at the root when it has
`cgroup.controllers`, else v1 at `cpuset/` or at the root itself (a cpuset mount point, or a test
cgroup inside one); its driver is systemd when it holds `kubepods.slice`, else cgroupfs. On v2 an
empty `cpuset.cpus` means "inherit from the parent": `cpuset.cpus.effective` is read then.

A cgroup removed while the agent works on it (the container exited) raises `CgroupGoneError`, never
reads as an empty cpuset: the directory is gone (ENOENT, or ENODEV from a file of a removed cgroup),
or an empty read comes from a directory that no longer exists. Callers skip it: nothing to enforce.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from numatopo_engine.cpuset import CPUSet, CPUSetParseError
from numatopo_exporter.agent import cgroups
from numatopo_exporter.agent.planning import Cpuset, CpusetWrite

CPUS = "cpuset.cpus"
MEMS = "cpuset.mems"


class CgroupError(Exception):
    """A cgroup file could not be read or written; the message names the file."""


class CgroupGoneError(CgroupError):
    """The cgroup no longer exists (its container exited); nothing to read or write."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path}: the cgroup is gone")
        self.path = path


@dataclass(frozen=True)
class ContainerCgroup:
    path: PurePosixPath


@dataclass(frozen=True)
class Hierarchy:
    root: Path
    """The cpuset hierarchy's root directory."""
    version: int
    driver: cgroups.Driver

    def dir(self, path: PurePosixPath) -> Path:
        return self.root / path

    # -- finding cgroups -------------------------------------------------------------

    def find_pod(self, pod_uid: str, qos: cgroups.QosClass | None) -> PurePosixPath | None:
        """The pod's cgroup; every tier is tried when the QoS class is unknown or wrong."""
        for tier in sorted(cgroups.QosClass, key=lambda tier: tier is not qos):
            path = cgroups.pod_dir(self.driver, tier, pod_uid)
            if self.dir(path).is_dir():
                return path
        return None

    def find_container(
        self, pod_uid: str, qos: cgroups.QosClass | None, container: cgroups.ContainerId
    ) -> PurePosixPath | None:
        pod = self.find_pod(pod_uid, qos)
        if pod is None:
            return None
        names = cgroups.container_dir_names(container, self.driver)
        return next((pod / name for name in names if self.dir(pod / name).is_dir()), None)

    def list_containers(self) -> list[ContainerCgroup]:
        """Every container (and sandbox) cgroup of every pod, sorted by path."""
        found: list[ContainerCgroup] = []
        for qos in cgroups.QosClass:
            tier = cgroups.tier_dir(self.driver, qos)
            for pod_name in _subdirs(self.dir(tier)):
                if cgroups.parse_pod_dir(pod_name, self.driver) is None:
                    continue
                for name in _subdirs(self.dir(tier / pod_name)):
                    if "conmon" not in name:
                        found.append(ContainerCgroup(tier / pod_name / name))
        return sorted(found, key=lambda c: str(c.path))

    def descendants(self, path: PurePosixPath) -> list[PurePosixPath]:
        """Every cgroup nested below `path` (excluded), parents before children."""
        children = [path / name for name in _subdirs(self.dir(path))]
        nested = [*children, *(p for child in children for p in self.descendants(child))]
        return sorted(nested, key=lambda p: (len(p.parts), str(p)))

    def ancestors(self, path: PurePosixPath) -> list[PurePosixPath]:
        """The cgroups between the hierarchy root (excluded) and `path` (excluded), top first."""
        return [p for p in reversed(path.parents) if str(p) != "."]

    # -- cpusets ---------------------------------------------------------------------

    def online(self) -> Cpuset:
        """What the hierarchy's root may use: the node's online CPUs and memory nodes."""
        return self.read(PurePosixPath("."))

    def read(self, path: PurePosixPath) -> Cpuset:
        return Cpuset(cpus=self._read_set(path, CPUS), mems=self._read_set(path, MEMS))

    def _read_set(self, path: PurePosixPath, name: str) -> CPUSet:
        directory = self.dir(path)
        if self.version == 1:
            # Every v1 cpuset cgroup has both files: a missing one means a removed cgroup.
            configured = _read_file(directory / name)
        else:
            configured = _read_file(directory / name) if (directory / name).exists() else ""
            if not configured.strip():
                configured = _read_file(directory / f"{name}.effective")
        if not configured.strip() and not directory.is_dir():
            raise CgroupGoneError(directory)
        try:
            return CPUSet.parse(configured)
        except CPUSetParseError as exc:
            raise CgroupError(f"{directory / name}: {exc}") from None

    def write(self, write: CpusetWrite) -> None:
        target = self.dir(write.path) / write.file
        try:
            # One write(2) per value: a buffered write could split it. O_TRUNC is what
            # `echo >` does; cgroupfs ignores it, a plain file (tests) needs it.
            fd = os.open(target, os.O_WRONLY | os.O_TRUNC)
            try:
                os.write(fd, str(write.value).encode())
            finally:
                os.close(fd)
        except OSError as exc:
            if _gone(exc, self.dir(write.path)):
                raise CgroupGoneError(self.dir(write.path)) from None
            hint = {
                errno.EINVAL: "not a subset of the parent's cpuset, or offline CPUs",
                errno.EBUSY: "a child cgroup still uses CPUs being removed",
                errno.ENOENT: "no such cgroup (container gone, or cpuset controller off)",
                errno.EACCES: "permission denied (the agent needs root and /sys/fs/cgroup rw)",
            }.get(exc.errno or 0, exc.strerror or str(exc))
            raise CgroupError(f"writing {write.value} to {target}: {hint}") from None


def detect_hierarchy(cgroup_root: Path) -> Hierarchy:
    if (cgroup_root / "cgroup.controllers").exists():
        root, version = cgroup_root, 2
    elif (cgroup_root / "cpuset" / CPUS).exists():
        root, version = cgroup_root / "cpuset", 1
    elif (cgroup_root / CPUS).exists():
        root, version = cgroup_root, 1
    else:
        raise CgroupError(
            f"{cgroup_root}: no cpuset hierarchy found (expected cgroup.controllers for v2, "
            "or cpuset/cpuset.cpus for v1); check --cgroup-root"
        )
    systemd = (root / "kubepods.slice").is_dir()
    return Hierarchy(root, version, cgroups.Driver.SYSTEMD if systemd else cgroups.Driver.CGROUPFS)


def _gone(exc: OSError, directory: Path) -> bool:
    # ENODEV: a file of a cgroup removed while open. ENOENT only counts when the directory itself
    # went away: a missing file in a live cgroup (v2 with the cpuset controller off) is an error.
    return exc.errno == errno.ENODEV or (exc.errno == errno.ENOENT and not directory.is_dir())


def _subdirs(directory: Path) -> list[str]:
    try:
        with os.scandir(directory) as entries:
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CgroupError(f"{directory}: cannot list: {exc.strerror or exc}") from None


def _read_file(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        if _gone(exc, path.parent):
            raise CgroupGoneError(path.parent) from None
        raise CgroupError(f"{path}: cannot read: {exc.strerror or exc}") from None
