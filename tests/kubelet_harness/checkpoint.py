"""The device manager's checkpoint file (kubelet: checkpoint/checkpoint.go), as JSON.

The kubelet keeps `kubelet_internal_checkpoint` in the device-plugins directory: every
container's devices (per NUMA node) with the plugin's Allocate response, and the healthy
devices of each registered resource. It is the only state a restarted kubelet has.
The kubelet adds a checksum; this one does not (nothing here corrupts it).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FILE_NAME = "kubelet_internal_checkpoint"


@dataclass
class CheckpointData:
    pod_device_entries: list[dict[str, Any]]
    registered_devices: dict[str, list[str]]


def write(path: Path, data: CheckpointData) -> None:
    text = json.dumps(
        {
            "Data": {
                "PodDeviceEntries": data.pod_device_entries,
                "RegisteredDevices": data.registered_devices,
            }
        },
        indent=1,
        sort_keys=True,
    )
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(text)
    os.replace(scratch, path)


def read(path: Path) -> CheckpointData | None:
    """None when there is no checkpoint (a fresh node)."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    data = raw["Data"]
    return CheckpointData(
        pod_device_entries=list(data.get("PodDeviceEntries") or []),
        registered_devices=dict(data.get("RegisteredDevices") or {}),
    )
