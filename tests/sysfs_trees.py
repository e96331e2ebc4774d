"""The real sysfs trees checked in under `tests/fixtures/sysfs/`, and their safe extraction.

hwloc's and ghw's gathered `/sys` + `/proc` snapshots of real machines, compressed; the
sysfs reader's tests and the integration tests both unpack them through this module.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

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
