"""A DRA decision whose write stopped half-way (the pod's assignment written, its
claim's status not: the API refused it, then the operator was stopped) is resumed by the
next operator: the claim gets the devices the assignment names, or, when another claim
holds one of them by then, the decision is taken back and made afresh. The real operator
over HTTP against kmock's emulator with an AWS p4d node and NVIDIA-shaped slices."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kmock
import pytest

from dra_objects import allocation_problems, claim, request
from numatopo_engine import annotations as keys
from numatopo_operator import dra

from .conftest import Cluster, events_api_hanging, eventually, register_resources
from .test_dra_cluster import (
    CLAIMS,
    FAST,
    NODE,
    allocated,
    build,
    classes,
    dra_pod,
    gated,
    hold,
    stored,
)


class ClaimStatusFaults(kmock.KubernetesEmulator):
    """Refuses writes of `resourceclaims/status` with 503 while `refusing` is set, before
    storing anything (as a failing API server would)."""

    refusing: asyncio.Event
    refused: list[str]

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        resource = getattr(request, "resource", None)
        if (
            self.refusing.is_set()
            and str(getattr(request, "method", "")).upper().endswith("PATCH")
            and resource is not None
            and str(resource.plural) == "resourceclaims"
            and getattr(request, "subresource", None) == "status"
        ):
            self.refused.append(str(request.url))
            return aiohttp.web.json_response(
                {"kind": "Status", "status": "Failure", "reason": "ServiceUnavailable"},
                status=503,
            )
        return await super()._handle(request)


@pytest.fixture
async def faulty() -> AsyncIterator[tuple[Cluster, ClaimStatusFaults]]:
    api = ClaimStatusFaults()
    api.refusing = asyncio.Event()
    api.refused = []
    async with api, kmock.Server(api):
        register_resources(api)
        yield Cluster(api), api


async def stopped_half_way(
    cluster: Cluster, api: ClaimStatusFaults, start_operator_on: Any
) -> list[int]:
    """Run an operator until the pod's assignment is written and the claim's status
    refused, then stop it; returns the assignment's GPUs."""
    api.refusing.set()
    first = await start_operator_on(cluster, **FAST)
    await eventually(
        lambda: keys.ASSIGNMENT in cluster.annotations("train") and bool(api.refused),
        what="the assignment written, the claim's status refused",
        timeout=15,
    )
    await first.stop()
    assert gated(cluster, "train")
    assert allocated(cluster, "three") == []
    assignment = json.loads(cluster.annotations("train")[keys.ASSIGNMENT])
    api.refusing.clear()
    return sorted(assignment["containers"]["main"]["gpuIndices"])


async def test_a_write_stopped_between_assignment_and_claim_is_completed(
    faulty: tuple[Cluster, ClaimStatusFaults], start_operator_on: Any
) -> None:
    cluster, api = faulty
    slices = await build(cluster)
    await cluster.create(CLAIMS, claim("three", [request("gpu", "gpu.nvidia.com", 3)]))
    await cluster.create_pod(dra_pod("train", ["three"]))
    gpus = await stopped_half_way(cluster, api, start_operator_on)

    await start_operator_on(cluster, **FAST)

    await eventually(lambda: not gated(cluster, "train"), what="train released", timeout=20)
    assert allocated(cluster, "three") == sorted(f"gpu-{g}" for g in gpus)
    obj = stored(cluster, "resourceclaims", "three")
    assert obj is not None
    assert allocation_problems(obj, NODE, slices, classes()) == []
    uid = cluster.pod("train")["metadata"]["uid"]
    assert obj["status"]["reservedFor"] == [{"resource": "pods", "name": "train", "uid": uid}]
    assert cluster.pod("train")["spec"]["nodeSelector"] == {"kubernetes.io/hostname": NODE}

    def resumed() -> bool:
        return any(r == "DRAAllocated" and "(resumed)" in m for r, m in cluster.events_for("train"))

    await eventually(resumed, what="DRAAllocated (resumed)")


