"""The real sysfs trees checked in under `tests/fixtures/sysfs/`, and their safe extraction.

hwloc's, ghw's and numatopo's own (scripts/capture_sysfs.py) gathered `/sys` + `/proc`
snapshots of real machines, compressed; the sysfs reader's tests and the integration
tests both unpack them through this module.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tarfile
from pathlib import Path

import pytest

SYSFS_ARCHIVE_DIR = Path(__file__).resolve().parent / "fixtures" / "sysfs"


def archive_stem(archive: Path) -> str:
    return archive.name.split(".tar.")[0]


ARCHIVES: dict[str, Path] = {
    archive_stem(path): path for path in sorted(SYSFS_ARCHIVE_DIR.glob("*/*.tar.*"))
}


def extract_tree(archive: Path, dest: Path) -> Path:
    """Unpack an archive safely into `dest`; the folder that holds `sys/`."""

    def stay_inside(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        try:
            return tarfile.data_filter(member, path)
        except (tarfile.AbsoluteLinkError, tarfile.LinkOutsideDestinationError):
            # A gathered tree can hold links to the gathering host (ghw's etc/mtab ->
            # /proc/self/mounts); they are not sysfs. Names escaping `dest` still raise.
            return None

    dest.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter=stay_inside)
    if (dest / "sys").is_dir():
        return dest
    (top,) = (p for p in dest.iterdir() if (p / "sys").is_dir())
    return top


def shared_trees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where this run unpacks trees once for all its fixtures and xdist workers.

    Unpacking every tree takes half a minute; the sysfs tests and the integration tests
    read the same trees, and each xdist worker would unpack its own copy. A worker's
    temporary folder sits in the run's, which the workers share; a run without xdist
    has only its own.
    """
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "sysfs-trees"
    shared.mkdir(exist_ok=True)
    return shared


def extract_shared(tree_id: str, shared: Path) -> Path:
    """`extract_tree` of `tree_id` into `shared`, once per run: the first caller unpacks
    (under a lock, into a scratch folder renamed when complete), the others wait for it.
    Tests must not write into the result (copy it first, see `tree_copy`)."""
    done = shared / tree_id
    with (shared / f"{tree_id}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_dir():
            scratch = shared / f"{tree_id}.partial"
            shutil.rmtree(scratch, ignore_errors=True)  # a worker killed mid-way
            top = extract_tree(ARCHIVES[tree_id], scratch)
            scratch.rename(done)
            (shared / f"{tree_id}.top").write_text(str(top.relative_to(scratch)))
    return done / (shared / f"{tree_id}.top").read_text()
