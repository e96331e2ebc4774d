"""Real sysfs trees, their lstopo references, and a builder for hand-made trees.

The trees are hwloc's, ghw's and numatopo's gathered `/sys` + `/proc` snapshots of real
machines, checked in compressed under `tests/fixtures/sysfs/` and extracted once per session.
The lstopo references under `tests/fixtures/lstopo/` are what
`HWLOC_FSROOT=<tree> HWLOC_THISSYSTEM=0 lstopo-no-graphics --of xml --whole-io -`
printed for each tree, with the lines naming the machine that ran lstopo removed.
Regenerate them with `NUMATOPO_REGENERATE_LSTOPO=1 pytest -m lstopo tests/exporter/discovery/sysfs`.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from sysfs_trees import ARCHIVES, extract_shared, shared_trees

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
LSTOPO_REFERENCES = FIXTURES / "lstopo"
LSTOPO = "lstopo-no-graphics"

# `info` entries lstopo takes from the machine running it, not from the tree.
HOST_INFOS = frozenset(
    {"OSName", "OSRelease", "OSVersion", "HostName", "Architecture", "hwlocVersion", "ProcessName"}
)


TREE_IDS = sorted(ARCHIVES)


@pytest.fixture(scope="session")
def sysfs_tree(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`sysfs_tree("16amd64-8n2c")` -> the extracted tree, unpacked on first use (once per
    run, shared with the integration tests and other xdist workers)."""
    shared = shared_trees(tmp_path_factory)
    return lambda tree_id: extract_shared(tree_id, shared)


@pytest.fixture
def tree_copy(sysfs_tree: Callable[[str], Path], tmp_path: Path) -> Callable[[str], Path]:
    """A private copy of a real tree that a test may break.

    Files are hard links to the session's extraction (fast on big trees), so a test
    must replace a file (unlink, then write) rather than write into it.
    """

    def copy(tree_id: str) -> Path:
        source = sysfs_tree(tree_id)
        return Path(
            shutil.copytree(source, tmp_path / tree_id, symlinks=True, copy_function=os.link)
        )

    return copy


# -- lstopo -----------------------------------------------------------------------------


def run_lstopo(tree: Path) -> bytes:
    env = {**os.environ, "HWLOC_FSROOT": str(tree), "HWLOC_THISSYSTEM": "0"}
    done = subprocess.run(
        [LSTOPO, "--of", "xml", "--whole-io", "-"], env=env, capture_output=True, check=True
    )
    return normalized(done.stdout)


def normalized(xml: bytes) -> bytes:
    """lstopo's XML without the lines that describe the machine running lstopo."""
    kept = [
        line
        for line in xml.splitlines(keepends=True)
        if not any(f'<info name="{name}"' in line.decode() for name in HOST_INFOS)
    ]
    return b"".join(kept)


def reference_path(tree_id: str) -> Path:
    return LSTOPO_REFERENCES / f"{tree_id}.xml.gz"


def read_reference(tree_id: str) -> bytes:
    return gzip.decompress(reference_path(tree_id).read_bytes())


def write_reference(tree_id: str, xml: bytes) -> None:
    # mtime=0 so that regenerating an unchanged reference changes no bytes.
    reference_path(tree_id).write_bytes(gzip.compress(xml, mtime=0))


@pytest.fixture(scope="session")
def lstopo_reference(sysfs_tree: Callable[[str], Path]) -> Callable[[str], bytes]:
    """The checked-in lstopo XML of a tree.

    With NUMATOPO_REGENERATE_LSTOPO=1, a tree that has none yet (one just added) gets it
    from the installed lstopo first, so that the regeneration command also adds trees.
    """
    regenerate = os.environ.get("NUMATOPO_REGENERATE_LSTOPO") == "1"

    def reference(tree_id: str) -> bytes:
        if regenerate and not reference_path(tree_id).exists():
            write_reference(tree_id, run_lstopo(sysfs_tree(tree_id)))
        return read_reference(tree_id)

    return reference


@pytest.fixture(scope="session")
def lstopo_live(sysfs_tree: Callable[[str], Path]) -> Callable[[str], bytes]:
    """What the installed lstopo prints for a tree now (skips when it is not installed).

    With NUMATOPO_REGENERATE_LSTOPO=1 the output also replaces the checked-in reference.
    """
    if shutil.which(LSTOPO) is None:
        pytest.skip(f"{LSTOPO} (Debian package hwloc) is not on PATH")
    regenerate = os.environ.get("NUMATOPO_REGENERATE_LSTOPO") == "1"

    def live(tree_id: str) -> bytes:
        xml = run_lstopo(sysfs_tree(tree_id))
        if regenerate:
            write_reference(tree_id, xml)
        return xml

    return live


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that takes `tree_id` runs once per real tree."""
    if "tree_id" in metafunc.fixturenames:
        metafunc.parametrize("tree_id", TREE_IDS)


# -- hand-made trees ----------------------------------------------------------------------


def write_tree(root: Path, files: Mapping[str, str], links: Mapping[str, str]) -> Path:
    """Write `files` (relative path -> content) and `links` (link -> relative target)."""
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    for relative, target in links.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
    return root


@pytest.fixture
def make_tree(tmp_path: Path) -> Callable[[Mapping[str, str], Mapping[str, str]], Path]:
    """Build a hand-made host tree under tmp_path from files and symlinks."""
    return lambda files, links: write_tree(tmp_path / "host", files, links)
