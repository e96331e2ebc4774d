"""Minimal in-test stand-ins for the two sides of the steering proxy: a kubelet (its
Registration service, and the device manager's calls to a registered endpoint) and
a vendor device plugin (NVIDIA-like: serves its own socket, registers with the
Registration socket it is given). Built on the generated servicers and stubs."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from numatopo_exporter.kubelet_api import deviceplugin_pb2 as pb
from numatopo_exporter.kubelet_api import deviceplugin_pb2_grpc as pb_grpc
from numatopo_exporter.steering.proxy import SteeringConfig

RESOURCE = "nvidia.com/gpu"
UUIDS = [f"GPU-{n:08x}-1111-2222-3333-444444444444" for n in range(4)]

ALLOCATED = pb.ContainerAllocateResponse(
    envs={"NVIDIA_VISIBLE_DEVICES": "GPU-x", "A": "1", "B": "2"},
    mounts=[pb.Mount(container_path="/usr/bin/nvidia-smi", host_path="/x", read_only=True)],
    devices=[pb.DeviceSpec(container_path="/dev/nvidia0", host_path="/dev/nvidia0",
                           permissions="rw")],
    annotations={"cdi.k8s.io/x": "nvidia.com/gpu=0", "z": "last"},
    cdi_devices=[pb.CDIDevice(name="nvidia.com/gpu=0")],
)  # fmt: skip


async def eventually(check: Callable[[], object], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    tries = 0
    while not check():
        tries += 1
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s ({tries} tries): {check}")
        await asyncio.sleep(0.01)


async def settled(kubelet: FakeKubelet, quiet: float = 0.3, seconds: float = 5.0) -> None:
    """Until no registration has come for `quiet` seconds (re-registrations come in
    bursts after a restart; a call on a connection being replaced is cancelled)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        count = len(kubelet.registrations)
        await asyncio.sleep(quiet)
        if count == len(kubelet.registrations) and kubelet.channel is not None:
            return
    raise AssertionError("registrations did not settle")


