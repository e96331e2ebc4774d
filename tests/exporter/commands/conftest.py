"""What the `numatopo exporter` and `numatopo agent` command tests share: the API
emulator, a real sysfs tree, a cgroup file tree, and a port nobody listens on."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

import signing_keys
from numatopo_cli.main import main

# The real sysfs trees' fixtures, shared with this folder's tests.
from ..discovery.sysfs.conftest import sysfs_tree, tree_copy  # noqa: F401

TREE = "linux-amd64-accel-nvidia"


@pytest.fixture
def node_root(request: pytest.FixtureRequest) -> Path:
    """A real machine's sysfs tree (8 CPUs, one NVIDIA GPU), shared: read only."""
    extracted: Callable[[str], Path] = request.getfixturevalue("sysfs_tree")
    return extracted(TREE)


@pytest.fixture
def cgroup_root(tmp_path: Path) -> Path:
    """Plain files shaped like a cgroup v1 cpuset hierarchy of a 4-CPU machine."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cpuset.cpus").write_text("0-3\n")
    (root / "cpuset.mems").write_text("0\n")
    return root


@pytest.fixture
def closed_url() -> str:
    """An http URL on which nothing listens (the port was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def places(tmp_path: Path, node_root: Path, cgroup_root: Path, closed_url: str) -> dict[str, str]:
    """What `{tmp}`, `{tree}`, `{cgroups}`, `{closed}` and `{keys}` (the operator's public
    key, which the agent must trust) in a test's arguments stand for."""
    keys = tmp_path / "trusted.pem"
    keys.write_bytes(signing_keys.PUBLIC_PEM)
    return {
        "tmp": str(tmp_path),
        "tree": str(node_root),
        "cgroups": str(cgroup_root),
        "closed": closed_url,
        "keys": str(keys),
    }


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither in a cluster nor with a kubeconfig, whatever the developer's shell has."""
    for name in ("KUBERNETES_SERVICE_HOST", "KUBECONFIG", "NODE_NAME"):
        monkeypatch.delenv(name, raising=False)


async def main_in_thread(argv: Sequence[str]) -> int:
    """`numatopo ARGV` in a thread: it runs its own event loop while the emulator serves
    from this one."""
    return await asyncio.to_thread(main, list(argv))