async def taken_while_stopped(
    faulty: tuple[Cluster, ClaimStatusFaults], start_operator_on: Any
) -> tuple[Cluster, list[int]]:
    """Claim "three" (3 GPUs) of pod "train" written half way by a replica that stopped;
    then another scheduler allocates the first of those GPUs to its own claim "theirs"."""
    cluster, api = faulty
    await build(cluster)
    await cluster.create(CLAIMS, claim("three", [request("gpu", "gpu.nvidia.com", 3)]))
    await cluster.create(CLAIMS, claim("theirs", [request("gpu", "gpu.nvidia.com", 1)]))
    await cluster.create_pod(dra_pod("train", ["three"]))
    gpus = await stopped_half_way(cluster, api, start_operator_on)
    await hold(cluster, "theirs", [("gpu", f"gpu-{gpus[0]}")])
    return cluster, gpus


async def test_a_stopped_write_whose_devices_were_taken_meanwhile_is_decided_again(
    faulty: tuple[Cluster, ClaimStatusFaults], start_operator_on: Any
) -> None:
    cluster, gpus = await taken_while_stopped(faulty, start_operator_on)

    await start_operator_on(cluster, **FAST)

    await eventually(lambda: not gated(cluster, "train"), what="train released", timeout=20)
    await eventually(
        lambda: any(r == "DRARolledBack" for r, _ in cluster.events_for("train")),
        what="DRARolledBack",
    )
    said = [m for r, m in cluster.events_for("train") if r == "DRARolledBack"]
    assert f"holds gpu-{gpus[0]}" in said[0], said
    three = allocated(cluster, "three")
    assert len(three) == 3
    assert f"gpu-{gpus[0]}" not in three
    assignment = json.loads(cluster.annotations("train")[keys.ASSIGNMENT])
    assert sorted(f"gpu-{g}" for g in assignment["containers"]["main"]["gpuIndices"]) == three


async def test_a_rolled_back_decision_is_made_again_while_the_events_api_hangs(
    faulty: tuple[Cluster, ClaimStatusFaults], start_operator_on: Any
) -> None:
    """The Events API answers no POST: the pod is rolled back and decided afresh all the
    same (its `DRARolledBack` waits in the queue; posted inline, it held the pod's next
    look until the client gave up, 30 s later), and both Events go out, in order."""
    cluster, gpus = await taken_while_stopped(faulty, start_operator_on)

    with events_api_hanging(cluster):
        await start_operator_on(cluster, **FAST)
        await eventually(
            lambda: not gated(cluster, "train"),
            what="train decided again and released while no Event is answered",
            timeout=20,
        )
        three = allocated(cluster, "three")
        assert len(three) == 3
        assert f"gpu-{gpus[0]}" not in three
    await eventually(
        lambda: (
            [r for r, _ in cluster.events_for("train")][-2:] == ["DRARolledBack", "DRAAllocated"]
        ),
        what="both Events sent, in order",
    )


async def test_a_decision_that_fails_unexpectedly_is_made_again(
    cluster: Cluster, start_operator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in deciding a gated DRA pod (here: its first reading of the pod's claims
    raises): the pod is looked at again as one that waits, and the failure is counted.
    Before, only a later event of the pod brought it back (here one came; a gated pod in
    a quiet cluster may get none), and nothing counted the failure."""
    await build(cluster)
    await cluster.create(CLAIMS, claim("three", [request("gpu", "gpu.nvidia.com", 3)]))
    real, failed = dra.pod_claims, []

    def first_fails(pod: Any) -> Any:
        if not failed:
            failed.append(pod)
            raise RuntimeError("a bug in deciding")
        return real(pod)

    monkeypatch.setattr(dra, "pod_claims", first_fails)
    running = await start_operator(**FAST)
    await cluster.create_pod(dra_pod("train", ["three"]))

    await eventually(lambda: not gated(cluster, "train"), what="train released", timeout=20)
    assert len(allocated(cluster, "three")) == 3
    restarts = running.runtime.metrics.registry.get_sample_value(
        "numatopo_task_restarts_total", {"task": "DRA pod decision"}
    )
    assert (1, 1.0) == (len(failed), restarts)
