"""Checkpoint and kubelet restart: state comes back from the checkpoint alone, sockets
are deleted, plugins register again, restarted containers replay without an RPC."""

from __future__ import annotations

import json
import os
import random

from kubelet_harness import Container, Harness, Pod, eventually
from kubelet_harness.vendor_plugin import gpus

GPU = "nvidia.com/gpu"


def two_gpu_pod(uid: str) -> Pod:
    return Pod(uid, f"pod-{uid}", containers=(Container("c", {GPU: 2}),))


async def test_the_checkpoint_holds_each_allocation_and_its_response() -> None:
    async with Harness(rng=random.Random(1)) as h:
        await h.start_plugin(gpus(4))
        result = await h.admit(two_gpu_pod("a"))

        data = json.loads(h.checkpoint_path.read_text())["Data"]
        (entry,) = data["PodDeviceEntries"]
        assert (entry["PodUID"], entry["ContainerName"], entry["ResourceName"]) == ("a", "c", GPU)
        ids = sorted(i for per_numa in entry["DeviceIDs"].values() for i in per_numa)
        assert ids == result.ids("c")
        assert entry["AllocResp"]["envs"] == result.envs("c")
        assert sorted(data["RegisteredDevices"][GPU]) == sorted(
            h.kubelet.device_manager.healthy_devices[GPU]
        )


async def test_restart_deletes_sockets_and_the_plugin_registers_again() -> None:
    async with Harness(rng=random.Random(2)) as h:
        plugin = await h.start_plugin(gpus(4))
        before = os.stat(plugin.socket_path).st_ctime_ns
        (h.plugin_dir / "not-a-socket").write_text("kept")

        await h.restart_kubelet()

        dm = h.kubelet.device_manager
        await eventually(lambda: plugin.registrations == 2)
        await h.wait_for_devices(GPU, set(plugin.devices))
        assert (
            os.stat(plugin.socket_path).st_ctime_ns != before
        )  # the plugin's socket was deleted and served again
        assert (h.plugin_dir / "not-a-socket").read_text() == "kept"
        assert dm.healthy_devices[GPU] == set(plugin.devices)
        assert len(plugin.calls_of("ListAndWatch")) == 2


async def test_state_comes_back_from_the_checkpoint_and_containers_replay_without_rpc() -> None:
    async with Harness(rng=random.Random(3)) as h:
        plugin = await h.start_plugin(gpus(4), watch_kubelet_socket=False)
        the_pod = two_gpu_pod("a")
        result = await h.admit(the_pod)
        rpcs = len(plugin.calls)

        await h.restart_kubelet()

        dm = h.kubelet.device_manager
        # Before the plugin registers again: devices held, none healthy, endpoint stopped.
        assert dm.allocated_devices[GPU] == set(result.ids("c"))
        assert dm.healthy_devices[GPU] == set()
        assert dm.endpoints[GPU].endpoint.is_stopped()
        replay = await h.container_restart(the_pod, "c")
        assert replay is not None
        assert replay.envs == result.envs("c")
        assert len(plugin.calls) == rpcs

        await plugin.restart()
        await h.wait_for_devices(GPU, set(plugin.devices))
        replay = await h.container_restart(the_pod, "c")
        assert replay is not None
        assert replay.envs == result.envs("c")
        assert plugin.calls_of("Allocate")[1:] == []

        # A new pod gets the two devices the checkpoint says are free.
        other = await h.admit(two_gpu_pod("b"))
        assert set(other.ids("c")) == set(plugin.devices) - set(result.ids("c"))


async def test_readmitting_a_known_pod_after_restart_needs_no_allocate() -> None:
    async with Harness(rng=random.Random(4)) as h:
        plugin = await h.start_plugin(gpus(4))
        the_pod = two_gpu_pod("a")
        result = await h.admit(the_pod)

        await h.restart_kubelet()
        await eventually(lambda: plugin.registrations == 2)
        await h.wait_for_devices(GPU, set(plugin.devices))
        again = await h.admit(the_pod)

        assert again.ok
        assert again.ids("c") == result.ids("c")
        assert len(plugin.calls_of("Allocate")) == 1
