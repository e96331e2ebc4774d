"""The kubelet's PodResources v1 server (kubelet: pkg/kubelet/apis/podresources/server_v1.go
and containerDevicesFromResourceDeviceInstances in pkg/kubelet/cm).

Devices only (no CPUs, memory or dynamic resources): one ContainerDevices per device per
NUMA node, a device without topology reported without one, in Go's random map order.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import grpc

from kubelet_harness.device_manager import DeviceManager
from kubelet_harness.pods import Container, Pod
from numatopo_exporter.kubelet_api import podresources_pb2 as v1
from numatopo_exporter.kubelet_api import podresources_pb2_grpc as v1_grpc


def container_devices(
    devices: Mapping[str, Mapping[str, list[int] | None]], rng: random.Random
) -> list[v1.ContainerDevices]:
    def shuffled(keys: Iterable[str]) -> list[str]:
        ordered = sorted(keys)
        rng.shuffle(ordered)
        return ordered

    found = []
    for resource in shuffled(devices):
        for device in shuffled(devices[resource]):
            nodes = devices[resource][device]
            if nodes is None:
                found.append(v1.ContainerDevices(resource_name=resource, device_ids=[device]))
                continue
            for node in nodes:
                found.append(
                    v1.ContainerDevices(
                        resource_name=resource,
                        device_ids=[device],
                        topology=v1.TopologyInfo(nodes=[v1.NUMANode(ID=node)]),
                    )
                )
    return found


class PodResourcesServer(v1_grpc.PodResourcesListerServicer):
    def __init__(
        self,
        socket_path: Path,
        device_manager: Callable[[], DeviceManager],
        pods: Callable[[], Iterable[Pod]],
        rng: random.Random,
        *,
        get_enabled: bool = True,
    ) -> None:
        self.socket_path = socket_path
        self._device_manager = device_manager
        self._pods = pods
        self._rng = rng
        self.get_enabled = get_enabled  # feature gate KubeletPodResourcesGet
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        os.makedirs(self.socket_path.parent, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        server = grpc.aio.server()
        v1_grpc.add_PodResourcesListerServicer_to_server(self, server)
        server.add_insecure_port(f"unix:{self.socket_path}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(None)
            self._server = None

    def _container(self, pod: Pod, container: Container) -> v1.ContainerResources:
        devices = self._device_manager().get_devices(pod.uid, container.name)
        return v1.ContainerResources(
            name=container.name, devices=container_devices(devices, self._rng)
        )

    def _pod(self, pod: Pod) -> v1.PodResources:
        # Sidecars (restartable init containers) first, then the app containers.
        containers = [c for c in pod.init_containers if c.restartable]
        containers += pod.containers
        return v1.PodResources(
            name=pod.name,
            namespace=pod.namespace,
            containers=[self._container(pod, c) for c in containers],
        )

    async def List(  # noqa: N802 (the gRPC method's name)
        self, request: v1.ListPodResourcesRequest, context: grpc.aio.ServicerContext
    ) -> v1.ListPodResourcesResponse:
        return v1.ListPodResourcesResponse(pod_resources=[self._pod(p) for p in self._pods()])

    async def Get(  # noqa: N802
        self, request: v1.GetPodResourcesRequest, context: grpc.aio.ServicerContext
    ) -> v1.GetPodResourcesResponse:
        if not self.get_enabled:
            await context.abort(
                grpc.StatusCode.UNKNOWN,
                "PodResources API Get method disabled",
            )
        for pod in self._pods():
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return v1.GetPodResourcesResponse(pod_resources=self._pod(pod))
        await context.abort(
            grpc.StatusCode.UNKNOWN,
            f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
        )
        raise AssertionError("unreachable")

    async def GetAllocatableResources(  # noqa: N802
        self, request: v1.AllocatableResourcesRequest, context: grpc.aio.ServicerContext
    ) -> v1.AllocatableResourcesResponse:
        devices = self._device_manager().get_allocatable_devices()
        return v1.AllocatableResourcesResponse(devices=container_devices(devices, self._rng))
