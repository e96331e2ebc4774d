"""Cgroup trees for the agent's tests: a real throw-away cgroup v1 cpuset hierarchy
(root only; skipped with the reason otherwise) or plain files shaped like one; the
agent loop over such a tree (`make_agent`), and the Events its passes queued, posted
(`events_posted`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest

import signing_keys
from numatopo_exporter.agent.loop import AgentLoop
from uid_preconditions import UidPreconditions

from ..conftest import NODE, NodeClient

CPUSET_MOUNT = Path("/sys/fs/cgroup/cpuset")


@pytest.fixture
def kmock_options(kmock_options: dict[str, Any]) -> dict[str, Any]:
    """The agent's API emulator refuses a patch for another uid, as the API server does
    (`uid_preconditions`); a test that names its own emulator class keeps it."""
    if kmock_options.get("cls") is kmock.KubernetesEmulator:
        return {**kmock_options, "cls": UidPreconditions}
    return kmock_options


class CgroupTree:
    """Builds cgroups in the kubelet's layout under `root`, and removes them afterwards."""

    def __init__(self, root: Path, *, real: bool) -> None:
        self.root = root
        self.real = real
        self.made: list[Path] = []
        self.processes: list[subprocess.Popen[bytes]] = []

    def make(self, relative: str) -> Path:
        """Create each missing cgroup on the way, with its parent's CPUs and memory nodes."""
        path = self.root
        for part in Path(relative).parts:
            parent, path = path, path / part
            if path.exists():
                continue
            path.mkdir()
            self.made.append(path)
            for name in ("cpuset.mems", "cpuset.cpus"):  # v1 needs mems before tasks
                (path / name).write_text((parent / name).read_text().strip())
        return path

    def spawn_in(self, relative: str) -> int:
        """A real `sleep` moved into the cgroup; returns its pid."""
        process = subprocess.Popen(["sleep", "60"])
        self.processes.append(process)
        (self.root / relative / "cgroup.procs").write_text(str(process.pid))
        return process.pid

    def cleanup(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()
        for path in reversed(self.made):  # children before parents
            with contextlib.suppress(OSError):
                path.rmdir()


def _owner_alive(root: Path) -> bool:
    """Whether the pytest process that made `root` (`numatopo-test-<pid>-<hex>`) still runs:
    another run on this machine may be using its root right now."""
    pid = root.name.removeprefix("numatopo-test-").partition("-")[0]
    if not pid.isdigit():
        return False  # named before roots carried their owner
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_roots() -> None:
    """Roots left by a killed run (no finalizer ran); only those without any task."""
    for stale in CPUSET_MOUNT.glob("numatopo-test-*"):
        if _owner_alive(stale):
            continue
        cgroups = sorted((p for p in stale.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        if any((c / "tasks").read_text().strip() for c in [*cgroups, stale]):
            continue
        with contextlib.suppress(OSError):
            for cgroup in [*cgroups, stale]:
                cgroup.rmdir()


def _real_root_or_reason() -> tuple[Path | None, str]:
    if os.geteuid() != 0:
        return None, "creating cgroups needs root"
    if not (CPUSET_MOUNT / "cpuset.cpus").exists():
        return None, f"no cgroup v1 cpuset controller mounted at {CPUSET_MOUNT}"
    _remove_stale_roots()
    root = CPUSET_MOUNT / f"numatopo-test-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        root.mkdir()
    except OSError as exc:
        return None, f"cannot create a cgroup under {CPUSET_MOUNT}: {exc.strerror}"
    try:
        for name in ("cpuset.mems", "cpuset.cpus"):
            (root / name).write_text((CPUSET_MOUNT / name).read_text().strip())
    except OSError as exc:
        root.rmdir()
        return None, f"cannot configure a cpuset cgroup: {exc.strerror}"
    return root, ""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests on the real cpuset hierarchy run one at a time, on one xdist worker: they
    share the machine's cgroup tree (its CPUs, and each other's stale roots)."""
    for item in items:
        params = getattr(item, "callspec", None)
        real = params is not None and params.params.get("cgroup_tree") == "real-cgroup-v1"
        if real or "real_cgroups" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("real-cgroup-v1"))


@pytest.fixture
def real_cgroups() -> Iterator[CgroupTree]:
    root, reason = _real_root_or_reason()
    if root is None:
        pytest.skip(reason)
    tree = CgroupTree(root, real=True)
    try:
        yield tree
    finally:
        tree.cleanup()
        with contextlib.suppress(OSError):
            root.rmdir()


@pytest.fixture
def file_cgroups(tmp_path: Path) -> CgroupTree:
    """Plain files shaped like a cgroup v1 cpuset hierarchy of a 4-CPU, 1-node machine."""
    (tmp_path / "cpuset.cpus").write_text("0-3\n")
    (tmp_path / "cpuset.mems").write_text("0\n")
    return CgroupTree(tmp_path, real=False)


@pytest.fixture(params=["real-cgroup-v1", "files"])
def cgroup_tree(request: pytest.FixtureRequest) -> CgroupTree:
    name = "real_cgroups" if request.param == "real-cgroup-v1" else "file_cgroups"
    tree: CgroupTree = request.getfixturevalue(name)
    return tree


def make_agent(client: NodeClient, tree: CgroupTree, **options: Any) -> AgentLoop:
    """The agent of `NODE` over `tree`, trusting the test signing key; the kubelet's
    state file is one that is not there unless `kubelet_state` says otherwise."""
    options.setdefault("kubelet_state", tree.root / "absent")
    return AgentLoop(
        client, node_name=NODE, verifier=signing_keys.VERIFIER, cgroup_root=tree.root, **options
    )


async def events_posted(agent: AgentLoop, *, seconds: float = 5.0) -> None:
    """Post the Events that `agent`'s passes queued, as its running loop posts them beside
    the passes: a test that drives `reconcile` itself reads them after this."""
    poster = asyncio.create_task(agent.events.run(agent.client))
    try:
        async with asyncio.timeout(seconds):
            while agent.events.pending:
                await asyncio.sleep(0.01)
    finally:
        poster.cancel()
        await asyncio.gather(poster, return_exceptions=True)
