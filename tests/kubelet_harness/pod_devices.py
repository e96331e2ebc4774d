"""Which devices each container holds (kubelet: pod_devices.go).

pod uid -> container name -> resource -> (device IDs per NUMA node, the plugin's
Allocate response for the container). A device without topology is filed under the
fake NUMA node -1, as the kubelet does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format

from numatopo_exporter.kubelet_api import deviceplugin_pb2 as api

NODE_WITHOUT_TOPOLOGY = -1

# NUMA node -> device IDs (kubelet: checkpoint.DevicesPerNUMA)
DevicesPerNuma = dict[int, list[str]]


def devices_of(per_numa: Mapping[int, Iterable[str]]) -> set[str]:
    """kubelet: DevicesPerNUMA.Devices, every ID once."""
    return {device for ids in per_numa.values() for device in ids}


@dataclass
class DeviceAllocateInfo:
    device_ids: DevicesPerNuma
    alloc_resp: api.ContainerAllocateResponse | None


@dataclass
class ContainerRunOptions:
    """kubelet: DeviceRunContainerOptions, what the runtime is told for a container."""

    envs: dict[str, str] = field(default_factory=dict)
    mounts: list[api.Mount] = field(default_factory=list)
    devices: list[api.DeviceSpec] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: list[str] = field(default_factory=list)


class PodDevices:
    def __init__(self) -> None:
        self.devs: dict[str, dict[str, dict[str, DeviceAllocateInfo]]] = {}

    def pods(self) -> set[str]:
        return set(self.devs)

    def has_pod(self, pod_uid: str) -> bool:
        return pod_uid in self.devs

    def insert(
        self,
        pod_uid: str,
        container: str,
        resource: str,
        devices: DevicesPerNuma,
        response: api.ContainerAllocateResponse | None,
    ) -> None:
        containers = self.devs.setdefault(pod_uid, {})
        containers.setdefault(container, {})[resource] = DeviceAllocateInfo(devices, response)

    def delete(self, pod_uids: Iterable[str]) -> None:
        for uid in pod_uids:
            self.devs.pop(uid, None)

    def container_devices(self, pod_uid: str, container: str, resource: str) -> set[str] | None:
        """The IDs held by the container for the resource; None when nothing is cached."""
        info = self.devs.get(pod_uid, {}).get(container, {}).get(resource)
        return None if info is None else devices_of(info.device_ids)

    def add_container_allocated_resources(
        self, pod_uid: str, container: str, allocated: MutableMapping[str, set[str]]
    ) -> None:
        for resource, info in self.devs.get(pod_uid, {}).get(container, {}).items():
            allocated[resource] = allocated.get(resource, set()) | devices_of(info.device_ids)

    def remove_container_allocated_resources(
        self, pod_uid: str, container: str, allocated: MutableMapping[str, set[str]]
    ) -> None:
        for resource, info in self.devs.get(pod_uid, {}).get(container, {}).items():
            allocated[resource] = allocated.get(resource, set()) - devices_of(info.device_ids)

    def devices(self) -> dict[str, set[str]]:
        """Every device held by a tracked pod, per resource (only answered allocations)."""
        held: dict[str, set[str]] = {}
        for containers in self.devs.values():
            for resources in containers.values():
                for resource, info in resources.items():
                    held.setdefault(resource, set())
                    if info.alloc_resp is not None:
                        held[resource] |= devices_of(info.device_ids)
        return held

    def to_checkpoint_data(self) -> list[dict[str, Any]]:
        entries = []
        for pod_uid, containers in self.devs.items():
            for container, resources in containers.items():
                for resource, info in resources.items():
                    if info.alloc_resp is None:
                        continue  # the kubelet cannot marshal a missing response either
                    entries.append(
                        {
                            "PodUID": pod_uid,
                            "ContainerName": container,
                            "ResourceName": resource,
                            "DeviceIDs": {
                                str(numa): list(ids) for numa, ids in info.device_ids.items()
                            },
                            "AllocResp": json_format.MessageToDict(info.alloc_resp),
                        }
                    )
        return entries

    def from_checkpoint_data(self, entries: Iterable[Mapping[str, Any]]) -> None:
        for entry in entries:
            response = json_format.ParseDict(entry["AllocResp"], api.ContainerAllocateResponse())
            devices = {int(numa): list(ids) for numa, ids in entry["DeviceIDs"].items()}
            self.insert(
                entry["PodUID"], entry["ContainerName"], entry["ResourceName"], devices, response
            )

    def device_run_container_options(
        self, pod_uid: str, container: str
    ) -> ContainerRunOptions | None:
        """Merge the Allocate responses of every resource of the container; the first
        setting of an env, mount, device node or annotation wins, as in the kubelet."""
        resources = self.devs.get(pod_uid, {}).get(container)
        if resources is None:
            return None
        options = ContainerRunOptions()
        mounts: set[str] = set()
        device_paths: set[str] = set()
        for info in resources.values():
            response = info.alloc_resp
            if response is None:
                continue
            for key, value in response.envs.items():
                options.envs.setdefault(key, value)
            for device in response.devices:
                if device.container_path not in device_paths:
                    device_paths.add(device.container_path)
                    options.devices.append(device)
            for mount in response.mounts:
                if mount.container_path not in mounts:
                    mounts.add(mount.container_path)
                    options.mounts.append(mount)
            for key, value in response.annotations.items():
                options.annotations.setdefault(key, value)
            for cdi in response.cdi_devices:
                if cdi.name not in options.cdi_devices:
                    options.cdi_devices.append(cdi.name)
        return options

    def get_container_devices(
        self, pod_uid: str, container: str
    ) -> dict[str, dict[str, list[int] | None]] | None:
        """resource -> device ID -> its NUMA nodes (None: no topology); kubelet:
        getContainerDevices, read by the PodResources server."""
        resources = self.devs.get(pod_uid, {}).get(container)
        if resources is None:
            return None
        found: dict[str, dict[str, list[int] | None]] = {}
        for resource, info in resources.items():
            if not info.device_ids:
                continue
            per_device: dict[str, list[int] | None] = {}
            for numa, ids in info.device_ids.items():
                for device in ids:
                    if numa == NODE_WITHOUT_TOPOLOGY:
                        per_device[device] = None
                        continue
                    before = per_device.get(device)
                    per_device[device] = [numa, *(before or [])]
            found[resource] = per_device
        return found
