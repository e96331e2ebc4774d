"""Registration as the kubelet's plugin server does it: version check, last registration
wins, a stream's end marks the resource unhealthy and stops the current endpoint."""

from __future__ import annotations

import random

import grpc
import pytest

from kubelet_harness import Container, FakeGpu, FakeNvidiaPlugin, Harness, Pod, eventually
from kubelet_harness.vendor_plugin import gpus

GPU = "nvidia.com/gpu"


def one_gpu_pod(uid: str, count: int = 1) -> Pod:
    return Pod(uid, f"pod-{uid}", containers=(Container("c", {GPU: count}),))


async def test_a_version_other_than_v1beta1_is_refused() -> None:
    async with Harness(rng=random.Random(1)) as h:
        plugin = FakeNvidiaPlugin(h.registration_socket, gpus(2), version="v1alpha")
        try:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await plugin.start()
        finally:
            await plugin.stop()

        assert refused.value.code() == grpc.StatusCode.UNKNOWN
        assert "v1alpha" in (refused.value.details() or "")
        assert GPU not in h.kubelet.device_manager.endpoints


async def test_register_asks_options_then_streams() -> None:
    async with Harness(rng=random.Random(2)) as h:
        plugin = await h.start_plugin(gpus(2), pre_start_required=True)

        assert [c.method for c in plugin.calls] == ["GetDevicePluginOptions", "ListAndWatch"]
        info = h.kubelet.device_manager.endpoints[GPU]
        assert info.options is not None
        assert info.options.pre_start_required


async def test_the_last_registration_wins() -> None:
    first = [FakeGpu.numbered(i, 0) for i in range(2)]
    second = [FakeGpu.numbered(i, 0) for i in range(10, 12)]
    async with Harness(rng=random.Random(3)) as h:
        old = await h.start_plugin(first, name="old")
        new = await h.start_plugin(second, name="new")

        result = await h.admit(one_gpu_pod("a"))

        assert set(result.ids("c")) <= {d.id for d in second}
        assert old.calls_of("Allocate") == []
        assert len(new.calls_of("Allocate")) == 1


async def test_a_stream_end_marks_the_devices_unhealthy_until_registration() -> None:
    async with Harness(rng=random.Random(4)) as h:
        plugin = await h.start_plugin(gpus(2))
        dm = h.kubelet.device_manager

        plugin.end_streams()
        await eventually(lambda: dm.unhealthy_devices.get(GPU) == set(plugin.devices))
        assert dm.healthy_devices[GPU] == set()
        assert dm.endpoints[GPU].endpoint.is_stopped()
        refused = await h.admit(one_gpu_pod("a"))
        assert "no healthy devices" in (refused.error or "")

        await plugin.restart()  # the plugin registers again
        await eventually(lambda: dm.healthy_devices.get(GPU) == set(plugin.devices))
        assert (await h.admit(one_gpu_pod("b"))).ok


async def test_an_older_endpoints_stream_end_stops_the_newer_endpoint() -> None:
    """The kubelet's runClient disconnects whichever client is registered for the
    resource when *any* client's stream ends: stopping the replaced plugin takes the
    resource down, though the plugin now registered is alive."""
    async with Harness(rng=random.Random(5)) as h:
        old = await h.start_plugin([FakeGpu.numbered(0, 0)], name="old")
        new = await h.start_plugin([FakeGpu.numbered(1, 0)], name="new")
        dm = h.kubelet.device_manager

        await h.stop_plugin(old)

        await eventually(dm.endpoints[GPU].endpoint.is_stopped)
        assert dm.healthy_devices[GPU] == set()
        assert "no healthy devices" in ((await h.admit(one_gpu_pod("a"))).error or "")
        assert new.calls_of("Allocate") == []


async def test_the_replaced_plugins_stream_still_feeds_the_resource() -> None:
    """A re-registration does not stop the earlier client: its updates still land."""
    old_gpu, new_gpu = FakeGpu.numbered(0, 0), FakeGpu.numbered(1, 0)
    async with Harness(rng=random.Random(6)) as h:
        old = await h.start_plugin([old_gpu], name="old")
        await h.start_plugin([new_gpu], name="new")

        old.set_health(old_gpu.id, healthy=False)

        await h.wait_for_devices(GPU, {old_gpu.id})


async def test_the_plugin_registers_with_any_registration_socket() -> None:
    """Pointed elsewhere (a steering proxy's socket), the plugin serves beside it."""
    async with Harness(rng=random.Random(7)) as h, Harness(rng=random.Random(8)) as other:
        plugin = await h.start_plugin(gpus(2), kubelet_socket=other.registration_socket)

        await other.wait_for_devices(GPU, set(plugin.devices))
        assert plugin.socket_path.parent == other.plugin_dir
        assert GPU not in h.kubelet.device_manager.all_devices
