"""The device manager port chooses devices as the kubelet does (devicesToAllocate,
filterByAffinity, the preference call), over the real gRPC protocol."""

from __future__ import annotations

import random

import pytest

from kubelet_harness import Container, FakeGpu, Harness, Pod, eventually
from kubelet_harness.vendor_plugin import gpus

GPU = "nvidia.com/gpu"

# 8 GPUs: 0-3 on NUMA node 0, 4-7 on NUMA node 1.
EIGHT = gpus(8)
IDS = [g.id for g in EIGHT]
NUMA0, NUMA1 = set(IDS[:4]), set(IDS[4:])


def pod(uid: str, *containers: Container, init: tuple[Container, ...] = ()) -> Pod:
    return Pod(uid, f"pod-{uid}", containers=containers, init_containers=init)


def gpu(name: str, count: int, numa: set[int] | None = None, **kw: bool) -> Container:
    affinity = frozenset(numa) if numa is not None else None
    return Container(name, {GPU: count}, numa_affinity=affinity, **kw)


def preferred_calls(plugin):  # type: ignore[no-untyped-def]
    return [c.request.container_requests[0] for c in plugin.calls_of("GetPreferredAllocation")]


async def test_all_aligned_needed_takes_the_numa_node_without_asking_the_plugin() -> None:
    async with Harness(rng=random.Random(1)) as h:
        plugin = await h.start_plugin(EIGHT)
        result = await h.admit(pod("a", gpu("c", 4, {1})))

        assert result.ok, result.error
        assert set(result.ids("c")) == NUMA1
        # needed == len(aligned): every aligned device, no GetPreferredAllocation
        assert preferred_calls(plugin) == []
        assert [set(c.device_ids) for c in plugin.calls_of("Allocate")] == [NUMA1]


async def test_fewer_than_aligned_asks_the_plugin_among_aligned_only() -> None:
    async with Harness(rng=random.Random(2)) as h:
        plugin = await h.start_plugin(EIGHT)
        result = await h.admit(pod("a", gpu("c", 2, {1})))

        (ask,) = preferred_calls(plugin)
        assert set(ask.available_deviceIDs) == NUMA1
        assert list(ask.must_include_deviceIDs) == []
        assert ask.allocation_size == 2
        # The plugin's own choice (lowest IDs) is what the container gets.
        assert result.ids("c") == sorted(NUMA1)[:2]


async def test_unaligned_branch_takes_all_aligned_then_asks_with_them_as_must_include() -> None:
    async with Harness(rng=random.Random(3)) as h:
        plugin = await h.start_plugin(EIGHT)
        first = await h.admit(pod("a", gpu("c", 2, {0})))
        left_on_0 = NUMA0 - set(first.ids("c"))
        plugin.calls.clear()

        result = await h.admit(pod("b", gpu("c", 3, {0})))

        (ask,) = preferred_calls(plugin)
        assert set(ask.must_include_deviceIDs) == left_on_0
        assert set(ask.available_deviceIDs) == NUMA1 | left_on_0
        assert ask.allocation_size == 3
        assert set(result.ids("c")) == left_on_0 | {min(NUMA1)}


async def test_no_hint_offers_every_available_device() -> None:
    async with Harness(rng=random.Random(4)) as h:
        plugin = await h.start_plugin(EIGHT)
        result = await h.admit(pod("a", gpu("c", 3)))  # policy none: no hint

        (ask,) = preferred_calls(plugin)
        assert set(ask.available_deviceIDs) == set(IDS)
        assert result.ids("c") == sorted(IDS)[:3]


async def test_devices_without_topology_are_no_affinity_even_with_a_hint() -> None:
    devices = [FakeGpu.numbered(i, None) for i in range(4)]
    async with Harness(rng=random.Random(5)) as h:
        plugin = await h.start_plugin(devices)
        await h.admit(pod("a", gpu("c", 1, {0})))

        (ask,) = preferred_calls(plugin)
        assert set(ask.available_deviceIDs) == {d.id for d in devices}


async def test_without_the_option_there_is_no_preference_call_and_the_order_is_random() -> None:
    chosen = set()
    for seed in range(12):
        async with Harness(rng=random.Random(seed)) as h:
            plugin = await h.start_plugin(EIGHT, preferred_allocation=False)
            result = await h.admit(pod("a", gpu("c", 2, {1})))
            assert plugin.calls_of("GetPreferredAllocation") == []
            assert set(result.ids("c")) <= NUMA1
            chosen.add(tuple(result.ids("c")))
    # Go's set iteration order: a test cannot rely on which aligned devices come back.
    assert len(chosen) > 1


async def test_same_seed_same_choice() -> None:
    runs = []
    for _ in range(2):
        async with Harness(rng=random.Random(42)) as h:
            await h.start_plugin(EIGHT, preferred_allocation=False)
            runs.append((await h.admit(pod("a", gpu("c", 3)))).ids("c"))
    assert runs[0] == runs[1]


