"""The steering proxy: numatopo's node process stands between the kubelet and the GPU
vendor's device plugin, so that the kubelet's choice of GPUs is numatopo's (I/O).

What is forwarded unchanged (as the vendor's bytes), how `GetPreferredAllocation` is
answered (`choice.answer`; never an error, which refuses the pod, and always within
`answer_deadline_seconds`: the kubelet admits pods one at a time and sets no timeout)
and the node's settings: docs/operations.md, "Steering GPUs". The vendor registers with
numatopo's Registration socket in `steering_dir`, a directory the kubelet does not own
(a kubelet restart wipes its own). Not verified on a live cluster: that every GPU
Operator version mounts the host's `/` at `/host` on the plugin container, and that
inotify through that mount sees the socket re-created.

NVIDIA's device plugin (NVIDIA/k8s-device-plugin v0.17.0 and later:
cmd/nvidia-device-plugin/main.go, internal/plugin/server.go) registers with the socket
`--kubelet-socket` (env `KUBELET_SOCKET`) names, but always serves its own in the
kubelet's directory (`nvidia-gpu.sock`, registered as the bare file name: hence
`vendor_dirs`, and numatopo's endpoint name differs from it). It restarts its plugins
when that Registration socket is created again (inotify on its directory, which must
exist first: `start` creates it; the plugin restarts until then), not when the kubelet
restarts and wipes the plugin's socket (hence `restart_vendor_on_kubelet_restart`).

Whatever ends (the vendor registering again, the kubelet's or the vendor's stream, a
socket deleted or replaced, seen by polling inode and ctime) is handled where it is
noticed (`_watch_vendor`, `list_and_watch`, `_check_sockets`), never fatally: a vendor
gone leaves its last device list published Unhealthy until it is back, and
registration retries with capped backoff.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import os
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from numatopo_exporter.kubelet_api import deviceplugin_pb2 as pb
from numatopo_exporter.metrics import SteeringMetrics
from numatopo_exporter.steering.choice import Answer, InFlight, answer
from numatopo_exporter.steering.rpc import (
    API_VERSION,
    KUBELET_SOCKET,
    Context,
    VendorClient,
    VendorGoneError,
    abort,
    register,
    serve_device_plugin,
    serve_registration,
)
from numatopo_kube.backoff import Backoff

CALL_FAILED = (grpc.aio.AioRpcError, VendorGoneError)

logger = logging.getLogger("numatopo.steering")

UNHEALTHY = "Unhealthy"
MAX_OFFERED_IDS = 16384
"""The most device IDs one preferred allocation is steered for (why: docs/operations.md,
"Steering GPUs")."""


@dataclass(frozen=True)
class SteeringConfig:
    resource_name: str = "nvidia.com/gpu"
    kubelet_dir: Path = Path("/var/lib/kubelet/device-plugins")
    steering_dir: Path = Path("/var/lib/numatopo/device-plugins")
    """Where numatopo serves the Registration socket the vendor plugin registers with."""
    endpoint: str = ""
    """numatopo's socket file name in `kubelet_dir`; empty: from the resource name."""
    answer_deadline_seconds: float = 0.2
    poll_seconds: float = 1.0
    register_timeout_seconds: float = 5.0
    forward_timeout_seconds: float = 30.0
    """Bound on a forwarded Allocate / PreStartContainer (the kubelet sets none)."""
    register_gap_seconds: float = 0.5
    """Least time between two registrations with the kubelet: a kubelet dropping
    endpoints in a loop must not be answered in a tight one."""
    restart_vendor_on_kubelet_restart: bool = True
    backoff_initial_seconds: float = 0.5
    backoff_maximum_seconds: float = 10.0

    @property
    def own_endpoint(self) -> str:
        if self.endpoint:
            return self.endpoint
        return "numatopo-" + re.sub(r"[^A-Za-z0-9._-]", "-", self.resource_name) + ".sock"

    @property
    def vendor_dirs(self) -> tuple[Path, ...]:
        """Where a registered endpoint name is looked for, in order (why: the module docstring)."""
        return (self.steering_dir, self.kubelet_dir)


