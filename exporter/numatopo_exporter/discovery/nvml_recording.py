"""Record the NVML calls the reader makes, for replay without a GPU (in the tests).

A recording is a JSON file:

    {"format": "numatopo-nvml-recording/v1", "about": "...", "synthetic": false,
     "calls": {"nvmlDeviceGetCount": {"": 8},
               "nvmlDeviceGetPciInfo": {"0": {"busId": "00000000:18:00.0", ...}},
               "nvmlDeviceGetNvLinkState": {"0,17": 1},
               "nvmlDeviceGetNumaNodeId": {"3": {"nvmlError": "NotSupported"}}}}

Each call is keyed by its arguments, with a device handle written as its index (a MIG device's as
`<GPU index>:mig<slot>`, what nvmlDeviceGetMigDeviceHandleByIndex answers). A struct is stored as a
dict of its fields, bytes as text, an NVML error by its pynvml class name without the `NVMLError_`
prefix. A call NVML answers with NVMLError_NotSupported for a link number or a feature a device does
not have need not be listed: a replay answers unrecorded calls that way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

FORMAT = "numatopo-nvml-recording/v1"

RECORDED_CALLS = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetName",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetAttributes",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
)


class Recorder:
    """Wraps the real pynvml module and writes down every call and its answer."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._handles: dict[int, int | str] = {}
        self._keep: list[Any] = []  # handles stay alive, so their id() stays unique
        self.calls: dict[str, dict[str, Any]] = {}

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._nvml, name)
        if name not in RECORDED_CALLS:
            return target

        def recorded(*args: Any) -> Any:
            key = call_key(args, lambda h: self._handles.get(id(h)))
            try:
                value = target(*args)
            except self._nvml.NVMLError as exc:
                error = type(exc).__name__.removeprefix("NVMLError_")
                self.calls.setdefault(name, {})[key] = {"nvmlError": error}
                raise
            if name == "nvmlDeviceGetHandleByIndex":
                self._handles[id(value)] = int(args[0])
                self._keep.append(value)
                stored: Any = int(args[0])
            elif name == "nvmlDeviceGetMigDeviceHandleByIndex":
                stored = f"{self._handles.get(id(args[0]))}:mig{args[1]}"
                self._handles[id(value)] = stored
                self._keep.append(value)
            else:
                stored = _plain(value)
            self.calls.setdefault(name, {})[key] = stored
            return value

        return recorded

    def write(self, out: Path, *, about: str = "") -> None:
        """The recording so far, as a file a replay loads."""
        document = {"format": FORMAT, "about": about, "synthetic": False, "calls": self.calls}
        out.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def call_key(args: tuple[Any, ...], handle_index: Callable[[Any], int | str | None]) -> str:
    """How a call's arguments are written in a recording (a handle as its index)."""
    return ",".join(str(arg if (index := handle_index(arg)) is None else index) for arg in args)


def _plain(value: Any) -> Any:
    """A JSON-ready copy of what pynvml returned (ctypes structs become dicts)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, SimpleNamespace):  # recording a replay
        return {name: _plain(v) for name, v in vars(value).items()}
    fields = getattr(value, "_fields_", None)
    if fields is not None:
        return {name: _plain(getattr(value, name)) for name, *_ in fields}
    return value
