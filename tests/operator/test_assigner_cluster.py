"""The real operator (kopf over HTTP) against kmock's KubernetesEmulator, one 8x H100 node."""

from __future__ import annotations

import asyncio
import json

import pytest

from numatopo_engine import annotations as keys
from numatopo_engine.cpuset import CPUSet

NODE = "h100-a"
# 208 threads - 2 reserved, in 2 NUMA nodes of 103 usable threads; 8 GPUs, 4 per NUMA node.
USABLE_CPUS = 206
GPUS = 8


def bookings(cluster) -> dict[str, dict]:
    """Parsed assignments of every Assigned pod, by pod name."""
    found = {}
    for name, pod in cluster.pods().items():
        annotations = pod["metadata"].get("annotations", {})
        if annotations.get(keys.STATE) == "Assigned":
            found[name] = json.loads(annotations[keys.ASSIGNMENT])
    return found


def held(assignment: dict) -> tuple[set[int], set[int]]:
    cpus: set[int] = set()
    gpus: set[int] = set()
    for container in assignment["containers"].values():
        if container.get("exclusive", True):
            cpus |= set(CPUSet.parse(container["cpus"]))
        gpus |= set(container["gpuIndices"])
    return cpus, gpus


def assert_no_double_booking(cluster) -> None:
    """No CPU or GPU is held by two Assigned pods, and nothing exceeds the node."""
    owners: dict[str, str] = {}
    for name, assignment in bookings(cluster).items():
        cpus, gpus = held(assignment)
        for item in [f"cpu{c}" for c in cpus] + [f"gpu{g}" for g in gpus]:
            assert item not in owners, f"{item} held by {owners.get(item)} and {name}"
            owners[item] = name
    assert USABLE_CPUS >= sum(1 for k in owners if k.startswith("cpu"))
    assert GPUS >= sum(1 for k in owners if k.startswith("gpu"))


def states(cluster) -> dict[str, str | None]:
    return {
        n: p["metadata"].get("annotations", {}).get(keys.STATE) for n, p in cluster.pods().items()
    }


async def test_bound_pod_gets_an_assignment_and_an_event(env):
    """A pod some scheduler bound gets its NUMA-aligned CPUs and GPUs, and says so in an Event."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(NODE, h100))
    await start_operator()
    await cluster.create_pod(pod("train", gpus=4, cpu="8"))

    await wait(lambda: cluster.events_for("train"), what="an Event about train")
    assignment = bookings(cluster)["train"]
    events = cluster.events_for("train")

    assert [0] == assignment["numaNodes"] or [1] == assignment["numaNodes"]
    assert 4 == len(assignment["containers"]["main"]["gpuIndices"])
    assert 8 == len(CPUSet.parse(assignment["containers"]["main"]["cpus"]))
    assert ["NumatopoAssigned"] == [reason for reason, _ in events]


async def test_pod_that_cannot_fit_is_unsatisfiable_with_the_reason(env):
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(NODE, h100))
    await start_operator()
    await cluster.create_pod(pod("wide", gpus=6))

    await wait(lambda: cluster.events_for("wide"), what="an Event about wide")
    [(reason, message)] = cluster.events_for("wide")

    assert "NumatopoUnsatisfiable" == reason
    assert message.startswith(f"does not fit on {NODE}: ")
    assert keys.ASSIGNMENT not in cluster.annotations("wide")


MALFORMED = [
    pytest.param(
        {keys.POLICY: "single-numa-nod"}, "single-numa-node", id="policy-typo-names-the-closest"
    ),
    pytest.param(
        {keys.POLICY: "x" * 10_000}, "10000 characters", id="ten-thousand-character-policy"
    ),
    pytest.param({keys.MAX_NUMA_NODES: "-3"}, keys.MAX_NUMA_NODES, id="negative-max-numa-nodes"),
    pytest.param(
        {keys.MAX_NUMA_NODES: "99999999999999"}, keys.MAX_NUMA_NODES, id="huge-max-numa-nodes"
    ),
    pytest.param({keys.GPU_LINKS: "sometimes"}, keys.GPU_LINKS, id="unknown-gpu-links-mode"),
    pytest.param(
        {keys.ASSIGNMENT: "{not json"}, keys.ASSIGNMENT, id="hand-written-assignment-not-json"
    ),
]


@pytest.mark.parametrize(("annotations", "mentioned"), MALFORMED)
async def test_malformed_annotations_are_invalid_and_others_still_served(
    env, annotations, mentioned
):
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    """Invalid input: `state: Invalid` and an Event naming the problem; other pods are served."""
    await cluster.create_numatopology(topology_object(NODE, h100))
    await start_operator()
    await cluster.create_pod(pod("bad", annotations=annotations))
    await cluster.create_pod(pod("good"))

    await wait(lambda: cluster.events_for("bad"), what="an Event about bad")
    await wait(lambda: states(cluster).get("good") == "Assigned", what="good Assigned")
    [(reason, message)] = cluster.events_for("bad")

    assert "NumatopoInvalid" == reason
    assert mentioned in message
    assert len(message) < 1000


async def test_fifty_pods_at_once_never_overlap(env):
    """50 pods created together on one node: all decided, nothing held twice or over capacity."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(NODE, h100))
    await start_operator()
    pods = [pod(f"p{i:02d}", cpu="6", gpus=1 if i % 4 == 0 else 0) for i in range(50)]
    await asyncio.gather(*(cluster.create_pod(p) for p in pods))

    await wait(
        lambda: None not in states(cluster).values() and len(states(cluster)) == 50,
        what="50 decided",
        timeout=30,
    )
    counted = sorted(states(cluster).values())

    assert_no_double_booking(cluster)
    # single-numa-node: 103 usable threads per NUMA node hold 17 pods of 6 CPUs each.
    assert 34 == counted.count("Assigned")
    assert 16 == counted.count("Unsatisfiable")


