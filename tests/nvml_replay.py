"""`ReplayNvml`: a stand-in for the pynvml module that answers from a recording
(`numatopo_exporter.discovery.nvml_recording` describes the file), so the NVML reader is
tested without a GPU.

It answers a call it has no record of with NVMLError_NotSupported, which is what NVML
says for a link number or a feature a device does not have. It raises the real pynvml
error classes (the package is importable without a driver), so the reader sees exactly
the exceptions NVML raises.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from numatopo_exporter.discovery.errors import DiscoveryError
from numatopo_exporter.discovery.nvml_recording import FORMAT, RECORDED_CALLS, call_key

__all__ = ["ReplayNvml"]


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
        if errors is None:
            import pynvml as errors
        self._calls = calls
        self._errors = errors

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
        key = call_key(args, lambda h: h.index if isinstance(h, _Handle) else None)
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
