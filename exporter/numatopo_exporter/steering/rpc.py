"""The device-plugin gRPC surface the steering proxy speaks, typed.

The generated service modules are untyped, and their servicers parse every message.
The proxy wants the opposite for what it only passes on: `Allocate`,
`PreStartContainer` and `ListAndWatch` travel as the vendor's bytes, so the kubelet
gets exactly what the vendor said (CDI devices, annotations, fields newer than our
.proto) and a re-serialised map can never reorder anything. Only the calls the proxy
decides on (`GetDevicePluginOptions`, `GetPreferredAllocation`, `Register`) are parsed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from operator import methodcaller
from pathlib import Path
from typing import Any, NoReturn, Protocol, TypeVar

import grpc
from google.protobuf.message import Message

from numatopo_exporter.kubelet_api import deviceplugin_pb2 as pb

API_VERSION = "v1beta1"
"""The only device-plugin API version the kubelet has ever served."""
KUBELET_SOCKET = "kubelet.sock"

Context = Any
"""`grpc.aio.ServicerContext`; grpc ships no type information."""

T = TypeVar("T")
M = TypeVar("M", bound=Message)

_REGISTRATION = pb.DESCRIPTOR.services_by_name["Registration"].full_name
_PLUGIN = pb.DESCRIPTOR.services_by_name["DevicePlugin"].full_name
_SERIALIZE = methodcaller("SerializeToString")


def _method(service: str, name: str) -> str:
    return f"/{service}/{name}"


def unix_target(path: Path) -> str:
    return f"unix:{path}"


async def abort(context: Context, code: Any, details: str) -> NoReturn:
    """End the call with `code`; typed so callers need no unreachable return."""
    await context.abort(code, details)
    raise AssertionError("grpc's abort returned")  # pragma: no cover


class DevicePluginHandlers(Protocol):
    """What the proxy answers when the kubelet calls its device-plugin endpoint."""

    async def options(self, request: pb.Empty, context: Context) -> pb.DevicePluginOptions: ...

    def list_and_watch(self, request: bytes, context: Context) -> AsyncIterator[bytes]: ...

    async def preferred(
        self, request: pb.PreferredAllocationRequest, context: Context
    ) -> pb.PreferredAllocationResponse: ...

    async def allocate(self, request: bytes, context: Context) -> bytes: ...

    async def pre_start(self, request: bytes, context: Context) -> bytes: ...


async def _serve(path: Path, service: str, methods: dict[str, Any]) -> Any:
    """A started `grpc.aio.Server` for `methods` on the unix socket `path` (replaced if
    present)."""
    path.unlink(missing_ok=True)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, methods),))
    server.add_insecure_port(unix_target(path))
    await server.start()
    return server


def _parsed(answer: Callable[..., Awaitable[Message]], request: type[Message]) -> Any:
    """A handler for `answer`, which takes and returns messages (the others pass bytes)."""
    return grpc.unary_unary_rpc_method_handler(
        answer, request_deserializer=request.FromString, response_serializer=_SERIALIZE
    )


def _unary(channel: Any, service: str, name: str, reply: type[M]) -> Callable[..., Awaitable[M]]:
    """The call `name` of `service` on `channel`, taking and returning messages."""
    call: Callable[..., Awaitable[M]] = channel.unary_unary(
        _method(service, name),
        request_serializer=_SERIALIZE,
        response_deserializer=reply.FromString,
    )
    return call


async def serve_device_plugin(path: Path, handlers: DevicePluginHandlers) -> Any:
    """The kubelet-facing device-plugin server on `path`."""
    return await _serve(
        path,
        _PLUGIN,
        {
            "GetDevicePluginOptions": _parsed(handlers.options, pb.Empty),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(handlers.list_and_watch),
            "GetPreferredAllocation": _parsed(handlers.preferred, pb.PreferredAllocationRequest),
            "Allocate": grpc.unary_unary_rpc_method_handler(handlers.allocate),
            "PreStartContainer": grpc.unary_unary_rpc_method_handler(handlers.pre_start),
        },
    )


async def serve_registration(
    path: Path, on_register: Callable[[pb.RegisterRequest, Context], Awaitable[pb.Empty]]
) -> Any:
    """The server answering `Registration.Register` on `path`."""
    return await _serve(path, _REGISTRATION, {"Register": _parsed(on_register, pb.RegisterRequest)})


async def register(socket: Path, request: pb.RegisterRequest, timeout: float) -> None:
    """Register with the Registration service on `socket` (the kubelet's); raises
    `grpc.aio.AioRpcError` when it refuses or cannot be reached in `timeout`."""
    async with grpc.aio.insecure_channel(unix_target(socket)) as channel:
        call = _unary(channel, _REGISTRATION, "Register", pb.Empty)
        await call(request, timeout=timeout, wait_for_ready=True)


class VendorGoneError(Exception):
    """The connection to the vendor was closed under a call, or before it (the vendor
    re-registered, or its socket went): the call ended without an answer."""


def _closed_under_us() -> bool:
    # grpc raises CancelledError into a call whose channel is closed locally; only a
    # cancellation of the task itself should travel on as one.
    task = asyncio.current_task()
    return task is None or task.cancelling() == 0


class VendorClient:
    """The vendor plugin's endpoint, as the proxy calls it. Methods raise
    `grpc.aio.AioRpcError` as grpc does, and `VendorGoneError`."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self._channel = grpc.aio.insecure_channel(unix_target(socket))

    async def reconnect(self) -> None:
        """Drop the connection (its calls end) and dial anew on the next call: a
        vendor whose socket was replaced is reached at the new one."""
        old, self._channel = self._channel, grpc.aio.insecure_channel(unix_target(self.socket))
        await old.close()

    async def close(self) -> None:
        """Ends every call in progress on this client."""
        await self._channel.close()

    async def options(self, timeout: float) -> pb.DevicePluginOptions:
        call = _unary(self._channel, _PLUGIN, "GetDevicePluginOptions", pb.DevicePluginOptions)
        return await self._answer(lambda: call(pb.Empty(), timeout=timeout))

    async def list_and_watch(self) -> AsyncGenerator[bytes, None]:
        """The vendor's device lists as it sends them; ends when its stream does, or
        when this client's connection is closed under it."""
        call = self._channel.unary_stream(_method(_PLUGIN, "ListAndWatch"))
        try:
            stream = call(pb.Empty().SerializeToString())
        except grpc.aio.UsageError:
            return  # closed already
        try:
            async for raw in stream:
                yield raw
        except asyncio.CancelledError:
            if not _closed_under_us():
                raise
        except grpc.aio.UsageError:
            return
        finally:
            stream.cancel()

    async def preferred(
        self, request: pb.PreferredAllocationRequest, timeout: float
    ) -> pb.PreferredAllocationResponse:
        call = _unary(
            self._channel, _PLUGIN, "GetPreferredAllocation", pb.PreferredAllocationResponse
        )
        return await self._answer(lambda: call(request, timeout=timeout))

    async def forward(self, name: str, request: bytes, timeout: float) -> bytes:
        """Call `name` (Allocate, PreStartContainer) with the kubelet's request as it came."""
        call = self._channel.unary_unary(_method(_PLUGIN, name))
        return await self._answer(lambda: call(request, timeout=timeout))

    async def _answer(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except grpc.aio.UsageError:
            raise VendorGoneError(f"the connection to {self.socket} is closed") from None
        except asyncio.CancelledError:
            if not _closed_under_us():
                raise
            raise VendorGoneError(f"the connection to {self.socket} was closed") from None