class FakeKubelet(pb_grpc.RegistrationServicer):
    """Serves `kubelet.sock`; on Register connects to the endpoint the way the
    device manager does (options, then a ListAndWatch stream it keeps reading)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.registrations: list[pb.RegisterRequest] = []
        self.lists: list[pb.ListAndWatchResponse] = []
        self.options: pb.DevicePluginOptions | None = None
        self.channel: Any = None
        self._server: Any = None
        self._stream: Any = None
        self._watch: asyncio.Task[None] | None = None
        self._registering = asyncio.Lock()

    async def start(self) -> None:
        self._server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix:{self.folder / 'kubelet.sock'}")
        await self._server.start()

    async def Register(self, request: pb.RegisterRequest, context: Any) -> pb.Empty:  # noqa: N802
        async with self._registering:
            return await self._register(request, context)

    async def _register(self, request: pb.RegisterRequest, context: Any) -> pb.Empty:
        await self.drop_stream()
        self.channel = grpc.aio.insecure_channel(f"unix:{self.folder / request.endpoint}")
        stub = pb_grpc.DevicePluginStub(self.channel)
        try:
            self.options = await stub.GetDevicePluginOptions(pb.Empty(), timeout=1)
        except grpc.aio.AioRpcError as error:
            await self.drop_stream()
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot reach endpoint: {error}")
        self.registrations.append(request)
        self._stream = stub.ListAndWatch(pb.Empty())
        self._watch = asyncio.create_task(self._read(self._stream))
        return pb.Empty()

    async def _read(self, stream: Any) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
            async for response in stream:
                self.lists.append(response)

    @property
    def plugin(self) -> Any:
        return pb_grpc.DevicePluginStub(self.channel)

    async def raw(self, method: str, request: bytes) -> bytes:
        found: bytes = await self.channel.unary_unary(f"/v1beta1.DevicePlugin/{method}")(request)
        return found

    async def preferred(
        self, available: list[str], size: int, must: Sequence[str] = ()
    ) -> list[str]:
        response = await self.plugin.GetPreferredAllocation(
            pb.PreferredAllocationRequest(container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available, must_include_deviceIDs=list(must),
                    allocation_size=size,
                )
            ])
        )  # fmt: skip
        assert len(response.container_responses) == 1
        return list(response.container_responses[0].deviceIDs)

    async def allocate(self, ids: list[str]) -> pb.AllocateResponse:
        return await self.plugin.Allocate(
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])
        )

    async def drop_stream(self) -> None:
        """The device manager stops this endpoint (its stream and connection end)."""
        if self._stream is not None:
            self._stream.cancel()
        if self._watch is not None:
            await asyncio.gather(self._watch, return_exceptions=True)
        if self.channel is not None:
            await self.channel.close()
        self._stream = self._watch = self.channel = None

    async def stop(self) -> None:
        await self.drop_stream()
        if self._server is not None:
            await self._server.stop(None)
            self._server = None

    async def restart(self) -> None:
        """As a kubelet restart does: every socket in its folder deleted, its own anew."""
        await self.stop()
        for entry in self.folder.iterdir():
            entry.unlink()
        await self.start()


class FakeVendor(pb_grpc.DevicePluginServicer):
    """NVIDIA-like: serves `nvidia-gpu.sock` in the kubelet's folder, registers with
    the Registration socket it is pointed at."""

    def __init__(self, folder: Path, name: str = "nvidia-gpu.sock") -> None:
        self.socket = folder / name
        self.listed = pb.ListAndWatchResponse(
            devices=[
                pb.Device(ID=u, health="Healthy",
                          topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n // 2)]))
                for n, u in enumerate(UUIDS)
            ]
        )  # fmt: skip
        self.preferred_mode = "answer"
        self.preferred_ids: list[str] = [UUIDS[0]]
        self.allocations: list[pb.AllocateRequest] = []
        self.pre_starts: list[pb.PreStartContainerRequest] = []
        self.release = asyncio.Event()
        self._server: Any = None

    async def start(self) -> None:
        self._server = grpc.aio.server()
        pb_grpc.add_DevicePluginServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix:{self.socket}")
        await self._server.start()

    async def register(self, registration: Path, resource: str = RESOURCE) -> None:
        async with grpc.aio.insecure_channel(f"unix:{registration}") as channel:
            await pb_grpc.RegistrationStub(channel).Register(
                pb.RegisterRequest(version="v1beta1", endpoint=self.socket.name,
                                   resource_name=resource, options=self.options()),
                timeout=5,
            )  # fmt: skip

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(None)
            self._server = None
        self.socket.unlink(missing_ok=True)

    @staticmethod
    def options() -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(pre_start_required=True,
                                      get_preferred_allocation_available=True)  # fmt: skip

    async def GetDevicePluginOptions(self, request: pb.Empty, context: Any) -> Any:  # noqa: N802
        return self.options()

    async def ListAndWatch(self, request: pb.Empty, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        yield self.listed
        await asyncio.Event().wait()  # until the server stops

    async def GetPreferredAllocation(self, request: Any, context: Any) -> Any:  # noqa: N802
        if self.preferred_mode == "hang":
            await self.release.wait()
        if self.preferred_mode == "error":
            await context.abort(grpc.StatusCode.INTERNAL, "vendor failed")
        return pb.PreferredAllocationResponse(
            container_responses=[pb.ContainerPreferredAllocationResponse(deviceIDs=self.preferred_ids)]
        )  # fmt: skip

    async def Allocate(self, request: pb.AllocateRequest, context: Any) -> Any:  # noqa: N802
        self.allocations.append(request)
        if any("bad" in ids for c in request.container_requests for ids in c.devices_ids):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unknown device bad")
        return pb.AllocateResponse(
            container_responses=[ALLOCATED] * len(request.container_requests)
        )

    async def PreStartContainer(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.pre_starts.append(request)
        return pb.PreStartContainerResponse()


@dataclass
class Node:
    kubelet_dir: Path
    steering_dir: Path

    def config(self, **changes: Any) -> SteeringConfig:
        settings: dict[str, Any] = {
            "resource_name": RESOURCE,
            "kubelet_dir": self.kubelet_dir,
            "steering_dir": self.steering_dir,
            "answer_deadline_seconds": 0.2,
            "poll_seconds": 0.05,
            "register_gap_seconds": 0.01,
            "register_timeout_seconds": 5.0,
            "backoff_initial_seconds": 0.02,
            "backoff_maximum_seconds": 0.1,
        }
        settings.update(changes)
        return SteeringConfig(**settings)


@pytest.fixture
def node() -> Iterator[Node]:
    # Unix socket paths must stay under 108 bytes: a short folder in /tmp.
    root = Path(tempfile.mkdtemp(prefix="steer-", dir="/tmp"))
    (root / "k").mkdir()
    (root / "s").mkdir()
    yield Node(root / "k", root / "s")
    shutil.rmtree(root, ignore_errors=True)
