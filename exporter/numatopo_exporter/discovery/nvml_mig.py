"""The MIG devices of a GPU in MIG mode, through NVML (I/O through the caller's session).

A MIG device's profile is what `nvidia-smi` prints and the device plugin puts in the resource name
(`3g.40gb`; `1c.3g.40gb` for a compute instance smaller than its GPU instance). NVML's device name
ends in it ("NVIDIA A100-SXM4-80GB MIG 3g.40gb"); without that, it is built from
`nvmlDeviceGetAttributes`: `<gpu slices>g.<memory GiB, rounded up>gb`.
"""

from __future__ import annotations

import math
import re
from typing import Any, Protocol

from numatopo_engine.model import MigDevice

_NAME_PROFILE = re.compile(r"\bMIG\s+(?P<profile>(?:\d+c\.)?\d+g\.\d+gb(?:\+[a-z]+)?)\s*$")


class Session(Protocol):
    nvml: Any
    notices: list[str]

    def call(self, where: str, name: str, *args: Any, quiet: bool = False) -> Any: ...


def profile_from(name: str, attributes: Any) -> str | None:
    """The MIG profile from the device name, else from its attributes; None if neither says."""
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


def read_mig_devices(s: Session, index: int, handle: Any, first: int) -> list[MigDevice]:
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