@dataclass(frozen=True)
class SteeringStatus:
    """What the agent publishes as the node's GPU mode."""

    registered: bool
    """Registered with the kubelet and its stream to numatopo not seen ending since."""
    vendor_registered: bool
    vendor_healthy: bool
    """The vendor's device stream is open (its devices are passed on as it lists them)."""
    vendor_endpoint: str | None
    last_error: str | None

    @property
    def steering(self) -> bool:
        return self.registered and self.vendor_healthy


def _identity(path: Path) -> tuple[int, int] | None:
    # Inode numbers are reused at once on tmpfs; the change time tells a new file apart.
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return (found.st_ino, found.st_ctime_ns)


@dataclass
class Steerer:
    """Start with `async with Steerer(...)` or `await start()` / `await stop()`."""

    candidates: Callable[[], Sequence[InFlight]]
    """The containers in flight. Called on a worker thread, bounded by the answer
    deadline: it must return a snapshot (a tuple the agent replaces whole), not
    iterate state the event loop is changing."""
    config: SteeringConfig = field(default_factory=SteeringConfig)
    metrics: SteeringMetrics = field(default_factory=SteeringMetrics)

    _vendor: VendorClient | None = field(default=None, init=False)
    _vendor_options: pb.DevicePluginOptions = field(
        default_factory=pb.DevicePluginOptions, init=False
    )
    _vendor_generation: int = field(default=0, init=False)
    _vendor_announced: int = field(default=0, init=False)
    """The vendor generation last registered with the kubelet for."""
    _vendor_healthy: bool = field(default=False, init=False)
    _devices: bytes | None = field(default=None, init=False)
    _published: bytes | None = field(default=None, init=False)
    _published_version: int = field(default=0, init=False)
    _registered: bool = field(default=False, init=False)
    _registration_generation: int = field(default=0, init=False)
    _last_error: str | None = field(default=None, init=False)
    _tentative: list[tuple[InFlight, list[str]]] = field(default_factory=list, init=False)
    _consumed: set[tuple[str, str]] = field(default_factory=set, init=False)
    _pending_candidates: concurrent.futures.Future[Sequence[InFlight]] | None = field(
        default=None, init=False
    )
    _servers: dict[Path, Any] = field(default_factory=dict, init=False)
    """The running server of each socket numatopo serves (its own, the Registration one)."""
    _identities: dict[Path, tuple[int, int] | None] = field(default_factory=dict, init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, init=False)
    _stopping: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="numatopo-steer-candidates"
        )
        self._changed = asyncio.Condition()
        self._vendor_changed = asyncio.Event()
        self._register_wanted = asyncio.Event()
        self.own_socket = self.config.kubelet_dir / self.config.own_endpoint
        self.registration_socket = self.config.steering_dir / KUBELET_SOCKET
        self.kubelet_socket = self.config.kubelet_dir / KUBELET_SOCKET

    # -- life cycle ---------------------------------------------------------------

    async def start(self) -> None:
        self.config.steering_dir.mkdir(parents=True, exist_ok=True)
        self.config.kubelet_dir.mkdir(parents=True, exist_ok=True)
        await self._serve(self.own_socket)
        await self._serve(self.registration_socket)
        self._identities[self.kubelet_socket] = _identity(self.kubelet_socket)
        self._tasks = [
            asyncio.create_task(self._registration_loop(), name="steering-register"),
            asyncio.create_task(self._vendor_loop(), name="steering-vendor"),
            asyncio.create_task(self._socket_loop(), name="steering-sockets"),
        ]
        logger.info(
            "steering %s: serving %s, vendor registration on %s",
            self.config.resource_name,
            self.own_socket,
            self.registration_socket,
        )

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for server in self._servers.values():
            await server.stop(None)
        self._servers.clear()
        if self._vendor is not None:
            await self._vendor.close()
            self._vendor = None
        self._executor.shutdown(wait=False, cancel_futures=True)
        for path in (self.own_socket, self.registration_socket):
            path.unlink(missing_ok=True)

    async def __aenter__(self) -> Steerer:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    def status(self) -> SteeringStatus:
        return SteeringStatus(
            registered=self._registered,
            vendor_registered=self._vendor is not None,
            vendor_healthy=self._vendor_healthy,
            vendor_endpoint=None if self._vendor is None else str(self._vendor.socket),
            last_error=self._last_error,
        )

    def _error(self, text: str) -> None:
        self._last_error = text
        logger.warning("steering %s: %s", self.config.resource_name, text)

    # -- sockets ------------------------------------------------------------------

    async def _serve(self, socket: Path) -> None:
        """Serve `socket` (`own_socket` or `registration_socket`) anew."""
        old = self._servers.get(socket)
        if old is not None:
            await old.stop(None)
        if socket == self.own_socket:
            self._servers[socket] = await serve_device_plugin(socket, self)
        else:
            self._servers[socket] = await serve_registration(socket, self._on_vendor_register)
        self._identities[socket] = _identity(socket)

    async def _socket_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.poll_seconds)
            try:
                await self._check_sockets()
            except Exception as error:  # the next poll tries again
                self._error(f"checking sockets: {error!r}")

    async def _check_sockets(self) -> None:
        for socket in (self.own_socket, self.registration_socket):
            if _identity(socket) != self._identities.get(socket):
                logger.info("steering: %s deleted or replaced; serving it again", socket)
                await self._serve(socket)
                if socket == self.own_socket:
                    self._register_wanted.set()
        vendor = self._vendor
        if vendor is not None:
            seen = _identity(vendor.socket)
            if seen != self._identities.get(vendor.socket):
                self._identities[vendor.socket] = seen
                if self._vendor_healthy:
                    # A plugin stopping removes its socket; its stream to us need not
                    # end at once (nor ever, if it hangs): stop waiting on it.
                    logger.info("steering: %s deleted or replaced; reconnecting", vendor.socket)
                    await vendor.reconnect()
        kubelet = _identity(self.kubelet_socket)
        if kubelet != self._identities.get(self.kubelet_socket):
            self._identities[self.kubelet_socket] = kubelet
            if kubelet is not None:
                logger.info("steering: the kubelet (re)started; registering again")
                self._register_wanted.set()
                vendor = self._vendor
                if (
                    self.config.restart_vendor_on_kubelet_restart
                    and vendor is not None
                    and not vendor.socket.exists()
                ):
                    # The kubelet wiped the vendor's socket too (module docstring).
                    logger.info("steering: %s is gone; restarting the vendor", vendor.socket)
                    await self._serve(self.registration_socket)

    # -- registration with the kubelet --------------------------------------------

    async def _registration_loop(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = Backoff(self.config.backoff_initial_seconds, self.config.backoff_maximum_seconds)
        last = -float("inf")
        while True:
            await self._register_wanted.wait()
            self._register_wanted.clear()
            if self._vendor is None:
                continue  # registered only with a vendor behind: nothing to offer yet
            await asyncio.sleep(max(0.0, last + self.config.register_gap_seconds - loop.time()))
            # Streams the kubelet opens from here on belong to this registration; the
            # end of an older one is not a reason to register again.
            self._registration_generation += 1
            request = pb.RegisterRequest(
                version=API_VERSION,
                endpoint=self.config.own_endpoint,
                resource_name=self.config.resource_name,
                options=self._own_options(),
            )
            try:
                await register(self.kubelet_socket, request, self.config.register_timeout_seconds)
            except Exception as error:  # refused, unreachable, or anything else: retry
                self._registered = False
                self.metrics.registrations.labels(result="failed").inc()
                self._error(f"registering with the kubelet at {self.kubelet_socket}: {error!r}")
                await asyncio.sleep(backoff.next_delay())
                self._register_wanted.set()
                continue
            last = loop.time()
            backoff.reset()
            self._registered = True
            self.metrics.registrations.labels(result="ok").inc()
            logger.info(
                "steering: registered %s with the kubelet as %s",
                self.config.resource_name,
                self.config.own_endpoint,
            )

    def _own_options(self) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(
            pre_start_required=self._vendor_options.pre_start_required,
            get_preferred_allocation_available=True,
        )

    # -- the vendor ---------------------------------------------------------------

    async def _on_vendor_register(self, request: pb.RegisterRequest, context: Context) -> pb.Empty:
        if request.resource_name != self.config.resource_name:
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"numatopo steers {self.config.resource_name} only; register "
                f"{request.resource_name!r} with the kubelet",
            )
        if request.version != API_VERSION:
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"device plugin API {request.version!r} is not supported; {API_VERSION} is",
            )
        name = request.endpoint
        # Our own sockets are no vendor's: numatopo would dial itself.
        if not name or "/" in name or name in {".", "..", self.config.own_endpoint, KUBELET_SOCKET}:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"bad endpoint name {name!r}")
        socket = next((d / name for d in self.config.vendor_dirs if (d / name).exists()), None)
        if socket is None:
            where = ", ".join(str(d) for d in self.config.vendor_dirs)
            await abort(
                context, grpc.StatusCode.NOT_FOUND, f"endpoint {name!r} found in none of {where}"
            )
        previous, self._vendor = self._vendor, VendorClient(socket)
        self._identities[socket] = _identity(socket)
        self._vendor_options = request.options
        self._vendor_generation += 1
        self._vendor_changed.set()
        if previous is not None:
            await previous.close()
        logger.info("steering: vendor plugin registered %s at %s", request.resource_name, socket)
        return pb.Empty()

    async def _vendor_loop(self) -> None:
        backoff = Backoff(self.config.backoff_initial_seconds, self.config.backoff_maximum_seconds)
        while True:
            self._vendor_changed.clear()
            vendor, generation = self._vendor, self._vendor_generation
            if vendor is not None:
                try:
                    await self._watch_vendor(vendor, generation, backoff)
                except Exception as error:  # the loop outlives any one vendor connection
                    self._error(f"watching the vendor at {vendor.socket}: {error!r}")
            if vendor is None or not self._vendor_changed.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(None if vendor is None else backoff.next_delay()):
                        await self._vendor_changed.wait()

    async def _watch_vendor(self, vendor: VendorClient, generation: int, backoff: Backoff) -> None:
        try:
            self._vendor_options = await vendor.options(self.config.register_timeout_seconds)
        except CALL_FAILED as error:
            logger.info("steering: vendor options unread (%s); keeping its registration's", error)
        if generation != self._vendor_announced:
            # A vendor (re-)registering usually ends its earlier stream to the kubelet
            # after we registered, which makes the kubelet drop our endpoint.
            self._vendor_announced = generation
            self._register_wanted.set()
        try:
            async with contextlib.aclosing(vendor.list_and_watch()) as lists:
                async for raw in lists:
                    # Read, not rewritten: what does not parse would end the kubelet's
                    # stream and the kubelet drop numatopo's endpoint; it ends the vendor's.
                    pb.ListAndWatchResponse.FromString(raw)
                    if not self._vendor_healthy:
                        logger.info("steering: vendor device stream open at %s", vendor.socket)
                    self._vendor_healthy = True
                    backoff.reset()
                    self._devices = raw
                    await self._publish(raw)
        except grpc.aio.AioRpcError as error:
            if generation == self._vendor_generation:
                self._error(f"vendor device stream at {vendor.socket}: {error.code()}")
        except DecodeError:
            self._error(f"vendor at {vendor.socket} listed devices in no readable form")
        if generation == self._vendor_generation and self._vendor_healthy:
            self._vendor_healthy = False
            self.metrics.vendor_missing.inc()
            self._error(f"vendor plugin at {vendor.socket} gone; its devices are Unhealthy")
            await self._publish(self._unhealthy())

    def _unhealthy(self) -> bytes | None:
        if self._devices is None:
            return None
        listed = pb.ListAndWatchResponse.FromString(self._devices)
        for device in listed.devices:
            device.health = UNHEALTHY
        return listed.SerializeToString()

    async def _publish(self, raw: bytes | None) -> None:
        if raw is None:
            return
        async with self._changed:
            self._published = raw
            self._published_version += 1
            self._changed.notify_all()

    # -- the kubelet's calls --------------------------------------------------------

    async def options(self, request: pb.Empty, context: Context) -> pb.DevicePluginOptions:
        return self._own_options()

    async def list_and_watch(self, request: bytes, context: Context) -> AsyncIterator[bytes]:
        generation = self._registration_generation
        sent = 0
        try:
            while True:
                async with self._changed:
                    await self._changed.wait_for(functools.partial(self._newer_than, sent))
                    sent, raw = self._published_version, self._published
                assert raw is not None
                yield raw
        finally:
            if not self._stopping and generation == self._registration_generation:
                # The kubelet ended the stream of its current endpoint: it dropped us.
                logger.info("steering: the kubelet ended its device stream; registering again")
                self._registered = False
                self._register_wanted.set()

    def _newer_than(self, version: int) -> bool:
        return self._published is not None and self._published_version != version

    async def allocate(self, request: bytes, context: Context) -> bytes:
        self._note_allocation(request)
        return await self._forward("Allocate", request, context)

    async def pre_start(self, request: bytes, context: Context) -> bytes:
        return await self._forward("PreStartContainer", request, context)

    async def _forward(self, call: str, request: bytes, context: Context) -> bytes:
        """The vendor's answer to the call, its error passed back as it came."""
        vendor = self._vendor
        if vendor is None:
            await abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                f"no {self.config.resource_name} device plugin is registered behind numatopo",
            )
        try:
            return await vendor.forward(call, request, self.config.forward_timeout_seconds)
        except grpc.aio.AioRpcError as error:
            await abort(context, error.code(), error.details() or "")
        except VendorGoneError as error:
            await abort(context, grpc.StatusCode.UNAVAILABLE, str(error))

    def _note_allocation(self, request: bytes) -> None:
        """The kubelet allocates right after it asked for a preference: when it took
        ours, that container is admitted and the next ask is someone else's."""
        tentative, self._tentative = self._tentative, []
        try:
            asked = pb.AllocateRequest.FromString(request)
        except Exception:  # the vendor will say what is wrong with it
            return
        for container in asked.container_requests:
            ids = sorted(container.devices_ids)
            for candidate, answered in tentative:
                if sorted(answered) == ids:
                    self._consumed.add(candidate.key)

    async def preferred(
        self, request: pb.PreferredAllocationRequest, context: Context
    ) -> pb.PreferredAllocationResponse:
        """Never an error, never late: either would stall or refuse the pod."""
        try:
            return await self._preferred(request)
        except Exception as error:  # the kubelet's own choice instead
            self._error(f"answering a preferred allocation: {error!r}")
            self.metrics.answers.labels(outcome="kubelet").inc(len(request.container_requests))
            return pb.PreferredAllocationResponse(
                container_responses=[
                    pb.ContainerPreferredAllocationResponse() for _ in request.container_requests
                ]
            )

    async def _preferred(
        self, request: pb.PreferredAllocationRequest
    ) -> pb.PreferredAllocationResponse:
        deadline = asyncio.get_running_loop().time() + self.config.answer_deadline_seconds
        vendor = self._vendor
        asked_vendor: asyncio.Task[pb.PreferredAllocationResponse] | None = None
        if vendor is not None and self._vendor_options.get_preferred_allocation_available:
            # Asked at once, beside our own answer: if ours cannot be had in time the
            # vendor's is the better fallback, and it needs the time too.
            asked_vendor = asyncio.create_task(
                vendor.preferred(request, self.config.answer_deadline_seconds)
            )
        try:
            answers = await self._steer(request, deadline)
            theirs: pb.PreferredAllocationResponse | None = None
            if asked_vendor is not None and any(a.device_ids is None for a in answers):
                theirs = await self._vendor_answer(asked_vendor, deadline)
        finally:
            if asked_vendor is not None:
                asked_vendor.cancel()
                # Collects its outcome (no "exception never retrieved"); a cancellation
                # of this call itself still propagates.
                await asyncio.gather(asked_vendor, return_exceptions=True)
        response = pb.PreferredAllocationResponse()
        for position, chosen in enumerate(answers):
            if chosen.device_ids is not None:
                outcome, ids = "steered", chosen.device_ids
            elif theirs is not None and position < len(theirs.container_responses):
                outcome, ids = "vendor", list(theirs.container_responses[position].deviceIDs)
            else:
                outcome, ids = "kubelet", []
            self.metrics.answers.labels(outcome=outcome).inc()
            logger.info("steering: preferred allocation %s (%s): %s", ids, outcome, chosen.why)
            response.container_responses.append(
                pb.ContainerPreferredAllocationResponse(deviceIDs=ids)
            )
        return response

    async def _vendor_answer(
        self, asked: asyncio.Task[pb.PreferredAllocationResponse], deadline: float
    ) -> pb.PreferredAllocationResponse | None:
        try:
            async with asyncio.timeout_at(deadline):
                return await asked
        except TimeoutError:
            logger.info("steering: the vendor's preferred allocation came too late")
        except CALL_FAILED as error:
            logger.info("steering: the vendor's preferred allocation failed: %s", error)
        return None

    async def _steer(self, request: pb.PreferredAllocationRequest, deadline: float) -> list[Answer]:
        asked = request.container_requests
        offered = sum(len(c.available_deviceIDs) + len(c.must_include_deviceIDs) for c in asked)
        if offered > MAX_OFFERED_IDS:
            why = f"{offered} device IDs offered, more than the {MAX_OFFERED_IDS} numatopo reads"
            return [Answer(None, None, why) for _ in asked]
        found = await self._candidates(deadline)
        if isinstance(found, str):
            return [Answer(None, None, found) for _ in request.container_requests]
        # The agent drops admitted pods from its candidates; what they consumed goes too.
        self._consumed &= {c.key for c in found}
        consumed = set(self._consumed)
        answers: list[Answer] = []
        self._tentative = []
        for container in request.container_requests:
            chosen = answer(
                list(container.available_deviceIDs),
                list(container.must_include_deviceIDs),
                container.allocation_size,
                found,
                consumed,
            )
            if chosen.candidate is not None and chosen.device_ids is not None:
                consumed.add(chosen.candidate.key)
                self._tentative.append((chosen.candidate, chosen.device_ids))
            answers.append(chosen)
        return answers

    async def _candidates(self, deadline: float) -> Sequence[InFlight] | str:
        """The candidates, or why there are none to go by."""
        pending = self._pending_candidates
        if pending is not None and not pending.done():
            return "the previous call for containers in flight has not returned"
        self._pending_candidates = pending = self._executor.submit(self.candidates)
        try:
            async with asyncio.timeout_at(deadline):
                return await asyncio.wrap_future(pending)
        except TimeoutError:
            return "the containers in flight were not known within the deadline"
        except Exception as error:  # the caller's bug must not refuse pods
            self._error(f"reading the containers in flight: {error!r}")
            return f"reading the containers in flight failed: {error!r}"
