"""The operator never forgets a pod: reasons travel with states, pods changed while no
replica decided are judged on take-over, failed writes are retried until they land,
decisions carry a per-node sequence, and a Numatopology whose exporter went quiet is
not placed on. The real operator over HTTP against kmock's emulator."""

from __future__ import annotations

import asyncio
import collections
import datetime
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kmock
import pytest

from numatopo_engine import annotations as keys
from numatopo_engine.annotations import Assignment

from .conftest import Cluster, eventually, make_pod, numatopology, register_resources

NODE = "h100-a"
FAST_RETRIES = {"retry_base_seconds": 0.2, "retry_max_seconds": 1.0}


def annotations_of(cluster: Cluster, name: str) -> dict[str, str]:
    return cluster.annotations(name)


def state(cluster: Cluster, name: str) -> str | None:
    return annotations_of(cluster, name).get(keys.STATE)


# -- 1. the reason of a refusal is on the pod, in the same patch as its state ---------------


async def test_a_refusal_carries_its_reason_and_the_event_repeats_it(env):
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(NODE, h100))
    await start_operator()
    await cluster.create_pod(pod("wide", gpus=6))

    await wait(lambda: cluster.events_for("wide"), what="an Event about wide")
    found = annotations_of(cluster, "wide")
    [(event_reason, message)] = cluster.events_for("wide")

    assert ("Unsatisfiable", "NumatopoUnsatisfiable") == (found[keys.STATE], event_reason)
    assert found[keys.REASON] == message
    assert "does not fit on h100-a" in message


async def test_a_refusal_left_without_its_reason_is_judged_again_on_start(env):
    """A replica killed between the state patch and its Event (the old two-step write)
    left `Unsatisfiable` with no reason anywhere: the next one writes it."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(NODE, h100))
    await cluster.create_pod(pod("wide", gpus=6, annotations={keys.STATE: "Unsatisfiable"}))
    # Exclusive CPUs need whole CPU requests: invalid whoever judges it.
    broken = {keys.STATE: "Invalid", keys.CPU: "exclusive"}
    await cluster.create_pod(pod("broken", cpu="1500m", annotations=broken))
    await start_operator()

    await wait(
        lambda: (
            keys.REASON in annotations_of(cluster, "wide")
            and keys.REASON in annotations_of(cluster, "broken")
        ),
        what="both refusals get their reasons",
    )

    assert "does not fit on h100-a" in annotations_of(cluster, "wide")[keys.REASON]
    assert "invalid topology request" in annotations_of(cluster, "broken")[keys.REASON]
    assert ("Unsatisfiable", "Invalid") == (state(cluster, "wide"), state(cluster, "broken"))


# -- 2. pods that changed while no replica decided are judged on take-over -----------------


def claim(*gpus: int, cpus: str = "", seq: int = 0) -> str:
    container: dict[str, Any] = {"gpuIndices": list(gpus)}
    if cpus:
        container["cpus"] = cpus
    return json.dumps(
        {"v": 1, "node": NODE, "seq": seq, "numaNodes": [0], "containers": {"main": container}}
    )


async def test_hand_written_assignments_are_judged_when_a_replica_takes_over(env):
    """Written while no replica decided: an unreadable one and one overlapping an earlier
    claim become Invalid with the reason; valid ones are kept exactly as they are."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(NODE, h100))
    await cluster.create_pod(pod("older", annotations={keys.ASSIGNMENT: claim(0, seq=1)}))
    await cluster.create_pod(pod("valid", annotations={keys.ASSIGNMENT: claim(3, seq=2)}))
    await cluster.create_pod(pod("overlapping", annotations={keys.ASSIGNMENT: claim(0, 1, seq=3)}))
    await cluster.create_pod(pod("off-node", annotations={keys.ASSIGNMENT: claim(9)}))
    await cluster.create_pod(pod("unreadable", annotations={keys.ASSIGNMENT: "{not json"}))
    kept = {name: annotations_of(cluster, name) for name in ("older", "valid")}
    running = await start_operator()

    await wait(
        lambda: all(
            state(cluster, name) == "Invalid" for name in ("overlapping", "off-node", "unreadable")
        ),
        what="the three bad assignments marked Invalid",
    )
    await cluster.create_pod(pod("new", gpus=4))
    await wait(lambda: state(cluster, "new") == "Assigned", what="a new pod placed")
    new = Assignment.model_validate_json(annotations_of(cluster, "new")[keys.ASSIGNMENT])

    assert "GPU 0 is held by default/older" in annotations_of(cluster, "overlapping")[keys.REASON]
    assert "GPU 9 does not exist" in annotations_of(cluster, "off-node")[keys.REASON]
    assert "not a valid assignment" in annotations_of(cluster, "unreadable")[keys.REASON]
    assert kept == {name: annotations_of(cluster, name) for name in ("older", "valid")}
    assert set() == {0, 3} & set(new.containers["main"].gpu_indices)
    assert {"default/older", "default/valid", "default/new"} <= set(
        running.runtime.ledger.state(NODE).assignments
    )


