"""The kubelet's device manager, ported (kubelet: pkg/kubelet/cm/devicemanager/manager.go).

State and allocation logic follow the Go code function by function (names in
snake_case). Go iterates maps and sets in a random order; every such iteration here
goes through `_go_order`, a seeded shuffle, so that a test can never lean on an
accidental order (and a seed reproduces a run).
"""

from __future__ import annotations

import os
import random
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import grpc

from kubelet_harness import checkpoint
from kubelet_harness.endpoint import Endpoint, EndpointInfo, EndpointStoppedError
from kubelet_harness.pod_devices import (
    NODE_WITHOUT_TOPOLOGY,
    ContainerRunOptions,
    DevicesPerNuma,
    PodDevices,
)
from kubelet_harness.pods import Container, Pod
from numatopo_exporter.kubelet_api import deviceplugin_pb2 as api

if TYPE_CHECKING:
    from kubelet_harness.registration import PluginClient

HEALTHY = "Healthy"
_T = TypeVar("_T", str, int)

# (pod uid, container name) -> the Topology Manager's NUMA affinity, None for no hint
AffinityStore = Callable[[str, str], frozenset[int] | None]


class AllocationError(Exception):
    """An error of the device manager's Allocate: the kubelet fails the pod's admission
    (UnexpectedAdmissionError) with this message."""


@dataclass(frozen=True)
class DeviceInfo:
    """A device as its plugin last reported it (kubelet: pluginapi.Device)."""

    id: str
    health: str
    numa_nodes: tuple[int, ...] | None  # None: the plugin sent no topology

    @classmethod
    def from_api(cls, device: api.Device) -> DeviceInfo:
        has_topology = device.HasField("topology")
        nodes = tuple(node.ID for node in device.topology.nodes) if has_topology else None
        return cls(device.ID, device.health, nodes)

    def has_topology(self) -> bool:
        return bool(self.numa_nodes)


@dataclass(frozen=True)
class KubeletRpc:
    """A call the device manager made to a plugin (for assertions: 'no RPC')."""

    method: str
    resource: str
    devices: tuple[str, ...] = ()
    must_include: tuple[str, ...] = ()
    size: int = 0


