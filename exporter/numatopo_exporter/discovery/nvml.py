"""NVIDIA GPUs, NVLinks and PCIe path classes from the driver, through NVML (pynvml).

Tested by replaying recordings (`nvml_recording`; `tests/nvml_replay.py`): a real H200 node's (one
GPU, NUMA node and NVLink NotSupported) and synthetic ones for NVLink, NVSwitch and MIG. `python -m
numatopo_exporter.discovery.nvml --record OUT.json` records a machine; a file dropped into
`tests/fixtures/nvml/` joins the suite.

Per GPU (NVML index order = PCI bus order): uuid, PCI bus id (normalised), name, total memory, MIG
mode and devices, NUMA node (`nvmlDeviceGetNumaNodeId`: only coherent platforms such as Grace
answer; elsewhere None, and the merge takes sysfs's), each NVLink that is up and the PCI device at
its other end, and `nvmlDeviceGetTopologyCommonAncestor` for every GPU pair (-> `gpuPaths`). An
NVLink ending at a GPU of this node is a direct link; at another NVIDIA device, an NVSwitch (GPUs
reaching switches are joined all-to-all, `nvlink.nvlinks`); at another vendor's device (IBM
POWER9 NPUs: a CPU link), no GPU pair.

A GPU whose calls fail is still listed with what could be read, plus a notice: one sick GPU (Xid
79, "GPU has fallen off the bus") must not hide the other seven.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import re
import sys
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from numatopo_engine.model import Gpu, GpuLink, GpuPath, MigDevice, PathType
from numatopo_exporter.discovery.errors import SourceUnavailableError
from numatopo_exporter.discovery.nvlink import nvlinks
from numatopo_exporter.discovery.nvml_recording import Recorder
from numatopo_exporter.discovery.pci import bus_id_key

SOURCE = "nvml"
NO_DRIVER = "no NVIDIA driver (libnvidia-ml.so not loadable): GPU topology from NVML skipped"

NVIDIA_VENDOR_ID = 0x10DE
NVLINK_MAX_LINKS = 18  # used when the module does not say (pynvml >= 12.560 says 36)
_FEATURE_ENABLED = 1
_NO_DRIVER_ERRORS = ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")
_NOT_THERE_ERRORS = (
    "NVMLError_NotSupported",
    "NVMLError_InvalidArgument",
    "NVMLError_FunctionNotFound",
)
# nvmlGpuTopologyLevel_t -> nvidia-smi's path class. INTERNAL is two GPUs on one board
# (K80, Tesla M60): they share the board's PCIe switch.
_TOPOLOGY_LEVELS = {
    0: PathType.PIX,
    10: PathType.PIX,
    20: PathType.PXB,
    30: PathType.PHB,
    40: PathType.NODE,
    50: PathType.SYS,
}
_NAME_PROFILE = re.compile(r"\bMIG\s+(?P<profile>(?:\d+c\.)?\d+g\.\d+gb(?:\+[a-z]+)?)\s*$")


@dataclass(frozen=True)
class GpuReading:
    """What NVML says about this node's GPUs; `discover.merge_gpu_reading` folds it in."""

    gpus: list[Gpu] = field(default_factory=list)
    gpu_links: list[GpuLink] = field(default_factory=list)
    gpu_paths: list[GpuPath] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)


class _Session:
    """One NVML session: calls that turn NVML errors into notices."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.notices: list[str] = []

    def call(self, where: str, name: str, *args: Any, quiet: bool = False) -> Any:
        """NVML's `name(*args)`, or None when it fails; a notice (`where: name: error`) unless
        `quiet` and the feature is simply absent."""
        try:
            return getattr(self.nvml, name)(*args)
        except self.nvml.NVMLError as exc:
            if not (quiet and _is(self.nvml, exc, _NOT_THERE_ERRORS)):
                what = f"{where}: {name}" if where else name
                self.notices.append(f"{what}: {_error_text(exc)}")
            return None


def read_nvml(nvml: Any | None = None) -> GpuReading:
    """Read every GPU through `nvml` (the pynvml module, or a replay of a recording)."""
    module = _import_pynvml() if nvml is None else nvml
    try:
        module.nvmlInit()
    except module.NVMLError as exc:
        if _is(module, exc, _NO_DRIVER_ERRORS):
            raise SourceUnavailableError(NO_DRIVER) from exc
        raise SourceUnavailableError(
            f"NVML did not start ({_error_text(exc)}): GPU topology from NVML skipped"
        ) from exc
    try:
        return _read(_Session(module))
    finally:
        with contextlib.suppress(module.NVMLError):
            module.nvmlShutdown()


def _import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:
        raise SourceUnavailableError(NO_DRIVER + " (the pynvml package is not installed)") from exc
    return pynvml


def _is(nvml: Any, exc: BaseException, names: tuple[str, ...]) -> bool:
    """Whether `exc` is one of the module's NVML error classes `names`."""
    classes = tuple(c for n in names if isinstance(c := getattr(nvml, n, None), type))
    return bool(classes) and isinstance(exc, classes)


