"""Gather the topology-relevant part of a node's `/sys` and `/proc` into a `.tar.gz`.

The archive is a sysfs tree as numatopo's tests read them: drop it into a folder of
`tests/fixtures/sysfs/` (named as hwloc names its trees, see the README there) and the
sysfs reader's tests, the lstopo cross-checks and the integration tests pick it up. Read
it yourself with `numatopo inspect --sysfs-root <extracted>/<name> --no-nvml`.

Kept: what numatopo's sysfs reader and hwloc's lstopo read to describe the node (CPUs
and their caches, NUMA nodes with memory, distances and huge pages, PCI devices with
their class, ids, link and locality, network and RDMA devices), `/proc/meminfo` and
`/proc/cpuinfo`, and the symlinks that tie them together. Left out: everything else,
notably DMI tables (serial numbers), MAC addresses and GUIDs, drivers' own attributes.
File owners and times are zeroed: capturing an unchanged node twice gives the same bytes.
numatopo reads the archive as it reads the node; lstopo may not where the capturing
process was confined to a cpuset cgroup (not gathered: the archive is the whole node)
or where memory-only nodes hang under DAX devices (not gathered).

Usage:
    python scripts/capture_sysfs.py 64amd64-2n16c+8gpu.tar.gz
    python scripts/capture_sysfs.py --root /host OUT.tar.gz   # a node mounted elsewhere
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import re
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SUFFIX = ".tar.gz"
MAX_FILE_BYTES = 65536  # sysfs attributes are one page; PCI `config` is 4 KiB at most

CPU_FILES = re.compile(
    r"online|possible|present|offline|isolated|kernel_max"
    r"|physical_package_id|die_id|cluster_id|core_id|book_id|drawer_id"
    r"|(core|thread|book|drawer)_siblings(_list)?|(core|package|die|cluster)_cpus(_list)?"
    r"|level|type|size|id|shared_cpu_list|shared_cpu_map|coherency_line_size"
    r"|ways_of_associativity|number_of_sets|physical_line_partition"
)
NODE_FILES = re.compile(
    r"online|possible|has_cpu|has_memory|has_normal_memory|has_generic_initiator"
    r"|cpulist|cpumap|meminfo|distance|nr_hugepages|free_hugepages"
    r"|(read|write)_(bandwidth|latency)"  # nodeN/accessK/initiators: memory tiers (HMAT)
)
PCI_FILES = re.compile(
    r"class|vendor|device|subsystem_vendor|subsystem_device|revision|config"
    r"|numa_node|local_cpulist|local_cpus|cpulistaffinity|cpuaffinity"
    r"|(current|max)_link_(speed|width)"
    r"|dev_id|dev_port|type|operstate|phys_port_name"
    r"|node_type|link_layer|state|phys_state|rate"
)
# Links that lead out of what is gathered (drivers, buses, firmware, memory blocks):
# dangling in the archive and read by no one.
SKIPPED_LINKS = re.compile(
    r"driver|subsystem|firmware_node|iommu|iommu_group|of_node|module|bdi|memory\d+"
)
HOST_BRIDGE = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}")


@dataclass
class Capture:
    """What is gathered, by path relative to the root: file contents and link targets."""

    root: Path
    files: dict[str, bytes] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)

    def walk(self, top: str, names: re.Pattern[str], depth: int) -> None:
        """Files under `top` whose name matches `names`, and its links, `depth` levels down."""
        start = self.root / top
        base = len(start.parts)
        for directory, dirs, files in os.walk(start):
            here = Path(directory)
            if len(here.parts) - base >= depth:
                dirs[:] = []
            for name in [*dirs, *files]:
                path = here / name
                if path.is_symlink():
                    self.link(path)
                    if name in dirs:
                        dirs.remove(name)  # os.walk does not follow it; be explicit
                elif name in files and names.fullmatch(name):
                    self.file(path)

    def file(self, path: Path) -> None:
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_FILE_BYTES)
        except OSError:
            return  # write-only, or the driver refuses to answer: not topology
        self.files[self._relative(path)] = data

    def link(self, path: Path) -> None:
        if SKIPPED_LINKS.fullmatch(path.name):
            return
        target = os.readlink(path)
        # An absolute target names the gathering host, not the tree; it would not
        # survive extraction (tests/sysfs_trees.py drops links leaving the tree).
        if not os.path.isabs(target):
            self.links[self._relative(path)] = target

    def _relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()


def host_bridges(root: Path) -> list[str]:
    """The host bridge folders (`devices/.../pci0000:00`) of every PCI device, relative."""
    listing = root / "sys" / "bus" / "pci" / "devices"
    found: set[str] = set()
    for entry in sorted(listing.iterdir()) if listing.is_dir() else []:
        if not entry.is_symlink():
            continue  # a copied tree: its devices are plain folders here, walked below
        real = Path(os.path.normpath(listing / os.readlink(entry)))
        if not real.is_relative_to(root):
            continue
        parts = real.relative_to(root).parts
        for index, part in enumerate(parts):
            if HOST_BRIDGE.fullmatch(part):
                found.add("/".join(parts[: index + 1]))
                break
    return sorted(found)


def capture(root: Path) -> Capture:
    gathered = Capture(root)
    gathered.walk("sys/devices/system/cpu", CPU_FILES, 4)
    gathered.walk("sys/devices/system/node", NODE_FILES, 4)
    gathered.walk("sys/kernel/mm/hugepages", NODE_FILES, 2)
    for bridge in host_bridges(root):
        # Deep enough for nested PCIe switches and .../infiniband/mlx5_0/ports/1/link_layer.
        gathered.walk(bridge, PCI_FILES, 16)
    for listing in ("sys/bus/pci/devices", "sys/class/net", "sys/class/infiniband"):
        if (root / listing).is_dir():
            gathered.walk(listing, PCI_FILES, 1)
    for name in ("proc/meminfo", "proc/cpuinfo"):
        if (root / name).is_file():
            gathered.file(root / name)
    return gathered


def members(gathered: Capture, top: str) -> Iterator[tuple[tarfile.TarInfo, bytes | None]]:
    """Tar members in path order, owned by nobody in particular, at time 0."""
    for path in sorted({*gathered.files, *gathered.links}):
        info = tarfile.TarInfo(f"{top}/{path}")
        info.uid = info.gid = 0
        info.mtime = 0
        if path in gathered.links:
            info.type = tarfile.SYMTYPE
            info.linkname = gathered.links[path]
            info.mode = 0o777
            yield info, None
        else:
            data = gathered.files[path]
            info.size = len(data)
            info.mode = 0o444
            yield info, data


def write_archive(gathered: Capture, out: Path) -> None:
    top = out.name.removesuffix(SUFFIX)
    # gzip's header holds a time and a file name unless told otherwise.
    with (
        out.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed,
        tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for info, data in members(gathered, top):
            tar.addfile(info, None if data is None else io.BytesIO(data))


def suggested_name(gathered: Capture) -> str:
    """The start of an hwloc-style name: PUs, architecture, NUMA nodes (`16intel64-1n`)."""
    paths = [*gathered.files, *gathered.links]
    cpus = {m[1] for p in paths if (m := re.match(r"sys/devices/system/cpu/(cpu\d+)/", p))}
    nodes = {m[1] for p in paths if (m := re.match(r"sys/devices/system/node/(node\d+)/", p))}
    cpuinfo = gathered.files.get("proc/cpuinfo", b"")
    vendors = {b"GenuineIntel": "intel64", b"AuthenticAMD": "amd64"}
    arch = next((name for vendor, name in vendors.items() if vendor in cpuinfo), "")
    return f"{len(cpus)}{arch or os.uname().machine}-{max(len(nodes), 1)}n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python scripts/capture_sysfs.py",
        description=(
            "Gather the topology-relevant part of a node's /sys and /proc into a .tar.gz "
            "that numatopo's tests read (tests/fixtures/sysfs/README.md)."
        ),
    )
    parser.add_argument(
        "out",
        type=Path,
        metavar="OUT.tar.gz",
        help="the archive to write; its name (without .tar.gz) is the folder inside it",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=Path("/"),
        help="where the node's / is (default /; /host in a pod that mounts it there)",
    )
    args = parser.parse_args(argv)
    out: Path = args.out
    root: Path = args.root
    if not out.name.endswith(SUFFIX) or out.name == SUFFIX:
        parser.error(f"OUT must be a file name ending in {SUFFIX}, not {str(out)!r}")
    if not (root / "sys").is_dir():
        parser.error(f"--root {root}: no sys/ folder there")
    gathered = capture(root)
    write_archive(gathered, out)
    print(
        f"{out}: {len(gathered.files)} files, {len(gathered.links)} links "
        f"(hwloc-style name starts {suggested_name(gathered)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