class DeviceManager:
    def __init__(
        self,
        checkpoint_dir: Path,
        rng: random.Random,
        *,
        active_pods: Callable[[], Iterable[str]] = tuple,
        topology_affinity: AffinityStore = lambda _uid, _name: None,
    ) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.rng = rng
        self.active_pods = active_pods
        self.topology_affinity = topology_affinity

        self.endpoints: dict[str, EndpointInfo] = {}
        self.all_devices: dict[str, dict[str, DeviceInfo]] = {}
        self.healthy_devices: dict[str, set[str]] = {}
        self.unhealthy_devices: dict[str, set[str]] = {}
        self.allocated_devices: dict[str, set[str]] = {}
        self.pod_devices = PodDevices()
        self.devices_to_reuse: dict[str, dict[str, set[str]]] = {}
        self.rpcs: list[KubeletRpc] = []

    # ---- Go's random iteration order ------------------------------------------------

    def _go_order(self, items: Iterable[_T]) -> list[_T]:
        ordered = sorted(items)
        self.rng.shuffle(ordered)
        return ordered

    # ---- plugin lifecycle (ClientHandler) ---------------------------------------------

    def checkpoint_file(self) -> Path:
        return self.checkpoint_dir / checkpoint.FILE_NAME

    def cleanup_plugin_directory(self, directory: Path) -> None:
        """Remove every socket in the directory but the checkpoint (kubelet:
        CleanupPluginDirectory): plugins watch for this to register again."""
        for name in os.listdir(directory):
            path = directory / name
            if path == self.checkpoint_file():
                continue
            try:
                mode = os.stat(path).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode) or not stat.S_ISSOCK(mode):
                continue
            path.unlink(missing_ok=True)

    async def plugin_connected(self, resource: str, client: PluginClient) -> None:
        """kubelet: PluginConnected. Ask the options, make the endpoint current."""
        options = await client.api.GetDevicePluginOptions(api.Empty())
        self.endpoints[resource] = EndpointInfo(Endpoint(resource, client.api), options)

    def plugin_disconnected(self, resource: str) -> None:
        """kubelet: PluginDisconnected. Every device of the resource becomes unhealthy and
        the current endpoint stops, whichever client's disconnection brought it here."""
        info = self.endpoints.get(resource)
        if info is not None:
            self.mark_resource_unhealthy(resource)
            info.endpoint.set_stop_time(time.monotonic())

    def plugin_list_and_watch_receiver(
        self, resource: str, response: api.ListAndWatchResponse
    ) -> None:
        self.generic_device_update_callback(
            resource, [DeviceInfo.from_api(d) for d in response.devices]
        )

    def generic_device_update_callback(self, resource: str, devices: list[DeviceInfo]) -> None:
        """A ListAndWatch update replaces the resource's whole device list."""
        self.healthy_devices[resource] = set()
        self.unhealthy_devices[resource] = set()
        self.all_devices[resource] = {}
        for device in devices:
            self.all_devices[resource][device.id] = device
            if device.health == HEALTHY:
                self.healthy_devices[resource].add(device.id)
            else:
                self.unhealthy_devices[resource].add(device.id)
        self.write_checkpoint()

    def mark_resource_unhealthy(self, resource: str) -> None:
        healthy = self.healthy_devices.get(resource, set())
        self.healthy_devices[resource] = set()
        self.unhealthy_devices[resource] = self.unhealthy_devices.get(resource, set()) | healthy

    def get_capacity(self) -> tuple[dict[str, int], dict[str, int], list[str]]:
        """(capacity, allocatable, deleted resources), as the node status reports them."""
        capacity: dict[str, int] = {}
        allocatable: dict[str, int] = {}
        deleted: set[str] = set()
        needs_checkpoint = False
        for table, counts_as_allocatable in (
            (self.healthy_devices, True),
            (self.unhealthy_devices, False),
        ):
            for resource in list(table):
                info = self.endpoints.get(resource)
                if info is None or info.endpoint.stop_grace_period_expired():
                    self.endpoints.pop(resource, None)
                    del table[resource]
                    deleted.add(resource)
                    needs_checkpoint = True
                    continue
                capacity[resource] = capacity.get(resource, 0) + len(table[resource])
                if counts_as_allocatable:
                    allocatable[resource] = len(table[resource])
        if needs_checkpoint:
            self.write_checkpoint()
        return capacity, allocatable, sorted(deleted)

    # ---- checkpoint ---------------------------------------------------------------------

    def write_checkpoint(self) -> None:
        registered = {r: sorted(ids) for r, ids in self.healthy_devices.items()}
        data = checkpoint.CheckpointData(self.pod_devices.to_checkpoint_data(), registered)
        checkpoint.write(self.checkpoint_file(), data)

    def read_checkpoint(self) -> None:
        """kubelet: readCheckpoint. The devices held by containers come back; each
        registered resource comes back with no devices and a stopped endpoint, so its
        capacity is zero until its plugin registers again."""
        data = checkpoint.read(self.checkpoint_file())
        if data is None:
            return
        self.pod_devices.from_checkpoint_data(data.pod_device_entries)
        self.allocated_devices = self.pod_devices.devices()
        for resource in data.registered_devices:
            self.healthy_devices[resource] = set()
            self.unhealthy_devices[resource] = set()
            self.endpoints[resource] = EndpointInfo(Endpoint.stopped(resource), None)

    # ---- admission ----------------------------------------------------------------------

    async def allocate(self, pod: Pod, container: Container) -> None:
        """kubelet: Allocate, called for each container of the pod, init containers first.

        Devices of a (non-restartable) init container stay reusable by the containers
        after it; an app container's and a sidecar's devices are taken out of the pool.
        """
        uid = pod.uid
        self.devices_to_reuse.setdefault(uid, {})
        for other in list(self.devices_to_reuse):
            if other != uid:
                del self.devices_to_reuse[other]
        reusable = self.devices_to_reuse[uid]
        for init in pod.init_containers:
            if init.name == container.name:
                await self.allocate_container_resources(pod, container, reusable)
                if not init.restartable:
                    self.pod_devices.add_container_allocated_resources(
                        uid, container.name, reusable
                    )
                else:
                    self.pod_devices.remove_container_allocated_resources(
                        uid, container.name, reusable
                    )
                return
        await self.allocate_container_resources(pod, container, reusable)
        self.pod_devices.remove_container_allocated_resources(uid, container.name, reusable)

    def update_allocated_devices(self) -> None:
        """kubelet: UpdateAllocatedDevices, free the devices of pods no longer active.
        (allocatedDevices is only recomputed when some pod goes, as in the kubelet.)"""
        gone = self.pod_devices.pods() - set(self.active_pods())
        if not gone:
            return
        self.pod_devices.delete(gone)
        self.allocated_devices = self.pod_devices.devices()

    def is_device_plugin_resource(self, resource: str) -> bool:
        return resource in self.healthy_devices or resource in self.allocated_devices

    async def allocate_container_resources(
        self, pod: Pod, container: Container, devices_to_reuse: dict[str, set[str]]
    ) -> None:
        uid, name = pod.uid, container.name
        allocated_devices_updated = False
        needs_update_checkpoint = False
        for resource in self._go_order(container.requests):
            needed = container.requests[resource]
            if not self.is_device_plugin_resource(resource):
                continue
            if not allocated_devices_updated:
                self.update_allocated_devices()
                allocated_devices_updated = True
            chosen = await self.devices_to_allocate(
                uid, name, resource, needed, devices_to_reuse.get(resource, set())
            )
            if not chosen:
                continue
            needs_update_checkpoint = True
            info = self.endpoints.get(resource)
            if info is None:
                self.allocated_devices = self.pod_devices.devices()
                raise AllocationError(f"unknown Device Plugin {resource}")
            devices = self._go_order(chosen)
            self.rpcs.append(KubeletRpc("Allocate", resource, tuple(devices)))
            try:
                response = await info.endpoint.allocate(devices)
            except (grpc.aio.AioRpcError, EndpointStoppedError) as error:
                self.allocated_devices = self.pod_devices.devices()
                raise AllocationError(_describe(error)) from error
            if not response.container_responses:
                raise AllocationError(f"no containers return in allocation response {response}")
            per_numa: DevicesPerNuma = {}
            for device in self._go_order(chosen):
                known = self.all_devices.get(resource, {}).get(device)
                if known is None or not known.has_topology():
                    per_numa.setdefault(NODE_WITHOUT_TOPOLOGY, []).append(device)
                    continue
                for node in known.numa_nodes or ():
                    per_numa.setdefault(node, []).append(device)
            self.pod_devices.insert(uid, name, resource, per_numa, response.container_responses[0])
        if needs_update_checkpoint:
            self.write_checkpoint()

    async def devices_to_allocate(
        self, pod_uid: str, container: str, resource: str, required: int, reusable: set[str]
    ) -> set[str] | None:
        """The devices to give the container (None: nothing to allocate, no RPC)."""
        needed = required
        devices = self.pod_devices.container_devices(pod_uid, container, resource)
        if devices is not None:
            # Already allocated (a container restart): the request cannot have changed.
            needed -= len(devices)
            if needed != 0:
                raise AllocationError(
                    f"pod {pod_uid!r} container {container!r} changed request for resource "
                    f"{resource!r} from {len(devices)} to {required}"
                )
        healthy = self.healthy_devices.get(resource)
        if healthy is None:
            raise AllocationError(f"cannot allocate unregistered device {resource}")
        if not healthy:
            raise AllocationError(
                f"no healthy devices present; cannot allocate unhealthy devices {resource}"
            )
        if devices is not None and not healthy >= devices:
            raise AllocationError(
                "previously allocated devices are no longer healthy; "
                f"cannot allocate unhealthy devices {resource}"
            )
        if needed == 0:
            return None

        allocated: set[str] = set()

        def allocate_remaining_from(candidates: set[str]) -> bool:
            nonlocal needed
            in_use = self.allocated_devices.setdefault(resource, set())
            for device in self._go_order(candidates - allocated):
                in_use.add(device)
                allocated.add(device)
                needed -= 1
                if needed == 0:
                    return True
            return False

        if allocate_remaining_from(reusable):
            return allocated

        in_use = self.allocated_devices.get(resource, set())
        available = self.healthy_devices[resource] - in_use
        if len(available) < needed:
            raise AllocationError(
                f"requested number of devices unavailable for {resource}. "
                f"Requested: {needed}, Available: {len(available)}"
            )

        aligned, unaligned, no_affinity = self.filter_by_affinity(
            pod_uid, container, resource, available
        )

        if needed < len(aligned):
            # The plugin may choose among the aligned devices.
            preferred = await self.call_get_preferred_allocation_if_available(
                pod_uid,
                container,
                resource,
                available=aligned | allocated,
                must_include=set(allocated),
                size=required,
            )
            if allocate_remaining_from((preferred or set()) & aligned):
                return allocated
            if allocate_remaining_from(aligned):
                return allocated
            raise AllocationError(
                "unexpectedly allocated less resources than required. "
                f"Requested: {required}, Got: {required - needed}"
            )

        # All the aligned devices first (the Topology Manager's alignment), then the
        # plugin may choose the rest among every available device.
        if allocate_remaining_from(aligned):
            return allocated
        preferred = await self.call_get_preferred_allocation_if_available(
            pod_uid,
            container,
            resource,
            available=available | allocated,
            must_include=set(allocated),
            size=required,
        )
        if allocate_remaining_from((preferred or set()) & available):
            return allocated
        if allocate_remaining_from(unaligned):
            return allocated
        if allocate_remaining_from(no_affinity):
            return allocated
        raise AllocationError(
            "unexpectedly allocated less resources than required. "
            f"Requested: {required}, Got: {required - needed}"
        )

    def device_has_topology_alignment(self, resource: str) -> bool:
        return any(d.has_topology() for d in self.all_devices.get(resource, {}).values())

    def filter_by_affinity(
        self, pod_uid: str, container: str, resource: str, available: set[str]
    ) -> tuple[set[str], set[str], set[str]]:
        """(aligned, unaligned, no affinity): devices on the hint's NUMA nodes, on other
        nodes, without topology. Without a hint (or topology) all are 'no affinity'."""
        hint = self.topology_affinity(pod_uid, container)
        if not self.device_has_topology_alignment(resource) or hint is None:
            return set(), set(), set(available)

        known = self.all_devices.get(resource, {})
        per_node: dict[int, set[str]] = {}
        for device in self._go_order(available):
            info = known.get(device)
            if info is None or not info.has_topology():
                per_node.setdefault(NODE_WITHOUT_TOPOLOGY, set()).add(device)
                continue
            for node in info.numa_nodes or ():
                per_node.setdefault(node, set()).add(device)

        def rank(node: int) -> tuple[int, int]:
            if node in hint:
                return (0, len(per_node[node]))
            if node == NODE_WITHOUT_TOPOLOGY:
                return (2, 0)
            return (1, len(per_node[node]))

        # Go's sort.Slice is not stable: ties come out in any order.
        nodes = sorted(self._go_order(per_node), key=rank)

        from_affinity: set[str] = set()
        not_from_affinity: set[str] = set()
        without_topology: set[str] = set()
        for device in self._go_order(available):
            for node in nodes:
                if device in per_node[node]:
                    if node == NODE_WITHOUT_TOPOLOGY:
                        without_topology.add(device)
                    elif node in hint:
                        from_affinity.add(device)
                    else:
                        not_from_affinity.add(device)
                    break
        return from_affinity, not_from_affinity, without_topology

    async def call_get_preferred_allocation_if_available(
        self,
        pod_uid: str,
        container: str,
        resource: str,
        *,
        available: set[str],
        must_include: set[str],
        size: int,
    ) -> set[str] | None:
        info = self.endpoints.get(resource)
        if info is None:
            raise AllocationError(
                f"endpoint not found in cache for a registered resource: {resource}"
            )
        if info.options is None or not info.options.get_preferred_allocation_available:
            return None
        offered = self._go_order(available)
        must = self._go_order(must_include)
        self.rpcs.append(
            KubeletRpc("GetPreferredAllocation", resource, tuple(offered), tuple(must), size)
        )
        try:
            response = await info.endpoint.get_preferred_allocation(offered, must, size)
        except (grpc.aio.AioRpcError, EndpointStoppedError) as error:
            raise AllocationError(
                f"device plugin GetPreferredAllocation rpc failed with err: {_describe(error)}"
            ) from error
        if response.container_responses:
            return set(response.container_responses[0].deviceIDs)
        return set()

    # ---- container start ----------------------------------------------------------------

    async def get_device_run_container_options(
        self, pod: Pod, container: Container, *, pod_active: bool = True
    ) -> ContainerRunOptions | None:
        """kubelet: GetDeviceRunContainerOptions, at every start of the container:
        PreStartContainer where the plugin asks for it, then the cached Allocate
        response. Allocation is only redone when nothing is cached (a node reboot race)."""
        needs_reallocate = False
        for resource in self._go_order(container.requests):
            if not self.is_device_plugin_resource(resource) or container.requests[resource] == 0:
                continue
            await self.call_pre_start_container_if_needed(pod.uid, container.name, resource)
            if not pod_active:
                continue
            if self.pod_devices.container_devices(pod.uid, container.name, resource) is None:
                needs_reallocate = True
        if needs_reallocate:
            await self.allocate(pod, container)
        return self.pod_devices.device_run_container_options(pod.uid, container.name)

    async def call_pre_start_container_if_needed(
        self, pod_uid: str, container: str, resource: str
    ) -> None:
        info = self.endpoints.get(resource)
        if info is None:
            raise AllocationError(
                f"endpoint not found in cache for a registered resource: {resource}"
            )
        if info.options is None or not info.options.pre_start_required:
            return
        devices = self.pod_devices.container_devices(pod_uid, container, resource)
        if devices is None:
            raise AllocationError(
                f"no devices found allocated in local cache for pod {pod_uid}, "
                f"container {container}, resource {resource}"
            )
        ordered = self._go_order(devices)
        self.rpcs.append(KubeletRpc("PreStartContainer", resource, tuple(ordered)))
        try:
            await info.endpoint.pre_start_container(ordered)
        except (grpc.aio.AioRpcError, EndpointStoppedError) as error:
            raise AllocationError(
                f"device plugin PreStartContainer rpc failed with err: {_describe(error)}"
            ) from error

    # ---- PodResources -------------------------------------------------------------------

    def get_devices(self, pod_uid: str, container: str) -> dict[str, dict[str, list[int] | None]]:
        return self.pod_devices.get_container_devices(pod_uid, container) or {}

    def get_allocatable_devices(self) -> dict[str, dict[str, list[int] | None]]:
        found: dict[str, dict[str, list[int] | None]] = {}
        for resource, healthy in self.healthy_devices.items():
            known = self.all_devices.get(resource, {})
            found[resource] = {
                d: list(known[d].numa_nodes or ()) if known[d].numa_nodes else None
                for d in healthy
                if d in known
            }
        return found


def _describe(error: Exception) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"rpc error: code = {error.code().name} desc = {error.details()}"
    return str(error)
