"""The steering proxy, end to end between a stand-in kubelet and a stand-in vendor
plugin: it passes the vendor's answers on unchanged, answers preferred allocations
with the assigned GPUs (or the kubelet's own choice, never an error, never late),
and keeps the kubelet registered through wipes, dropped streams and vendor restarts."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import grpc
import pytest

from metric_samples import sample
from numatopo_exporter.kubelet_api import deviceplugin_pb2 as pb
from numatopo_exporter.steering.choice import InFlight
from numatopo_exporter.steering.proxy import Steerer, SteeringConfig

from .conftest import ALLOCATED, RESOURCE, UUIDS, FakeKubelet, FakeVendor, Node, eventually, settled


def flight(uid: str, created: float, gpus: list[int]) -> InFlight:
    return InFlight(
        pod_uid=uid, pod_key=f"default/{uid}", created=created, container="main",
        container_order=0, gpus=tuple(UUIDS[g] for g in gpus), gpu_indices=tuple(gpus),
    )  # fmt: skip


@asynccontextmanager
async def steered(
    node: Node, candidates: Sequence[InFlight] = (), **changes: object
) -> AsyncIterator[tuple[FakeKubelet, FakeVendor, Steerer]]:
    kubelet = FakeKubelet(node.kubelet_dir)
    vendor = FakeVendor(node.kubelet_dir)
    steerer = Steerer(lambda: tuple(candidates), node.config(**changes))
    await kubelet.start()
    try:
        async with steerer:
            await vendor.start()
            try:
                await vendor.register(steerer.registration_socket)
                await eventually(lambda: kubelet.lists and steerer.status().steering)
                yield kubelet, vendor, steerer
            finally:
                vendor.release.set()
                await vendor.stop()
    finally:
        await kubelet.stop()


async def test_kubelet_sees_one_endpoint_with_the_vendors_devices_and_answers(
    node: Node,
) -> None:
    async with steered(node) as (kubelet, vendor, steerer):
        (registration,) = kubelet.registrations
        assert registration.resource_name == RESOURCE
        assert registration.version == "v1beta1"
        assert registration.endpoint == "numatopo-nvidia.com-gpu.sock"
        assert registration.options == pb.DevicePluginOptions(
            pre_start_required=True, get_preferred_allocation_available=True
        )
        assert kubelet.options == registration.options
        assert kubelet.lists[-1].SerializeToString() == vendor.listed.SerializeToString()

        request = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=[UUIDS[1]])]
        )
        raw = await kubelet.raw("Allocate", request.SerializeToString())
        assert raw == pb.AllocateResponse(container_responses=[ALLOCATED]).SerializeToString()
        assert vendor.allocations == [request]
        start = pb.PreStartContainerRequest(devices_ids=[UUIDS[1]])
        assert await kubelet.raw("PreStartContainer", start.SerializeToString()) == b""
        assert vendor.pre_starts == [start]

        # The vendor's refusal reaches the kubelet as it was.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await kubelet.allocate(["bad"])
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.details() == "unknown device bad"

        status = steerer.status()
        assert (status.registered, status.vendor_registered, status.vendor_healthy) == (
            True, True, True,
        )  # fmt: skip
        assert status.vendor_endpoint == str(vendor.socket)
        assert sample(steerer.metrics, "numatopo_steering_registrations_total",
                                     {"result": "ok"}) == 1  # fmt: skip


async def test_in_flight_containers_get_their_own_gpus_one_admission_after_another(
    node: Node,
) -> None:
    first, second = flight("a", 1.0, [2]), flight("b", 2.0, [3])
    async with steered(node, [second, first]) as (kubelet, vendor, steerer):
        assert await kubelet.preferred(UUIDS, 1) == [UUIDS[2]]
        # Asked again before Allocate (the kubelet retried): the same container.
        assert await kubelet.preferred(UUIDS, 1) == [UUIDS[2]]
        await kubelet.allocate([UUIDS[2]])
        # Same size, same devices offered: consumed, so the next pod gets its own.
        assert await kubelet.preferred(UUIDS, 1) == [UUIDS[3]]
        await kubelet.allocate([UUIDS[3]])
        # Nobody left of that size: the vendor's own preference.
        assert await kubelet.preferred(UUIDS, 1) == vendor.preferred_ids
        assert sample(steerer.metrics, "numatopo_steering_answers_total",
                                     {"outcome": "steered"}) == 3  # fmt: skip
        assert sample(steerer.metrics, "numatopo_steering_answers_total",
                                     {"outcome": "vendor"}) == 1  # fmt: skip


async def test_hanging_candidates_and_vendor_still_answer_within_the_deadline(
    node: Node,
) -> None:
    gate = threading.Event()

    def hanging() -> Sequence[InFlight]:
        gate.wait(10)
        return (flight("a", 1.0, [1]),)

    kubelet = FakeKubelet(node.kubelet_dir)
    vendor = FakeVendor(node.kubelet_dir)
    vendor.preferred_mode = "hang"
    await kubelet.start()
    try:
        async with Steerer(hanging, node.config(answer_deadline_seconds=0.2)) as steerer:
            await vendor.start()
            await vendor.register(steerer.registration_socket)
            await eventually(lambda: kubelet.lists)
            for _ in range(2):  # the second finds the first call still hanging
                began = time.monotonic()
                assert await kubelet.preferred(UUIDS, 1) == []
                assert time.monotonic() - began < 0.6
            # The vendor answering in time is the fallback while ours cannot be had.
            vendor.preferred_mode = "answer"
            assert await kubelet.preferred(UUIDS, 1) == vendor.preferred_ids
            gate.set()
            await asyncio.sleep(0.05)
            assert await kubelet.preferred(UUIDS, 1) == [UUIDS[1]]
    finally:
        gate.set()
        vendor.release.set()
        await vendor.stop()
        await kubelet.stop()


async def test_failing_vendor_or_candidates_are_no_error_for_the_kubelet(node: Node) -> None:
    async with steered(node) as (kubelet, vendor, steerer):
        vendor.preferred_mode = "error"
        assert await kubelet.preferred(UUIDS, 1) == []
        assert sample(steerer.metrics, "numatopo_steering_answers_total",
                                     {"outcome": "kubelet"}) == 1  # fmt: skip

    def broken() -> Sequence[InFlight]:
        raise RuntimeError("agent bug")

    kubelet = FakeKubelet(node.kubelet_dir)
    vendor = FakeVendor(node.kubelet_dir)
    await kubelet.start()
    try:
        async with Steerer(broken, node.config()) as steerer:
            await vendor.start()
            await vendor.register(steerer.registration_socket)
            await eventually(lambda: kubelet.lists)
            assert await kubelet.preferred(UUIDS, 1) == vendor.preferred_ids
            assert "agent bug" in (steerer.status().last_error or "")
    finally:
        await vendor.stop()
        await kubelet.stop()


@pytest.mark.alone  # the vendor's answer to 200,000 IDs must beat the 0.2 s deadline
async def test_odd_and_huge_requests_are_answered_in_time_and_the_proxy_goes_on(
    node: Node,
) -> None:
    """What only a broken or hostile kubelet sends: duplicate and unknown IDs, sizes of
    nothing or more than offered, must-include IDs not offered, and 200,000 IDs in one
    request. Each gets an answer (the vendor's, where numatopo has none) within a
    second, and the proxy steers the next request as before. Before, must-include IDs
    were matched against the offered ones pairwise on the event loop: the huge request
    held it for tens of seconds."""
    async with steered(node, [flight("a", 1.0, [2, 3])]) as (kubelet, vendor, steerer):
        replicas = [f"{u}::{r}" for r in range(1000) for u in UUIDS]

        async def timed(available: list[str], size: int, must: Sequence[str] = ()) -> list[str]:
            began = time.monotonic()
            ids = await kubelet.preferred(available, size, must)
            assert time.monotonic() - began < 1.0, (len(available), len(must))
            return ids

        huge = [f"x{n}" for n in range(100_000)]
        assert await timed(huge, 2, [f"y{n}" for n in range(100_000)]) == vendor.preferred_ids
        assert await timed(replicas, 2, [f"y{n}" for n in range(8000)]) == vendor.preferred_ids
        for size in (0, -1, 3, 2**31 - 1):
            assert await timed(UUIDS, size) == vendor.preferred_ids
        assert await timed(["bogus", UUIDS[2], "bogus", UUIDS[2]], 2) == vendor.preferred_ids
        # Time-sliced replicas, each offered twice: one replica of each assigned GPU.
        assert await timed(replicas + replicas, 2) == [f"{UUIDS[2]}::0", f"{UUIDS[3]}::0"]

        await kubelet.allocate(huge)
        assert list(vendor.allocations[-1].container_requests[0].devices_ids) == huge
        assert await timed(UUIDS, 2) == [UUIDS[2], UUIDS[3]]
        assert sample(steerer.metrics, "numatopo_steering_answers_total",
                      {"outcome": "vendor"}) == 7  # fmt: skip


async def test_registers_again_after_the_kubelet_restarts(node: Node) -> None:
    async with steered(node) as (kubelet, vendor, steerer):
        before = (
            steerer.registration_socket.stat().st_ino,
            steerer.registration_socket.stat().st_ctime_ns,
        )
        await kubelet.restart()  # our socket and the vendor's are wiped
        await eventually(lambda: len(kubelet.registrations) >= 2 and kubelet.channel is not None)
        assert steerer.own_socket.exists()
        # The vendor's socket went with the wipe: the registration socket is made anew,
        # which is what makes NVIDIA's plugin restart and register again.
        await eventually(
            lambda: (steerer.registration_socket.exists() and (
                steerer.registration_socket.stat().st_ino,
                steerer.registration_socket.stat().st_ctime_ns) != before)
        )  # fmt: skip
        await vendor.stop()
        await vendor.start()
        await vendor.register(steerer.registration_socket)
        await eventually(
            lambda: (
                kubelet.lists and kubelet.lists[-1] == vendor.listed and steerer.status().steering
            )
        )
        await settled(kubelet)
        assert await answered(kubelet) == vendor.preferred_ids


async def answered(kubelet: FakeKubelet) -> list[str]:
    """A preferred allocation, asked again when the stand-in kubelet replaced its
    connection under the call (it does on every registration)."""
    for _ in range(50):
        try:
            return await kubelet.preferred(UUIDS, 1)
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            await asyncio.sleep(0.05)
    raise AssertionError("no answer")


async def test_registers_again_when_the_kubelet_drops_the_endpoint(node: Node) -> None:
    async with steered(node) as (kubelet, _vendor, steerer):
        await kubelet.drop_stream()
        await eventually(lambda: len(kubelet.registrations) == 2 and kubelet.lists)
        await eventually(lambda: steerer.status().registered)
        # Its own socket deleted by someone: served again, registered again.
        steerer.own_socket.unlink()
        await eventually(lambda: len(kubelet.registrations) == 3 and steerer.own_socket.exists())


async def test_a_gone_vendor_leaves_its_devices_unhealthy_until_it_is_back(node: Node) -> None:
    async with steered(node) as (kubelet, vendor, steerer):
        await vendor.stop()
        await eventually(
            lambda: (
                kubelet.lists[-1].devices
                and all(d.health == "Unhealthy" for d in kubelet.lists[-1].devices)
            )
        )
        assert [d.ID for d in kubelet.lists[-1].devices] == UUIDS
        assert not steerer.status().vendor_healthy
        assert sample(steerer.metrics, "numatopo_steering_vendor_missing_total") == 1
        # The kubelet's stream stayed open all along.
        assert len(kubelet.registrations) == 1
        await vendor.start()
        await vendor.register(steerer.registration_socket)
        await eventually(lambda: kubelet.lists[-1] == vendor.listed)
        assert steerer.status().steering


class GarbledVendor(FakeVendor):
    """Lists its devices once, then sends bytes that are no device list."""

    async def start(self) -> None:
        async def lists(request: bytes, context: object) -> AsyncIterator[bytes]:
            yield self.listed.SerializeToString()
            yield b"\xff\xff\xff\xff not a ListAndWatchResponse"
            await asyncio.Event().wait()

        async def options(request: bytes, context: object) -> bytes:
            return self.options().SerializeToString()

        self._server = grpc.aio.server()
        handlers = {
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(lists),
            "GetDevicePluginOptions": grpc.unary_unary_rpc_method_handler(options),
        }
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("v1beta1.DevicePlugin", handlers),)
        )
        self._server.add_insecure_port(f"unix:{self.socket}")
        await self._server.start()


async def test_a_device_list_that_does_not_parse_is_not_passed_on(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    """The kubelet would end a stream that sends it: it keeps the vendor's last readable
    list, Unhealthy, as for a vendor that is gone, and numatopo's endpoint stays
    registered. Before, the bytes went to the kubelet and the node read as steered."""
    kubelet = FakeKubelet(node.kubelet_dir)
    vendor = GarbledVendor(node.kubelet_dir)
    await kubelet.start()
    try:
        async with Steerer(tuple, node.config()) as steerer:
            await vendor.start()
            await vendor.register(steerer.registration_socket)
            await eventually(
                lambda: (
                    kubelet.lists
                    and all(d.health == "Unhealthy" for d in kubelet.lists[-1].devices)
                )
            )
            assert [d.ID for d in kubelet.lists[-1].devices] == UUIDS
            assert not steerer.status().steering
            assert "listed devices in no readable form" in caplog.text
            await asyncio.sleep(0.3)
            assert len(kubelet.registrations) == 1
    finally:
        await vendor.stop()
        await kubelet.stop()


async def test_only_the_steered_resource_may_register(node: Node) -> None:
    vendor = FakeVendor(node.kubelet_dir, "amd.sock")
    async with Steerer(tuple, node.config()) as steerer:
        await vendor.start()
        try:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await vendor.register(steerer.registration_socket, "amd.com/gpu")
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "nvidia.com/gpu" in (refused.value.details() or "")
            assert not steerer.status().vendor_registered
            # Endpoints naming numatopo's own sockets (it would dial itself), or outside
            # the two folders.
            for endpoint in ("kubelet.sock", steerer.own_socket.name, "../k/amd.sock", ".."):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await _register_endpoint(steerer, endpoint)
                assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, endpoint
            assert not steerer.status().vendor_registered
        finally:
            await vendor.stop()


async def _register_endpoint(steerer: Steerer, endpoint: str) -> None:
    async with grpc.aio.insecure_channel(f"unix:{steerer.registration_socket}") as channel:
        register = channel.unary_unary(
            "/v1beta1.Registration/Register",
            request_serializer=pb.RegisterRequest.SerializeToString,
            response_deserializer=pb.Empty.FromString,
        )
        await register(
            pb.RegisterRequest(version="v1beta1", endpoint=endpoint, resource_name=RESOURCE),
            timeout=5,
        )


def test_own_endpoint_is_named_for_the_resource() -> None:
    assert SteeringConfig(resource_name="example.com/fpga:x").own_endpoint == (
        "numatopo-example.com-fpga-x.sock"
    )
