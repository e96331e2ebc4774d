"""A stand-in for NVIDIA's k8s-device-plugin, on the real device plugin API.

Like NVIDIA's plugin it serves `DevicePlugin` on `<dir>/<name>.sock` and registers with
the kubelet socket it is given (`--kubelet-socket`); devices are named by UUID
(`GPU-...`), carry their NUMA node, and Allocate answers `NVIDIA_VISIBLE_DEVICES`. It
watches the registration socket: when that file is deleted and created again (a kubelet
restart), it restarts its server and registers again, as NVIDIA's plugin does on its
fsnotify event. Its GetPreferredAllocation makes its own choice (must-include first, then
the lowest IDs), which usually differs from numatopo's. Every RPC it serves is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.protobuf.message import Message

from numatopo_exporter.kubelet_api import deviceplugin_pb2 as api
from numatopo_exporter.kubelet_api import deviceplugin_pb2_grpc as api_grpc

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
WATCH_INTERVAL_S = 0.01


@dataclass
class FakeGpu:
    id: str
    numa: int | None = 0  # None: no topology in ListAndWatch
    healthy: bool = True

    @classmethod
    def numbered(cls, index: int, numa: int | None) -> FakeGpu:
        """A UUID-like, stable ID: GPU-<uuid derived from the index>."""
        return cls(f"GPU-{uuid.UUID(int=0x6E756D61 << 96 | index)}", numa)

    def to_api(self) -> api.Device:
        device = api.Device(ID=self.id, health="Healthy" if self.healthy else "Unhealthy")
        if self.numa is not None:
            device.topology.nodes.add(ID=self.numa)
        return device


def gpus(count: int, numa_nodes: int = 2) -> list[FakeGpu]:
    """`count` GPUs spread evenly, in order, over `numa_nodes` NUMA nodes."""
    per_node = max(1, count // numa_nodes)
    return [FakeGpu.numbered(i, min(i // per_node, numa_nodes - 1)) for i in range(count)]


@dataclass(frozen=True)
class RecordedCall:
    method: str
    request: Message

    @property
    def device_ids(self) -> list[str]:
        """Allocate / PreStartContainer: the IDs of the (first) container request."""
        if isinstance(self.request, api.AllocateRequest):
            return list(self.request.container_requests[0].devices_ids)
        if isinstance(self.request, api.PreStartContainerRequest):
            return list(self.request.devices_ids)
        raise TypeError(f"{self.method} carries no device IDs")


@dataclass
class _Faults:
    preferred_error: str | None = None
    allocate_error: str | None = None


class FakeNvidiaPlugin(api_grpc.DevicePluginServicer):
    def __init__(
        self,
        kubelet_socket: Path,
        devices: Sequence[FakeGpu],
        *,
        resource_name: str = "nvidia.com/gpu",
        name: str = "nvidia-gpu",
        plugin_dir: Path | None = None,
        preferred_allocation: bool = True,
        pre_start_required: bool = False,
        version: str = "v1beta1",
        watch_kubelet_socket: bool = True,
    ) -> None:
        self.kubelet_socket = Path(kubelet_socket)
        self.plugin_dir = Path(plugin_dir) if plugin_dir else self.kubelet_socket.parent
        self.socket_path = self.plugin_dir / f"{name}.sock"
        self.devices = {d.id: d for d in devices}
        self.resource_name = resource_name
        self.options = api.DevicePluginOptions(
            get_preferred_allocation_available=preferred_allocation,
            pre_start_required=pre_start_required,
        )
        self.version = version
        self.watch_kubelet_socket = watch_kubelet_socket
        self.faults = _Faults()
        self.calls: list[RecordedCall] = []
        self.registrations = 0
        self._server: grpc.aio.Server | None = None
        self._wakeup = asyncio.Event()
        self._generation = 0
        self._end_streams = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None

    # ---- lifecycle ------------------------------------------------------------------

    async def start(self, *, register: bool = True) -> None:
        """Serve, register with the kubelet socket, and watch it."""
        await self._serve()
        if register:
            await self.register()
        if self.watch_kubelet_socket and self._watcher is None:
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        await self._stop_server()

    async def _serve(self) -> None:
        os.makedirs(self.plugin_dir, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        self._end_streams = asyncio.Event()
        server = grpc.aio.server()
        api_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix:{self.socket_path}")
        await server.start()
        self._server = server

    async def _stop_server(self) -> None:
        if self._server is not None:
            self._end_streams.set()
            self._wake()
            await self._server.stop(None)
            self._server = None
        self.socket_path.unlink(missing_ok=True)

    async def register(self) -> None:
        """Register with the kubelet socket; raises the kubelet's gRPC error."""
        async with grpc.aio.insecure_channel(f"unix:{self.kubelet_socket}") as channel:
            stub = api_grpc.RegistrationStub(channel)
            await stub.Register(
                api.RegisterRequest(
                    version=self.version,
                    endpoint=self.socket_path.name,
                    resource_name=self.resource_name,
                    options=self.options,
                ),
                timeout=5,
            )
        self.registrations += 1

    async def restart(self) -> None:
        """What NVIDIA's plugin does when the kubelet socket is created again."""
        await self._stop_server()
        await self._serve()
        await self.register()

    def _kubelet_socket_identity(self) -> tuple[int, int, int] | None:
        try:
            info = os.stat(self.kubelet_socket)
        except FileNotFoundError:
            return None
        return (info.st_dev, info.st_ino, info.st_ctime_ns)

    async def _watch(self) -> None:
        seen = self._kubelet_socket_identity()
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            now = self._kubelet_socket_identity()
            if now != seen and now is not None:
                # Deleted and created again (or replaced): a new kubelet.
                with contextlib.suppress(grpc.aio.AioRpcError, OSError):
                    await self.restart()
            seen = now

    # ---- controls for tests ------------------------------------------------------------

    def set_health(self, device_id: str, healthy: bool) -> None:
        """Change a device's health; ListAndWatch streams send the new list."""
        self.devices[device_id].healthy = healthy
        self._generation += 1
        self._wake()

    def _wake(self) -> None:
        wakeup, self._wakeup = self._wakeup, asyncio.Event()
        wakeup.set()

    def end_streams(self) -> None:
        """End every open ListAndWatch stream (the server keeps serving)."""
        self._end_streams.set()
        self._wake()

    def calls_of(self, method: str) -> list[RecordedCall]:
        return [c for c in self.calls if c.method == method]

    def _record(self, method: str, request: Message) -> None:
        copy = type(request)()
        copy.CopyFrom(request)
        self.calls.append(RecordedCall(method, copy))

    # ---- DevicePlugin service ---------------------------------------------------------

    def _device_list(self) -> api.ListAndWatchResponse:
        return api.ListAndWatchResponse(devices=[d.to_api() for d in self.devices.values()])

    async def GetDevicePluginOptions(  # noqa: N802 (the gRPC method's name)
        self, request: api.Empty, context: grpc.aio.ServicerContext
    ) -> api.DevicePluginOptions:
        self._record("GetDevicePluginOptions", request)
        return self.options

    async def ListAndWatch(  # noqa: N802
        self, request: api.Empty, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[api.ListAndWatchResponse]:
        self._record("ListAndWatch", request)
        end = self._end_streams
        seen = self._generation
        yield self._device_list()
        while not end.is_set():
            if self._generation == seen:
                await self._wakeup.wait()
                continue
            seen = self._generation
            yield self._device_list()

    async def GetPreferredAllocation(  # noqa: N802
        self, request: api.PreferredAllocationRequest, context: grpc.aio.ServicerContext
    ) -> api.PreferredAllocationResponse:
        self._record("GetPreferredAllocation", request)
        if self.faults.preferred_error is not None:
            await context.abort(grpc.StatusCode.INTERNAL, self.faults.preferred_error)
        response = api.PreferredAllocationResponse()
        for ask in request.container_requests:
            chosen = sorted(ask.must_include_deviceIDs)
            for device in sorted(ask.available_deviceIDs):
                if len(chosen) >= ask.allocation_size:
                    break
                if device not in chosen:
                    chosen.append(device)
            response.container_responses.add(deviceIDs=chosen)
        return response

    async def Allocate(  # noqa: N802
        self, request: api.AllocateRequest, context: grpc.aio.ServicerContext
    ) -> api.AllocateResponse:
        self._record("Allocate", request)
        if self.faults.allocate_error is not None:
            await context.abort(grpc.StatusCode.INTERNAL, self.faults.allocate_error)
        response = api.AllocateResponse()
        for ask in request.container_requests:
            for device in ask.devices_ids:
                if device not in self.devices:
                    await context.abort(
                        grpc.StatusCode.UNKNOWN,
                        f"invalid allocation request for {self.resource_name!r}: "
                        f"unknown device: {device}",
                    )
            response.container_responses.add(envs={VISIBLE_DEVICES: ",".join(ask.devices_ids)})
        return response

    async def PreStartContainer(  # noqa: N802
        self, request: api.PreStartContainerRequest, context: grpc.aio.ServicerContext
    ) -> api.PreStartContainerResponse:
        self._record("PreStartContainer", request)
        return api.PreStartContainerResponse()


@dataclass
class PluginSet:
    """Plugins a harness started, to stop at its end."""

    plugins: list[FakeNvidiaPlugin] = field(default_factory=list)

    async def stop_all(self) -> None:
        for plugin in self.plugins:
            await plugin.stop()
        self.plugins.clear()