# -- 3. failed writes are retried until the pod has its answer -----------------------------


class RefusingEmulator(kmock.KubernetesEmulator):
    """Refuses pod patches with 503 while `refusing` is set, before storing anything.

    kmock's reactions (`api["patch v1/pods"] << 503`) answer with the error but still
    apply the patch to the stored object (its emulator stores first, then reacts), which
    is not what a failing API server does; so the refusal is made one step earlier.
    """

    refusing: asyncio.Event
    refused: list[str]

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        resource = getattr(request, "resource", None)
        if (
            self.refusing.is_set()
            and str(getattr(request, "method", "")).upper().endswith("PATCH")
            and resource is not None
            and str(resource.plural) == "pods"
        ):
            self.refused.append(str(request.url))
            return aiohttp.web.json_response(
                {"kind": "Status", "status": "Failure", "reason": "ServiceUnavailable"},
                status=503,
            )
        return await super()._handle(request)


@pytest.fixture
async def refusing_cluster() -> AsyncIterator[tuple[Cluster, RefusingEmulator]]:
    api = RefusingEmulator()
    api.refusing = asyncio.Event()
    api.refused = []
    async with api, kmock.Server(api):
        register_resources(api)
        yield Cluster(api), api


async def test_every_pod_gets_its_answer_after_the_api_refused_all_writes(
    refusing_cluster, start_operator_on, h100
):
    cluster, api = refusing_cluster
    pod, topology_object, wait = make_pod, numatopology, eventually
    await cluster.create_numatopology(topology_object(NODE, h100))
    running = await start_operator_on(cluster, **FAST_RETRIES)
    await wait(lambda: running.runtime.deciding, what="the operator decides")
    api.refusing.set()
    names = [f"job-{i}" for i in range(4)]
    for name in names:
        await cluster.create_pod(pod(name, gpus=1, cpu="2"))

    def refused_past_quick_retries() -> bool:
        # The first try and the client's three quick retries (0.2 + 0.5 + 1 s), refused
        # for every pod. The queue alone says less: a pod can be queued while its write
        # is still being retried, and the write then succeeds once the API recovers.
        tries = collections.Counter(url.rsplit("/", 1)[-1] for url in api.refused)
        return all(tries[name] >= 4 for name in names)

    await wait(
        lambda: refused_past_quick_retries() and len(running.runtime.retries) == 4,
        what="every pod refused past the quick retries and queued",
        timeout=15,
    )
    await asyncio.sleep(1.0)
    api.refusing.clear()

    await wait(
        lambda: all(state(cluster, name) == "Assigned" for name in names),
        what="every pod Assigned once the API recovers",
        timeout=15,
    )
    await wait(lambda: len(running.runtime.retries) == 0, what="the queue drains")
    _, metrics = await running.get("/metrics")

    # The client's quick retries themselves: tests/operator/test_kube_retries.py.
    assert "numatopo_retry_queue_pods 0.0" in metrics
    retried = [line for line in metrics.splitlines() if line.startswith("numatopo_retries_total")]
    assert float(retried[0].split()[-1]) >= 4


# -- 4. decision sequence -------------------------------------------------------------------