async def test_init_container_devices_are_reused_without_a_preference_call() -> None:
    async with Harness(rng=random.Random(6)) as h:
        plugin = await h.start_plugin(EIGHT)
        result = await h.admit(pod("a", gpu("app", 2), init=(gpu("init", 2),)))

        assert result.ok, result.error
        assert result.ids("app") == result.ids("init")
        # One preference call (the init container's), one Allocate per container.
        assert len(plugin.calls_of("GetPreferredAllocation")) == 1
        assert len(plugin.calls_of("Allocate")) == 2


async def test_reused_init_devices_are_must_include_for_a_bigger_app_container() -> None:
    async with Harness(rng=random.Random(7)) as h:
        plugin = await h.start_plugin(EIGHT)
        result = await h.admit(pod("a", gpu("app", 3), init=(gpu("init", 1),)))

        init_ids = set(result.ids("init"))
        _, app_ask = preferred_calls(plugin)
        assert set(app_ask.must_include_deviceIDs) == init_ids
        assert init_ids <= set(app_ask.available_deviceIDs)
        assert app_ask.allocation_size == 3
        assert init_ids <= set(result.ids("app"))


async def test_sidecar_devices_are_not_reused() -> None:
    async with Harness(rng=random.Random(8)) as h:
        await h.start_plugin(EIGHT)
        sidecar = gpu("side", 2, restartable=True)
        result = await h.admit(pod("a", gpu("app", 2), init=(sidecar,)))

        assert not set(result.ids("app")) & set(result.ids("side"))


async def test_an_error_from_get_preferred_allocation_fails_admission() -> None:
    async with Harness(rng=random.Random(9)) as h:
        plugin = await h.start_plugin(EIGHT)
        plugin.faults.preferred_error = "no topology for you"

        result = await h.admit(pod("a", gpu("c", 2)))

        assert not result.ok
        assert "GetPreferredAllocation rpc failed" in (result.error or "")
        assert "no topology for you" in (result.error or "")
        assert plugin.calls_of("Allocate") == []
        assert (await h.list_pod_resources()).pod_resources == []


async def test_an_unhealthy_device_is_never_allocated() -> None:
    async with Harness(rng=random.Random(10)) as h:
        plugin = await h.start_plugin(gpus(4), preferred_allocation=False)
        sick = sorted(plugin.devices)[1]
        plugin.set_health(sick, healthy=False)
        dm = h.kubelet.device_manager
        await eventually(lambda: sick in dm.unhealthy_devices.get(GPU, set()))

        result = await h.admit(pod("a", gpu("c", 3)))
        assert result.ok
        assert sick not in result.ids("c")

        refused = await h.admit(pod("b", gpu("c", 1)))
        assert "requested number of devices unavailable" in (refused.error or "")


@pytest.mark.parametrize("pre_start", [True, False])
async def test_pre_start_container_only_when_the_plugin_requires_it(pre_start: bool) -> None:
    async with Harness(rng=random.Random(11)) as h:
        plugin = await h.start_plugin(gpus(4), pre_start_required=pre_start)
        the_pod = pod("a", gpu("c", 2))
        result = await h.admit(the_pod)
        await h.container_restart(the_pod, "c")

        calls = plugin.calls_of("PreStartContainer")
        if pre_start:
            assert [sorted(c.device_ids) for c in calls] == [result.ids("c")] * 2
        else:
            assert calls == []


async def test_allocate_envs_name_exactly_the_allocated_devices() -> None:
    async with Harness(rng=random.Random(12)) as h:
        plugin = await h.start_plugin(EIGHT)
        result = await h.admit(pod("a", gpu("c", 3, {0})))

        (call,) = plugin.calls_of("Allocate")
        assert sorted(call.device_ids) == result.ids("c")
        assert result.envs("c") == {"NVIDIA_VISIBLE_DEVICES": ",".join(call.device_ids)}


@pytest.mark.parametrize("seed", range(5))
async def test_fallback_order_is_aligned_then_unaligned_then_no_affinity(seed: int) -> None:
    on0 = [FakeGpu.numbered(i, 0) for i in range(2)]
    on1 = [FakeGpu.numbered(i, 1) for i in range(2, 4)]
    loose = [FakeGpu.numbered(i, None) for i in range(4, 6)]
    async with Harness(rng=random.Random(seed)) as h:
        await h.start_plugin([*on0, *on1, *loose], preferred_allocation=False)

        result = await h.admit(pod("a", gpu("c", 4, {0})))
        assert set(result.ids("c")) == {g.id for g in on0 + on1}

        rest = await h.admit(pod("b", gpu("c", 2, {1})))
        assert set(rest.ids("c")) == {g.id for g in loose}