def _error_text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _bus_id(info: Any) -> str:
    return bus_id_key(nvml_text(getattr(info, "busId", "")))


def _read(s: _Session) -> GpuReading:
    count = s.call("", "nvmlDeviceGetCount") or 0
    handles: dict[int, Any] = {}
    gpus: list[Gpu] = []
    for index in range(count):
        handle = s.call(f"GPU {index}", "nvmlDeviceGetHandleByIndex", index)
        if handle is not None:
            handles[index] = handle
        gpus.append(Gpu(index=index) if handle is None else _read_gpu(s, index, handle))
    # MIG devices take the device indices after the GPUs', in GPU then slot order.
    next_index = count
    for position, gpu in enumerate(gpus):
        if gpu.mig_mode and gpu.index in handles:
            devices = read_mig_devices(s, gpu.index, handles[gpu.index], next_index)
            next_index += len(devices)
            gpus[position] = gpu.model_copy(update={"mig_devices": devices})

    by_bus = {g.pci_bus_id: g.index for g in gpus if g.pci_bus_id}
    max_links = int(getattr(s.nvml, "NVML_NVLINK_MAX_LINKS", NVLINK_MAX_LINKS))
    direct: dict[tuple[int, int], int] = {}
    via_switch: dict[int, int] = {}
    for index, handle in handles.items():
        for bus, vendor in _active_link_ends(s, index, handle, max_links):
            if bus in by_bus:
                key = (index, by_bus[bus])
                direct[key] = direct.get(key, 0) + 1
            elif vendor == NVIDIA_VENDOR_ID:
                via_switch[index] = via_switch.get(index, 0) + 1
    links = nvlinks(direct, via_switch, {g.index: g.model for g in gpus})

    paths: list[GpuPath] = []
    for a, b in combinations(sorted(handles), 2):
        level = s.call(
            f"GPUs {a}-{b}", "nvmlDeviceGetTopologyCommonAncestor", handles[a], handles[b],
            quiet=True,
        )  # fmt: skip
        if level in _TOPOLOGY_LEVELS:
            paths.append(GpuPath(a=a, b=b, path=_TOPOLOGY_LEVELS[level]))
    return GpuReading(gpus=gpus, gpu_links=links, gpu_paths=paths, notices=s.notices)


def _read_gpu(s: _Session, index: int, handle: Any) -> Gpu:
    where = f"GPU {index}"
    uuid = nvml_text(s.call(where, "nvmlDeviceGetUUID", handle))
    pci = s.call(where, "nvmlDeviceGetPciInfo", handle)
    name = nvml_text(s.call(where, "nvmlDeviceGetName", handle))
    memory = s.call(where, "nvmlDeviceGetMemoryInfo", handle)
    numa = s.call(where, "nvmlDeviceGetNumaNodeId", handle, quiet=True)
    mig = s.call(where, "nvmlDeviceGetMigMode", handle, quiet=True)
    return Gpu(
        index=index,
        uuid=uuid,
        pci_bus_id=_bus_id(pci) if pci is not None else "",
        numa=numa if isinstance(numa, int) and numa >= 0 else None,
        vendor="nvidia",
        model=name,
        memory_bytes=int(getattr(memory, "total", 0) or 0),
        resource="nvidia.com/gpu",
        mig_mode=None if mig is None else bool(mig[0] == _FEATURE_ENABLED),
    )


