"""Time and memory of `read_sysfs` against `lstopo-no-graphics --of xml` on one real tree.

    .venv/bin/python benchmarks/bench_discovery.py [--tree ARCHIVE] [--repeat N]

By default the tree is the largest archive in tests/fixtures/sysfs (by file count).
Both readers see the same extracted tree, in the same run, and the page cache is
warmed by one untimed call of each first. Times are wall clock; best and median of
N. `read_sysfs` runs in this process, as it does in the exporter (a long-running
DaemonSet process resyncs by calling it); lstopo is a process per call, as it would
be if the exporter shelled out to it. The last row starts a fresh Python process per
call (interpreter start + imports + one read) for completeness.

Memory: tracemalloc's peak during one `read_sysfs` call (Python allocations only),
and the peak RSS (ru_maxrss) of a child process doing nothing but importing the
reader and reading the tree once, next to lstopo's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ARCHIVES = REPO / "tests" / "fixtures" / "sysfs"
LSTOPO = "lstopo-no-graphics"

READER_ONLY = """
import resource, sys
from pathlib import Path
from numatopo_exporter.discovery.hostroot import HostRoot
from numatopo_exporter.discovery.sysfs import read_sysfs
read_sysfs(HostRoot(Path(sys.argv[1])))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""

CHILD_RSS = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def largest_archive() -> Path:
    def members(path: Path) -> int:
        with tarfile.open(path) as tar:
            return len(tar.getmembers())

    return max(sorted(ARCHIVES.glob("*/*.tar.*")), key=members)


def extract(archive: Path, dest: Path) -> Path:
    def inside(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        try:
            return tarfile.data_filter(member, path)
        except (tarfile.AbsoluteLinkError, tarfile.LinkOutsideDestinationError):
            return None  # links to the gathering host (e.g. etc/mtab), not sysfs

    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter=inside)
    if (dest / "sys").is_dir():
        return dest
    return next(p for p in dest.iterdir() if (p / "sys").is_dir())


def timed(call: Callable[[], object], repeat: int) -> list[float]:
    call()  # warm the page cache and the imports
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tree", type=Path, help="a .tar.bz2/.tar.gz sysfs archive")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    if shutil.which(LSTOPO) is None:
        sys.exit(f"{LSTOPO} is not on PATH (Debian package hwloc)")

    from numatopo_exporter.discovery.hostroot import HostRoot
    from numatopo_exporter.discovery.sysfs import read_sysfs

    archive = args.tree or largest_archive()
    with tempfile.TemporaryDirectory() as scratch:
        tree = extract(archive, Path(scratch))
        files = sum(len(f) for _, _, f in os.walk(tree))
        root = HostRoot(tree)
        lstopo_env = {**os.environ, "HWLOC_FSROOT": str(tree), "HWLOC_THISSYSTEM": "0"}
        lstopo_cmd = [LSTOPO, "--of", "xml", "--whole-io", "-"]

        def ours() -> object:
            return read_sysfs(root)

        def theirs() -> object:
            return subprocess.run(lstopo_cmd, env=lstopo_env, check=True, stdout=subprocess.DEVNULL)

        python = [sys.executable, "-c", READER_ONLY, str(tree)]

        def ours_cold() -> object:
            return subprocess.run(python, check=True, stdout=subprocess.DEVNULL)

        ours_times = timed(ours, args.repeat)
        theirs_times = timed(theirs, args.repeat)
        cold_times = timed(ours_cold, max(3, args.repeat // 4))

        tracemalloc.start()
        read_sysfs(root)
        _, traced_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        ours_rss = int(subprocess.run(python, check=True, capture_output=True, text=True).stdout)
        theirs_rss = int(
            subprocess.run(
                [sys.executable, "-c", CHILD_RSS, *lstopo_cmd],
                env=lstopo_env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        spec = read_sysfs(root)

    print(
        f"tree: {archive.name} ({files} files; {len(spec.cpus)} CPUs, "
        f"{len(spec.numa_nodes)} NUMA nodes); best/median of {args.repeat}"
    )
    rows = [
        ("wall, best (ms)", min(ours_times) * 1e3, min(theirs_times) * 1e3),
        (
            "wall, median (ms)",
            statistics.median(ours_times) * 1e3,
            statistics.median(theirs_times) * 1e3,
        ),
        ("peak RSS of a process doing only this (MiB)", ours_rss / 1024, theirs_rss / 1024),
    ]
    print(f"{'':46} {'read_sysfs':>11} {'lstopo':>9} {'ours/lstopo':>12}")
    for label, mine, other in rows:
        print(f"{label:46} {mine:11.2f} {other:9.2f} {mine / other:12.2f}")
    print(f"{'tracemalloc peak of one read_sysfs (MiB)':46} {traced_peak / 2**20:11.2f}")
    print(f"{'fresh python + imports + read, best (ms)':46} {min(cold_times) * 1e3:11.2f}")


if __name__ == "__main__":
    main()
