"""Record the NVML calls the reader makes, and replay them without a GPU.

A recording is a JSON file:

    {"format": "numatopo-nvml-recording/v1", "about": "...", "synthetic": false,
     "calls": {"nvmlDeviceGetCount": {"": 8},
               "nvmlDeviceGetPciInfo": {"0": {"busId": "00000000:18:00.0", ...}},
               "nvmlDeviceGetNvLinkState": {"0,17": 1},
               "nvmlDeviceGetNumaNodeId": {"3": {"nvmlError": "NotSupported"}}}}

Each call is keyed by its arguments, with a device handle written as its index (a MIG
device's as `<GPU index>:mig<slot>`, what nvmlDeviceGetMigDeviceHandleByIndex answers). A
struct is stored as a dict of its fields, bytes as text, an NVML error by its
pynvml class name without the `NVMLError_` prefix. The replay answers a call it
has no record of with NVMLError_NotSupported, which is what NVML says for a link
number or a feature a device does not have, so recordings need not list those.

Replays use the real pynvml error classes (the package is importable without a
driver), so the reader sees exactly the exceptions NVML raises.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from numatopo_exporter.discovery.errors import DiscoveryError

__all__ = ["FORMAT", "RECORDED_CALLS", "Recorder", "ReplayNvml", "record"]

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


def _pynvml() -> Any:
    import pynvml

    return pynvml


class _Handle:
    """A replayed device handle: only its index matters (`"0:mig1"` for a MIG device:
    its GPU's index and its slot)."""

    def __init__(self, index: int | str) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<replayed GPU handle {self.index}>"


class ReplayNvml:
    """Looks like the pynvml module to the reader; answers from a recording."""

    def __init__(self, calls: dict[str, dict[str, Any]], errors: Any | None = None) -> None:
        self._calls = calls
        self._errors = errors if errors is not None else _pynvml()

    @classmethod
    def load(cls, path: Path) -> ReplayNvml:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise DiscoveryError(f"cannot read NVML recording: {exc}", path) from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise DiscoveryError(f"not an NVML recording (format is not {FORMAT!r})", path)
        return cls(data["calls"])

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVMLError", "NVML_")):
            return getattr(self._errors, name)
        if name not in RECORDED_CALLS:
            raise AttributeError(f"the NVML replay has no function {name}")
        return lambda *args: self._answer(name, args)

    def _answer(self, name: str, args: tuple[Any, ...]) -> Any:
        key = _key(args, lambda h: h.index if isinstance(h, _Handle) else None)
        recorded = self._calls.get(name, {})
        if name in ("nvmlInit", "nvmlShutdown") and key not in recorded:
            return None
        if key not in recorded:
            raise self._errors.NVMLError(self._errors.NVML_ERROR_NOT_SUPPORTED)
        value = recorded[key]
        if isinstance(value, dict) and "nvmlError" in value:
            error_class = getattr(self._errors, f"NVMLError_{value['nvmlError']}")
            raise error_class()
        if name == "nvmlDeviceGetHandleByIndex":
            return _Handle(int(value))
        if name == "nvmlDeviceGetMigDeviceHandleByIndex":
            return _Handle(str(value))
        if isinstance(value, dict):
            return SimpleNamespace(**value)
        return value


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
            key = _key(args, lambda h: self._handles.get(id(h)))
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


def record(nvml: Any, out: Path, *, about: str = "") -> Any:
    """Run the reader against `nvml`, recording each call; write the recording to `out`."""
    from numatopo_exporter.discovery.nvml import read_nvml

    recorder = Recorder(nvml)
    reading = read_nvml(recorder)
    document = {"format": FORMAT, "about": about, "synthetic": False, "calls": recorder.calls}
    out.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return reading


def _key(args: tuple[Any, ...], handle_index: Callable[[Any], int | str | None]) -> str:
    parts = []
    for arg in args:
        index = handle_index(arg)
        parts.append(str(index if index is not None else arg))
    return ",".join(parts)


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
