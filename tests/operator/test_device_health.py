"""Device health, end to end: the kubelet harness (device manager port, NVIDIA-shaped
plugin over the real device-plugin API, PodResources over gRPC), the real agent loop
reading `GetAllocatableResources`, and the real operator (kopf over HTTP, kmock's
emulator). A GPU its plugin reports Unhealthy (ListAndWatch) and a GPU the plugin does
not advertise at all are published in `status.unhealthy` and never assigned; a GPU that
recovers is assigned again."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

from kubelet_harness import FakeGpu, Harness
from node_agent import running_agent
from numatopo_engine import annotations as keys

from .test_gpu_follow import NODE, cgroup_tree, uuid_of, with_uuids

SICK, ABSENT = 2, 5


def gpus_of(cluster: Any, name: str) -> set[int] | None:
    text = cluster.annotations(name).get(keys.ASSIGNMENT)
    if not text:
        return None
    return {g for c in json.loads(text)["containers"].values() for g in c.get("gpuIndices", [])}


@pytest.mark.timeout(60)
async def test_gpus_the_kubelet_cannot_hand_out_are_never_assigned(
    env: Any, tmp_path: Path
) -> None:
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    spec = with_uuids(h100)
    await cluster.create_numatopology(topology_object(NODE, spec))
    operator = await start_operator()
    cgroup_tree(tmp_path, "none")

    async with Harness(rng=random.Random(5)) as kubelet:
        advertised = [FakeGpu(uuid_of(g.index), g.numa) for g in spec.gpus if g.index != ABSENT]
        plugin = await kubelet.start_plugin(advertised)
        plugin.set_health(uuid_of(SICK), False)
        async with running_agent(
            str(cluster.api.url), NODE, tmp_path, kubelet.pod_resources_socket
        ):

            def unhealthy() -> list[int] | None:
                found = cluster.numatopology_status(NODE).get("unhealthy")
                return None if found is None else list(found["gpus"])

            await wait(lambda: unhealthy() == [SICK, ABSENT], what="status.unhealthy")
            await wait(
                lambda: cluster.numatopology_status(NODE).get("freeGPUs") == 6,
                what="freeGPUs counts healthy GPUs only",
            )
            await cluster.create_pod(pod("a", gpus=4, cpu="4", policy="best-effort"))
            await cluster.create_pod(pod("b", gpus=2, cpu="4", policy="best-effort"))
            await wait(lambda: gpus_of(cluster, "a") is not None, what="a assigned")
            await wait(lambda: gpus_of(cluster, "b") is not None, what="b assigned")
            taken = (gpus_of(cluster, "a") or set()) | (gpus_of(cluster, "b") or set())
            assert len(taken) == 6
            assert not taken & {SICK, ABSENT}

            # Every healthy GPU is taken: a third pod waits, though two GPUs are idle.
            await cluster.create_pod(pod("c", gpus=1, cpu="2", policy="best-effort"))
            await asyncio.sleep(1.0)
            assert gpus_of(cluster, "c") is None

            # The GPU recovers: its plugin says so, the agent reports it, c gets it.
            plugin.set_health(uuid_of(SICK), True)
            await wait(lambda: unhealthy() == [ABSENT], what="GPU 2 healthy again")
            await wait(lambda: gpus_of(cluster, "c") == {SICK}, what="c gets GPU 2")
    assert operator.runtime.ledger.unhealthy(NODE).gpus == [ABSENT]