async def test_a_deleted_pods_gpus_are_reused(env):
    """When a pod goes, a pod that did not fit is retried at once and gets its GPUs."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(NODE, h100))
    await start_operator()
    for i in range(4):
        await cluster.create_pod(pod(f"holder{i}", gpus=2))
    await wait(lambda: len(bookings(cluster)) == 4, what="4 holders Assigned")
    await cluster.create_pod(pod("late", gpus=2))
    await wait(lambda: states(cluster).get("late") == "Unsatisfiable", what="late Unsatisfiable")
    freed = held(bookings(cluster)["holder1"])[1]

    await cluster.delete_pod("holder1")

    await wait(lambda: states(cluster).get("late") == "Assigned", what="late Assigned after delete")
    assert freed == held(bookings(cluster)["late"])[1]
    assert_no_double_booking(cluster)


async def test_a_finished_pod_releases_at_once(env):
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(NODE, h100))
    await start_operator()
    await cluster.create_pod(pod("all-gpus", gpus=4))
    await cluster.create_pod(pod("more-gpus", gpus=4))
    await wait(lambda: len(bookings(cluster)) == 2, what="both Assigned")
    await cluster.create_pod(pod("waiting", gpus=4))
    await wait(
        lambda: states(cluster).get("waiting") == "Unsatisfiable", what="waiting Unsatisfiable"
    )

    await cluster.patch_pod("all-gpus", {"status": {"phase": "Succeeded"}})

    await wait(lambda: states(cluster).get("waiting") == "Assigned", what="waiting Assigned")


async def test_restart_mid_stream_loses_nothing_and_double_books_nothing(env):
    """Kill the operator while pods arrive: a new one keeps all assignments, books nothing twice."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(NODE, h100))
    first = await start_operator()
    await asyncio.gather(
        *(cluster.create_pod(pod(f"a{i:02d}", cpu="4", gpus=i % 2)) for i in range(12))
    )
    await wait(lambda: len(bookings(cluster)) >= 1, what="the first assignment before the kill")
    await first.stop()
    before = bookings(cluster)
    await asyncio.gather(
        *(cluster.create_pod(pod(f"b{i:02d}", cpu="4", gpus=i % 2)) for i in range(12))
    )

    await start_operator()

    await wait(lambda: None not in states(cluster).values(), what="all 24 decided", timeout=20)
    after = bookings(cluster)
    assert {name: after[name] for name in before} == before
    assert_no_double_booking(cluster)
    # 12 CPU-only pods fit; 12 pods want one GPU each and the node has 8.
    assert 20 == sum(1 for s in states(cluster).values() if s == "Assigned")


async def test_pod_waits_for_its_numatopology(env):
    """No Numatopology yet: the pod waits (no state written) and is placed when one appears."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await start_operator()
    await cluster.create_pod(pod("early", node="h100-b"))
    await asyncio.sleep(0.5)
    assert keys.STATE not in cluster.annotations("early")

    await cluster.create_numatopology(topology_object("h100-b", h100))

    await wait(lambda: states(cluster).get("early") == "Assigned", what="early Assigned")


async def test_overlapping_hand_written_assignment_is_not_trusted(env):
    """Two pods claiming GPU 0: the earlier decision keeps it, though its pod was created
    later; the other is reported and books nothing."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(NODE, h100))

    def claim(seq: int) -> str:
        container = {"gpuIndices": [0]}
        return json.dumps(
            {"v": 1, "node": NODE, "seq": seq, "numaNodes": [0], "containers": {"main": container}}
        )

    await cluster.create_pod(
        pod("newer", annotations={keys.ASSIGNMENT: claim(2)}, created="2024-05-01T09:00:00Z")
    )
    await cluster.create_pod(
        pod("older", annotations={keys.ASSIGNMENT: claim(1)}, created="2024-05-01T09:30:00Z")
    )
    running = await start_operator()

    await wait(lambda: cluster.events_for("newer"), what="an Event about newer")
    [(reason, message)] = cluster.events_for("newer")

    assert "NumatopoUntrusted" == reason
    assert "GPU 0 is held by default/older" in message
    assert ["default/newer"] == list(running.runtime.ledger.untrusted(NODE))


async def test_status_shows_what_is_free(env):
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(NODE, h100))
    await start_operator()
    await cluster.create_pod(pod("train", gpus=4, cpu="10"))
    await wait(lambda: cluster.numatopology_status(NODE).get("pods") == 1, what="status pods=1")

    status = cluster.numatopology_status(NODE)

    assert USABLE_CPUS - 10 == status["freeCPUs"]
    assert GPUS - 4 == status["freeGPUs"]
    assert [[], [4, 5, 6, 7]] == sorted(free["gpus"] for free in status["free"])
    assert "Exported" == status["conditions"][0]["type"]
