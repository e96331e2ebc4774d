"""scripts/capture_sysfs.py: the archive it writes reads back as the node it gathered.

The script gathers a live node's `/sys` and `/proc`; here its `--root` is each real tree
of the corpus (each a gathered node), and what the sysfs reader says about the archive
must be what it says about the tree: nothing the reader uses is left behind.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from numatopo_exporter.discovery.hostroot import HostRoot
from numatopo_exporter.discovery.sysfs import read_sysfs
from sysfs_trees import archive_stem, extract_tree

TreeOf = Callable[[str], Path]
SCRIPT = Path(__file__).resolve().parents[4] / "scripts" / "capture_sysfs.py"
H200 = "16intel64-1n16c+h200+firecracker"


@pytest.fixture(scope="module")
def capture_sysfs() -> Iterator[ModuleType]:
    """The script as a module, so that 19 trees do not start 19 interpreters."""
    spec = importlib.util.spec_from_file_location("capture_sysfs", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Its dataclass looks its own module up while it is being defined.
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_captured_tree_reads_the_same(
    tree_id: str, sysfs_tree: TreeOf, tmp_path: Path, capture_sysfs: ModuleType
) -> None:
    source = sysfs_tree(tree_id)
    out = tmp_path / f"{tree_id}.tar.gz"

    assert 0 == capture_sysfs.main(["--root", str(source), str(out)])
    back = extract_tree(out, tmp_path / "extracted")

    assert tree_id == archive_stem(out) == back.name
    assert read_sysfs(HostRoot(source)) == read_sysfs(HostRoot(back))


def test_leaves_out_what_is_no_topology(
    tree_copy: TreeOf, tmp_path: Path, capture_sysfs: ModuleType
) -> None:
    """Serial numbers, MAC addresses, drivers and links to the gathering host stay behind;
    the same node gathered twice is the same bytes."""
    root = tree_copy(H200)
    dmi = root / "sys/class/dmi/id"
    dmi.mkdir(parents=True)
    (dmi / "product_serial").write_text("S3R14L\n")
    (root / "sys/class/net/host-link").symlink_to("/proc/self/mounts")
    first, second = tmp_path / "1" / "node.tar.gz", tmp_path / "2" / "node.tar.gz"
    for out in (first, second):
        out.parent.mkdir()
        capture_sysfs.main(["--root", str(root), str(out)])

    with tarfile.open(first) as tar:
        names = {member.name.removeprefix("node/") for member in tar.getmembers()}

    assert "sys/bus/pci/devices/0000:00:06.0" in names
    assert "sys/devices/pci0000:00/0000:00:06.0/numa_node" in names
    assert set() == {name for name in names if "dmi" in name or "host-link" in name}
    assert "sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0/operstate" in names
    assert (root / "sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0/address").exists()
    assert set() == {n for n in names if os.path.basename(n) in ("driver", "address")}
    assert first.read_bytes() == second.read_bytes()


def test_command_line(sysfs_tree: TreeOf, tmp_path: Path) -> None:
    """`--help`, a capture, and the two mistakes it names: a wrong name, a wrong root."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(SCRIPT), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    usage = run("--help")
    done = run("--root", str(sysfs_tree(H200)), str(tmp_path / "node.tar.gz"))
    wrong_name = run("--root", str(sysfs_tree(H200)), str(tmp_path / "node.tgz"))
    wrong_root = run("--root", str(tmp_path), str(tmp_path / "other.tar.gz"))

    assert 0 == usage.returncode
    assert "OUT.tar.gz" in usage.stdout
    assert "--root" in usage.stdout
    assert 0 == done.returncode
    assert "hwloc-style name starts 16intel64-1n" in done.stdout
    assert 2 == wrong_name.returncode
    assert "ending in .tar.gz" in wrong_name.stderr
    assert 2 == wrong_root.returncode
    assert "no sys/ folder" in wrong_root.stderr
