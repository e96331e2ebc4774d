"""Reading single sysfs/procfs files, with every failure turned into a `DiscoveryError`.

An `OSError` (missing file, a directory where a file should be, a dangling symlink, EIO from a
driver) and unparsable content both come out as a message that names the file. The sysfs reader
runs on every resync of every node, so these work on plain `str` paths and `os` calls (no
`pathlib` objects in the hot loops) and read each file once.
"""

from __future__ import annotations

import os

from numatopo_engine.cpuset import CPUSet, CPUSetParseError
from numatopo_exporter.discovery.errors import DiscoveryError


def read_text(path: str) -> str:
    """The whole file, stripped; a `DiscoveryError` naming the file if it cannot be read."""
    try:
        return _read(path)
    except OSError as exc:
        raise DiscoveryError(f"cannot read: {exc.strerror or exc}", path) from None


def read_optional(path: str) -> str | None:
    """The file's text, or None when it does not exist (an older kernel, another arch); one that
    exists but cannot be read (a directory, a dangling symlink, EIO) is still an error."""
    try:
        return _read(path)
    except FileNotFoundError:
        if os.path.lexists(path):
            raise DiscoveryError("dangling symlink", path) from None
        return None
    except OSError as exc:
        raise DiscoveryError(f"cannot read: {exc.strerror or exc}", path) from None


def _read(path: str) -> str:
    with open(path, "rb") as handle:
        data = handle.read()
    # Some drivers and firmware-backed attributes end their value with a NUL byte (a C
    # string copied whole); it is padding, not content.
    data = data.rstrip(b"\x00 \t\n")
    try:
        return data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise DiscoveryError("is not text (non-ASCII bytes)", path) from None


def read_int(path: str) -> int:
    """A file holding one integer (`nr_hugepages`)."""
    text = read_text(path)
    try:
        return int(text)
    except ValueError:
        raise DiscoveryError(f"expected an integer, found {text[:40]!r}", path) from None


def read_cpus(directory: str, list_name: str, mask_name: str) -> CPUSet | None:
    """The list-format file of `directory` (`cpulist`, `thread_siblings_list`) if it exists, else
    the mask-format one older kernels write alone (`cpumap`, `thread_siblings`), else None."""
    list_path, mask_path = os.path.join(directory, list_name), os.path.join(directory, mask_name)
    text = read_optional(list_path)
    if text is not None:
        return parse_cpus(text, list_path)
    text = read_optional(mask_path)
    if text is not None:
        return parse_cpus(text, mask_path, mask=True)
    return None


def parse_cpus(text: str, path: str, *, mask: bool = False) -> CPUSet:
    """`text`, already read from `path`, in the kernel list (or `mask`) format."""
    try:
        return CPUSet.parse_mask(text) if mask else CPUSet.parse(text)
    except CPUSetParseError as exc:
        raise DiscoveryError(str(exc), path) from None


def list_dir(path: str) -> list[str]:
    """Entry names of a directory, or [] when it does not exist."""
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise DiscoveryError(f"cannot list directory: {exc.strerror or exc}", path) from None