async def test_decisions_carry_one_more_than_the_highest_sequence_on_the_node(env):
    """Monotone across replicas: a replica starting fresh continues from the pods."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(NODE, h100))
    before = json.loads(claim(7))
    before["seq"] = 41
    decided = {keys.ASSIGNMENT: json.dumps(before)}
    await cluster.create_pod(pod("decided-before", annotations=decided))
    await start_operator()
    for name in ("first", "second"):
        await cluster.create_pod(pod(name, cpu="2"))
        await wait(lambda name=name: state(cluster, name) == "Assigned", what=f"{name} Assigned")

    seqs = [
        Assignment.model_validate_json(annotations_of(cluster, name)[keys.ASSIGNMENT]).seq
        for name in ("first", "second")
    ]

    assert [42, 43] == seqs


# -- 6. a Numatopology whose heartbeat is too old is stale ------------------------------------


def heartbeat(seconds_ago: float) -> str:
    moment = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds_ago)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_a_node_whose_heartbeat_is_too_old_gets_nothing_until_it_beats_again(env):
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    quiet = topology_object(NODE, h100)
    quiet["status"]["heartbeat"] = heartbeat(3600)
    silent = topology_object("h100-old-exporter", h100)  # no heartbeat at all: not stale
    await cluster.create_numatopology(quiet)
    await cluster.create_numatopology(silent)
    running = await start_operator(heartbeat_max_age_seconds=60, **FAST_RETRIES)
    await wait(lambda: running.runtime.deciding, what="the operator decides")
    await cluster.create_pod(pod("bound-there", gpus=1))

    _, filtered = await running.post(
        "/filter",
        {"Pod": pod("job", node=None, gpus=1), "NodeNames": [NODE, "h100-old-exporter"]},
    )
    await asyncio.sleep(1.0)
    waited = state(cluster, "bound-there")
    async with cluster.api.patch(
        f"/apis/numatopo.io/v1alpha1/numatopologies/{NODE}/status",
        json={"status": {"heartbeat": heartbeat(0)}},
    ) as response:
        assert response.status < 300
    await wait(lambda: state(cluster, "bound-there") == "Assigned", what="placed once it beats")

    assert ["h100-old-exporter"] == filtered["NodeNames"]
    assert "last heartbeat is 36" in filtered["FailedAndUnresolvableNodes"][NODE]
    assert None is waited


# -- 6. Numatopologies: all listed ones known at once, changes and deletions seen ----


async def test_the_first_answer_after_a_start_sees_every_listed_numatopology(env):
    """Every Numatopology there before the start is placed on, or refused as stale, as
    soon as the operator decides (`test_cluster_feed` pins the ordering)."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    nodes = [f"h100-{i:03d}" for i in range(60)]
    for node in nodes:
        await cluster.create_numatopology(topology_object(node, h100))
    await cluster.create_numatopology(topology_object("h100-stale", h100, exported="False"))
    running = await start_operator()
    await wait(lambda: running.runtime.deciding, what="the operator decides")

    _, filtered = await running.post(
        "/filter", {"Pod": pod("job", node=None, gpus=1), "NodeNames": [*nodes, "h100-stale"]}
    )

    assert nodes == filtered["NodeNames"]
    assert "is stale (Exported=False" in filtered["FailedAndUnresolvableNodes"]["h100-stale"]


async def test_a_changed_numatopology_is_decided_on_and_a_deleted_one_is_not(env):
    """A new spec replaces the old one for the next decision; a deleted Numatopology
    leaves its node's pods waiting."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(NODE, h100))
    running = await start_operator(**FAST_RETRIES)
    await wait(lambda: running.runtime.deciding, what="the operator decides")
    path = f"/apis/numatopo.io/v1alpha1/numatopologies/{NODE}"

    # The kubelet now reserves every thread but 1-4: four are left to give.
    async with cluster.api.patch(path, json={"spec": {"reservedCPUs": "0,5-207"}}) as response:
        assert response.status < 300
    await wait(
        lambda: str(running.runtime.ledger.topology(NODE).reserved_cpus) == "0,5-207",
        what="the new spec seen",
    )
    await cluster.create_pod(pod("eight", cpu="8"))
    await wait(lambda: state(cluster, "eight") is not None, what="eight decided")
    async with cluster.api.delete(path) as response:
        assert response.status < 300
    await wait(lambda: running.runtime.ledger.topology(NODE) is None, what="the node dropped")
    await cluster.create_pod(pod("two", cpu="2"))
    await asyncio.sleep(0.5)

    assert "Unsatisfiable" == state(cluster, "eight")
    assert None is state(cluster, "two")