def profile_from(name: str, attributes: Any) -> str | None:
    """The MIG profile (what `nvidia-smi` prints and the device plugin puts in the resource name:
    `3g.40gb`; `1c.3g.40gb` for a compute instance smaller than its GPU instance) from NVML's device
    name ("NVIDIA A100-SXM4-80GB MIG 3g.40gb"), else from `nvmlDeviceGetAttributes`
    (`<gpu slices>g.<memory GiB, rounded up>gb`); None if neither says."""
    found = _NAME_PROFILE.search(name)
    if found:
        return found["profile"]
    if attributes is None:
        return None
    slices = int(getattr(attributes, "gpuInstanceSliceCount", 0) or 0)
    compute = int(getattr(attributes, "computeInstanceSliceCount", 0) or 0)
    memory_mb = int(getattr(attributes, "memorySizeMB", 0) or 0)
    if not slices or not memory_mb:
        return None
    profile = f"{slices}g.{math.ceil(memory_mb / 1024)}gb"
    return f"{compute}c.{profile}" if 0 < compute < slices else profile


def read_mig_devices(s: _Session, index: int, handle: Any, first: int) -> list[MigDevice]:
    """The MIG devices of GPU `index`, numbered from device index `first`."""
    nvml = s.nvml
    where = f"GPU {index}"
    slots = s.call(where, "nvmlDeviceGetMaxMigDeviceCount", handle)
    found: list[MigDevice] = []
    for slot in range(int(slots or 0)):
        here = f"{where} MIG slot {slot}"
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError as exc:
            if not isinstance(exc, nvml.NVMLError_NotFound):  # NotFound: an empty slot
                s.notices.append(f"{here}: nvmlDeviceGetMigDeviceHandleByIndex: {exc}")
            continue
        name = nvml_text(s.call(here, "nvmlDeviceGetName", mig))
        attributes = s.call(here, "nvmlDeviceGetAttributes", mig, quiet=True)
        profile = profile_from(name, attributes)
        if profile is None:
            s.notices.append(f"{here}: MIG device skipped: no profile in its name {name!r}")
            continue
        memory = s.call(here, "nvmlDeviceGetMemoryInfo", mig)
        gpu_instance = s.call(here, "nvmlDeviceGetGpuInstanceId", mig, quiet=True)
        compute_instance = s.call(here, "nvmlDeviceGetComputeInstanceId", mig, quiet=True)
        found.append(
            MigDevice(
                index=first + len(found),
                profile=profile,
                uuid=nvml_text(s.call(here, "nvmlDeviceGetUUID", mig)),
                gpu_instance=gpu_instance if isinstance(gpu_instance, int) else None,
                compute_instance=compute_instance if isinstance(compute_instance, int) else None,
                memory_bytes=int(getattr(memory, "total", 0) or 0),
            )
        )
    return found


def nvml_text(value: str | bytes | None) -> str:
    """A string NVML returned (bytes from older pynvml releases) as text."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value or ""


def _active_link_ends(
    s: _Session, index: int, handle: Any, max_links: int
) -> list[tuple[str, int]]:
    """(PCI bus id, vendor id) of the far end of each active NVLink."""
    ends: list[tuple[str, int]] = []
    for link in range(max_links):
        where = f"GPU {index} link {link}"
        state = s.call(where, "nvmlDeviceGetNvLinkState", handle, link, quiet=True)
        if state != _FEATURE_ENABLED:
            continue
        remote = s.call(where, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        if remote is not None:
            device_id = int(getattr(remote, "pciDeviceId", 0) or 0)
            ends.append((_bus_id(remote), device_id & 0xFFFF))
    return ends


def record(nvml: Any, out: Path, *, about: str = "") -> GpuReading:
    """Run the reader against `nvml`, recording each call; write the recording to `out`."""
    recorder = Recorder(nvml)
    reading = read_nvml(recorder)
    recorder.write(out, about=about)
    return reading


def main(argv: list[str] | None = None) -> int:
    """`python -m numatopo_exporter.discovery.nvml --record OUT.json` on a GPU machine."""
    parser = argparse.ArgumentParser(
        prog="python -m numatopo_exporter.discovery.nvml",
        description="Record every NVML call the numatopo NVML reader makes, for replay in tests.",
    )
    parser.add_argument("--record", type=Path, required=True, metavar="OUT.json")
    parser.add_argument("--about", default="", help="what machine this is (kept in the file)")
    args = parser.parse_args(argv)
    try:
        reading = record(_import_pynvml(), args.record, about=args.about)
    except SourceUnavailableError as exc:
        print(f"numatopo: {exc}", file=sys.stderr)
        return 1
    print(f"recorded {len(reading.gpus)} GPUs, {len(reading.gpu_links)} GPU links -> {args.record}")
    for notice in reading.notices:
        print(f"notice: {notice}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
