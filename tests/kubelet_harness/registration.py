"""The device plugin registration server and its plugin clients (kubelet:
pkg/kubelet/cm/devicemanager/plugin/v1beta1/{server,handler,client}.go).

`Register` dials `<dir>/<endpoint>`, asks the plugin's options and starts consuming its
ListAndWatch stream. A second registration for a resource replaces the client in the
table; the earlier client is not stopped (its stream still feeds the resource). When any
client's stream ends, the server disconnects *the client now registered for that
resource*: its connection closes, every device of the resource turns unhealthy and the
current endpoint stops, until a plugin registers again. This is the kubelet's code as
it is (runClient looks the client up by name after Run returns).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import grpc

from kubelet_harness.device_manager import DeviceManager
from numatopo_exporter.kubelet_api import deviceplugin_pb2 as api
from numatopo_exporter.kubelet_api import deviceplugin_pb2_grpc as api_grpc

SUPPORTED_VERSIONS = ("v1beta1",)
DIAL_TIMEOUT_S = 2.0  # the kubelet waits 10 s; tests should not


def is_extended_resource_name(name: str) -> bool:
    """kubelet: v1helper.IsExtendedResourceName (domain-qualified, not kubernetes.io)."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain, _, rest = name.partition("/")
    native = domain == "kubernetes.io" or domain.endswith(".kubernetes.io")
    return bool(domain) and bool(rest) and "/" not in rest and not native


class PluginClient:
    """kubelet: plugin/v1beta1 client, one connection to one plugin's socket."""

    def __init__(self, resource: str, socket_path: Path, handler: DeviceManager) -> None:
        self.resource = resource
        self.socket_path = socket_path
        self.handler = handler
        self.channel: grpc.aio.Channel | None = None
        self.api: api_grpc.DevicePluginStub = None  # type: ignore[assignment]

    async def connect(self) -> None:
        channel = grpc.aio.insecure_channel(f"unix:{self.socket_path}")
        try:
            async with asyncio.timeout(DIAL_TIMEOUT_S):
                await channel.channel_ready()
        except TimeoutError:
            await channel.close()
            raise
        self.channel = channel
        self.api = api_grpc.DevicePluginStub(channel)
        await self.handler.plugin_connected(self.resource, self)

    async def run(self) -> None:
        """Consume ListAndWatch until the stream ends, for whatever reason."""
        try:
            async for response in self.api.ListAndWatch(api.Empty()):
                self.handler.plugin_list_and_watch_receiver(self.resource, response)
        except grpc.aio.AioRpcError:
            return
        except asyncio.CancelledError:
            # grpc.aio raises CancelledError when our own channel is closed under the
            # call; a cancellation of this task itself must go on.
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            return

    async def close_channel(self) -> None:
        channel, self.channel = self.channel, None
        if channel is not None:
            await channel.close()

    async def disconnect(self) -> None:
        await self.close_channel()
        self.handler.plugin_disconnected(self.resource)


class RegistrationServer(api_grpc.RegistrationServicer):
    """kubelet: plugin/v1beta1 server, `v1beta1.Registration` on `<dir>/kubelet.sock`."""

    def __init__(self, socket_path: Path, handler: DeviceManager) -> None:
        self.socket_path = socket_path
        self.socket_dir = socket_path.parent
        self.handler = handler
        self.clients: dict[str, PluginClient] = {}
        self.registrations: list[api.RegisterRequest] = []
        self._server: grpc.aio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        os.makedirs(self.socket_dir, mode=0o750, exist_ok=True)
        # Every socket in the directory goes (plugins watch for this and register again).
        self.handler.cleanup_plugin_directory(self.socket_dir)
        server = grpc.aio.server()
        api_grpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port(f"unix:{self.socket_path}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        for name, client in list(self.clients.items()):
            await self.disconnect_client(name, client)
        if self._server is not None:
            await self._server.stop(None)
            self._server = None
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def Register(  # noqa: N802 (the gRPC method's name)
        self, request: api.RegisterRequest, context: grpc.aio.ServicerContext
    ) -> api.Empty:
        self.registrations.append(request)
        if request.version not in SUPPORTED_VERSIONS:
            await context.abort(
                grpc.StatusCode.UNKNOWN,
                f"requested device plugin version {request.version} is not supported, "
                f"supported versions are {list(SUPPORTED_VERSIONS)}",
            )
        if not is_extended_resource_name(request.resource_name):
            await context.abort(
                grpc.StatusCode.UNKNOWN,
                f"the ResourceName {request.resource_name!r} is invalid",
            )
        try:
            await self.connect_client(request.resource_name, self.socket_dir / request.endpoint)
        except Exception as error:  # the kubelet answers any failure to connect with it
            await context.abort(grpc.StatusCode.UNKNOWN, f"failed to connect: {error!r}")
        return api.Empty()

    async def connect_client(self, name: str, socket_path: Path) -> None:
        client = PluginClient(name, socket_path, self.handler)
        self.clients[name] = client
        try:
            await client.connect()
        except BaseException:
            self.clients.pop(name, None)
            await client.close_channel()
            raise
        task = asyncio.get_running_loop().create_task(self.run_client(name, client))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run_client(self, name: str, client: PluginClient) -> None:
        await client.run()
        current = self.clients.get(name)
        if current is not None:
            await self.disconnect_client(name, current)
        # The kubelet never closes an earlier client's connection here (it leaks); closing
        # it changes nothing a plugin can see once its stream has ended.
        await client.close_channel()

    async def disconnect_client(self, name: str, client: PluginClient) -> None:
        self.clients.pop(name, None)
        await client.disconnect()
