"""Follow, end to end: the real operator (kopf over HTTP, kmock's emulator), the real
agent loop, and the kubelet harness (device manager port, PodResources over gRPC) with
an NVIDIA-shaped plugin that prefers its own GPUs. Nothing steers the kubelet here
(Topology Manager `none`), so it gives other GPUs than assigned; the agent reports
them, the operator re-decides around them, and the agent enforces the new cpusets.

Mocked: only the node's cgroup tree (plain files shaped like cgroup v1; the real
cgroup writes are covered in tests/exporter/agent)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import node_agent
from kubelet_harness import GPU, Container, FakeGpu, Harness, Pod
from metric_samples import sample
from node_agent import aligned, running_agent
from numatopo_engine import annotations as keys
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import NumatopologySpec
from numatopo_operator import event_posts

from .conftest import EVENTS, events_api_hanging, eventually, h100_spec, make_pod, numatopology

NODE = "h100-a"
CID = "c0ffee00c0ffee00"


def uuid_of(index: int) -> str:
    # Sorted by ID, the NVIDIA stand-in prefers GPU 7, 6, ... (NUMA 1) first.
    return f"GPU-{7 - index:08x}-0000-4000-8000-{index:012x}"


def with_uuids(spec: NumatopologySpec) -> NumatopologySpec:
    gpus = [g.model_copy(update={"uuid": uuid_of(g.index)}) for g in spec.gpus]
    return spec.model_copy(update={"gpus": gpus})


def cgroup_tree(root: Path, uid: str, cid: str = CID) -> None:
    node_agent.cgroup_tree(root, uid, cid, cpus="0-207")


def assignment_of(cluster: Any, name: str) -> dict[str, Any] | None:
    text = cluster.annotations(name).get(keys.ASSIGNMENT)
    return json.loads(text) if text else None


@pytest.mark.timeout(60)
async def test_a_followed_node_realigns_cpus_and_memory_to_the_gpus_the_kubelet_gave(
    env: Any, tmp_path: Path
) -> None:
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    spec = with_uuids(h100)
    await cluster.create_numatopology(topology_object(NODE, spec))
    operator = await start_operator()
    body = pod("train", gpus=2, cpu="8")
    uid = body["metadata"]["uid"]
    await cluster.create_pod(body)
    await wait(lambda: assignment_of(cluster, "train") is not None, what="first assignment")
    first = assignment_of(cluster, "train")
    assert first is not None
    assigned = set(first["containers"]["main"]["gpuIndices"])
    numa_of = {g.index: g.numa for g in spec.gpus}

    async with Harness(rng=random.Random(3)) as kubelet:
        await kubelet.start_plugin([FakeGpu(uuid_of(g.index), g.numa) for g in spec.gpus])
        admission = await kubelet.admit(
            Pod(uid, "train", containers=(Container("main", {GPU: 2}),))
        )
        assert admission.ok, admission.error
        real = {next(g.index for g in spec.gpus if g.uuid == d) for d in admission.ids("main")}
        assert real != assigned, "the stand-in plugin happened to pick numatopo's GPUs"
        real_numa = {numa_of[g] for g in real}

        # The pod runs: its container has an id and a cgroup.
        cgroup_tree(tmp_path, uid)
        status = {
            "phase": "Running",
            "qosClass": "Guaranteed",
            "containerStatuses": [
                {"name": "main", "containerID": f"containerd://{CID}", "state": {"running": {}}}
            ],
        }
        await cluster.patch_pod("train", {"status": status})

        async with running_agent(
            str(cluster.api.url), NODE, tmp_path, kubelet.pod_resources_socket
        ) as agent:
            await wait(lambda: keys.OBSERVED in cluster.annotations("train"), what="observed")
            observed = json.loads(cluster.annotations("train")[keys.OBSERVED])
            assert observed["seq"] == first["seq"]
            assert observed["containers"]["main"]["matches"] is False

            def realigned() -> bool:
                now = assignment_of(cluster, "train")
                return now is not None and set(now["containers"]["main"]["gpuIndices"]) == real

            await wait(realigned, what="the assignment names the GPUs held", timeout=15)
            await wait(
                lambda: aligned(cluster, "train") == ("True", "CpusetsApplied"),
                what="Aligned once CPUs, memory and real GPUs agree",
                timeout=15,
            )

    final = assignment_of(cluster, "train")
    assert final is not None
    container = final["containers"]["main"]
    assert final["seq"] > first["seq"]
    cpus = CPUSet.parse(container["cpus"])
    cpu_numa = {c.numa for c in spec.cpus if c.id in cpus}
    assert cpu_numa == real_numa, "CPUs moved next to the GPUs the container holds"
    assert set(CPUSet.parse(container["mems"])) == real_numa
    written = (tmp_path / "kubepods" / f"pod{uid}" / CID / "cpuset.cpus").read_text().strip()
    assert CPUSet.parse(written) == cpus
    final_observed = json.loads(cluster.annotations("train")[keys.OBSERVED])
    assert final_observed["seq"] == final["seq"]
    assert final_observed["containers"]["main"]["matches"] is True
    await wait(  # posted off the decision's path
        lambda: "NumatopoRealigned" in {r for r, _ in cluster.events_for("train")},
        what="the realignment's Event posted",
    )
    reasons = [reason for reason, _ in cluster.events_for("train")]
    assert "GPUMismatch" in reasons
    assert "NumatopoRealigned" in reasons
    assert sample(agent.metrics, "numatopo_agent_gpu_mismatches_total") == 1
    assert (
        operator.runtime.metrics.registry.get_sample_value(
            "numatopo_realignments_total", {"result": "realigned"}
        )
        == 1
    )
    # The node says which GPU guarantee it gives.
    assert cluster.numatopology_status(NODE).get("gpuMode") == "Followed"


async def kubelet_gives_a_bs_gpus(env: Any) -> list[int]:
    """Pod a given (by the kubelet) the GPUs pod b's assignment names, b not yet
    admitted; returns those GPUs. (The agent's part, writing `observed`, is played by
    the caller.)"""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    spec = with_uuids(h100)
    await cluster.create_numatopology(topology_object(NODE, spec))
    await start_operator()
    await cluster.create_pod(pod("a", gpus=2, cpu="4", created="2024-05-01T10:00:00Z"))
    await wait(lambda: assignment_of(cluster, "a") is not None, what="a assigned")
    unadmitted = pod("b", gpus=2, cpu="4", created="2024-05-01T10:00:01Z")
    unadmitted["status"] = {"phase": "Pending"}  # bound, not yet admitted by the kubelet
    await cluster.create_pod(unadmitted)
    await wait(lambda: assignment_of(cluster, "b") is not None, what="b assigned")
    a, b = assignment_of(cluster, "a"), assignment_of(cluster, "b")
    assert a is not None
    assert b is not None
    b_gpus: list[int] = b["containers"]["main"]["gpuIndices"]
    observed = {
        "v": 1,
        "seq": a["seq"],
        "containers": {"main": {"devices": {GPU: [uuid_of(g) for g in b_gpus]}, "matches": False}},
    }
    await cluster.patch_pod(
        "a", {"metadata": {"annotations": {keys.OBSERVED: json.dumps(observed)}}}
    )
    return b_gpus


def a_realigned_b_decided_again(cluster: Any, b_gpus: list[int]) -> bool:
    now_a, now_b = assignment_of(cluster, "a"), assignment_of(cluster, "b")
    return (
        now_a is not None
        and now_b is not None
        and now_a["containers"]["main"]["gpuIndices"] == b_gpus
        and now_b["seq"] > now_a["seq"]  # decided afresh after a's realignment
    )


@pytest.mark.timeout(60)
async def test_real_gpus_displace_a_claim_on_paper_and_nothing_is_double_booked(env: Any) -> None:
    """a is realigned onto b's GPUs, b's assignment is taken back and b is decided
    afresh on other GPUs."""
    cluster, wait = env.cluster, env.wait
    b_gpus = await kubelet_gives_a_bs_gpus(env)

    await wait(
        lambda: a_realigned_b_decided_again(cluster, b_gpus),
        what="a on b's old GPUs, b decided again",
        timeout=15,
    )
    now_a, now_b = assignment_of(cluster, "a"), assignment_of(cluster, "b")
    assert now_a is not None
    assert now_b is not None
    a_gpus = set(now_a["containers"]["main"]["gpuIndices"])
    assert a_gpus.isdisjoint(now_b["containers"]["main"]["gpuIndices"])
    a_cpus = CPUSet.parse(now_a["containers"]["main"]["cpus"])
    assert not set(a_cpus) & set(CPUSet.parse(now_b["containers"]["main"]["cpus"]))
    await wait(  # posted off the decision's path
        lambda: "NumatopoDisplaced" in [reason for reason, _ in cluster.events_for("b")],
        what="b told it was displaced",
    )
    assert cluster.annotations("b").get(keys.STATE) == "Assigned"


@pytest.mark.timeout(60)
async def test_a_hanging_events_api_holds_up_no_realignment(env: Any) -> None:
    """The Events API answers no POST: the realignment, the displaced pod's taking back
    and its fresh decision are all written all the same (the Events wait in their queue;
    posted inline, the displaced pod's Event held the node's lock until the client gave
    up, 30 s later), and the Events go out once the API answers."""
    cluster, wait = env.cluster, env.wait
    with events_api_hanging(cluster):
        b_gpus = await kubelet_gives_a_bs_gpus(env)
        await wait(
            lambda: a_realigned_b_decided_again(cluster, b_gpus),
            what="a on b's old GPUs, b decided again, while no Event is answered",
            timeout=15,
        )
        assert cluster.annotations("b").get(keys.STATE) == "Assigned"
        # Only as many posts as there are posters waited on the API; the rest queued.
        assert len(cluster.api[EVENTS]) <= event_posts.POSTERS
    told = {
        "a": ["NumatopoAssigned", "NumatopoRealigned"],
        "b": ["NumatopoAssigned", "NumatopoDisplaced", "NumatopoAssigned"],
    }
    await wait(
        lambda: told == {n: [r for r, _ in cluster.events_for(n)] for n in told},
        what="every Event posted, in order, once the API answers",
    )


def steered_topology(spec: NumatopologySpec, topology_object: Any) -> dict[str, Any]:
    body = topology_object(NODE, spec)
    body["status"]["gpuMode"] = "Steered"
    return body


def pending(body: dict[str, Any]) -> dict[str, Any]:
    """Unbound and not yet seen by any kubelet (the extender binds it)."""
    body["spec"].pop("nodeName", None)
    body["status"] = {"phase": "Pending"}
    return body


@pytest.mark.timeout(60)
async def test_a_steered_node_admits_one_gpu_pod_at_a_time(env: Any) -> None:
    """The second GPU pod's bind waits until the first is seen admitted, so steering can
    tell which container the kubelet is admitting."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(steered_topology(with_uuids(h100), topology_object))
    await cluster.create_node(NODE)
    bindings = cluster.emulate_binding()
    operator = await start_operator(gpu_admission_timeout_seconds=20)
    await wait(lambda: operator.runtime.steered(NODE), what="the node seen Steered")
    for name in ("first", "second"):
        await cluster.create_pod(pending(pod(name, node=None, gpus=2)))

    def bind(name: str) -> Any:
        return asyncio.create_task(operator.post("/bind", cluster.binding_args(name, NODE)))

    first = bind("first")
    assert (await first)[1] == {"Error": ""}
    second = bind("second")
    await asyncio.sleep(1.0)
    assert not second.done(), "the second GPU pod was bound before the first was admitted"
    assert [b["metadata"]["name"] for b in bindings] == ["first"]
    # The kubelet admits the first pod: it reports on it.
    await cluster.patch_pod("first", {"status": {"startTime": "2024-05-01T10:00:05Z"}})
    async with asyncio.timeout(10):
        assert (await second)[1] == {"Error": ""}
    assert [b["metadata"]["name"] for b in bindings] == ["first", "second"]


@pytest.mark.timeout(60)
async def test_a_pod_never_admitted_holds_a_steered_node_only_until_the_timeout(env: Any) -> None:
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(steered_topology(with_uuids(h100), topology_object))
    await cluster.create_node(NODE)
    cluster.emulate_binding()
    operator = await start_operator(gpu_admission_timeout_seconds=1.5)
    await wait(lambda: operator.runtime.steered(NODE), what="the node seen Steered")
    for name in ("first", "second"):
        await cluster.create_pod(pending(pod(name, node=None, gpus=2)))
    first, second = (cluster.binding_args(name, NODE) for name in ("first", "second"))
    assert (await operator.post("/bind", first))[1] == {"Error": ""}
    started = asyncio.get_running_loop().time()
    assert (await operator.post("/bind", second))[1] == {"Error": ""}
    waited = asyncio.get_running_loop().time() - started
    assert 0.8 < waited < 5.0
    assert cluster.annotations("second").get(keys.STATE) == "Assigned"


@pytest.mark.timeout(60)
async def test_a_followed_node_does_not_hold_gpu_pods_back(env: Any) -> None:
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    body = topology_object(NODE, with_uuids(h100))
    body["status"]["gpuMode"] = "Followed"
    await cluster.create_numatopology(body)
    await cluster.create_node(NODE)
    cluster.emulate_binding()
    operator = await start_operator(gpu_admission_timeout_seconds=20)
    await wait(
        lambda: getattr(operator.runtime.ledger.record(NODE), "gpu_mode", None) == "Followed",
        what="node seen",
    )
    for name in ("first", "second"):
        await cluster.create_pod(pending(pod(name, node=None, gpus=2)))
    async with asyncio.timeout(5):
        for name in ("first", "second"):
            answer = await operator.post("/bind", cluster.binding_args(name, NODE))
            assert answer[1] == {"Error": ""}


async def _followed_node(plans: list[int], seed: int, tmp: Path) -> list[str]:
    """Pods asking `plans[i]` GPUs, assigned by the real operator, admitted one by one by
    the kubelet harness with an NVIDIA-shaped plugin choosing for itself, followed by
    the real agent. Returns what is wrong once everything has settled."""
    import kmock

    from .conftest import Cluster, OperatorStarter, register_resources

    problems: list[str] = []
    spec = with_uuids(h100_spec())
    async with kmock.KubernetesEmulator() as api, kmock.Server(api):
        register_resources(api)
        cluster = Cluster(api)
        await cluster.create_numatopology(numatopology(NODE, spec))
        starter = OperatorStarter()
        await starter.start(cluster)
        names = [f"p{i}" for i in range(len(plans))]
        try:
            for i, (name, gpus) in enumerate(zip(names, plans, strict=True)):
                await cluster.create_pod(
                    make_pod(name, gpus=gpus, cpu="4", created=f"2024-05-01T10:00:{i:02d}Z")
                )
            await eventually(
                lambda: all(assignment_of(cluster, n) for n in names), what="all assigned"
            )
            async with Harness(rng=random.Random(seed)) as kubelet:
                await kubelet.start_plugin([FakeGpu(uuid_of(g.index), g.numa) for g in spec.gpus])
                real: dict[str, set[int]] = {}
                for name, gpus in zip(names, plans, strict=True):
                    uid = cluster.pods()[name]["metadata"]["uid"]
                    result = await kubelet.admit(
                        Pod(uid, name, containers=(Container("main", {GPU: gpus}),))
                    )
                    assert result.ok, result.error
                    real[name] = {
                        next(g.index for g in spec.gpus if g.uuid == d) for d in result.ids("main")
                    }
                    cid = f"{uid[-4:]}c0ffee"
                    cgroup_tree(tmp, uid, cid)
                    status = {"phase": "Running", "qosClass": "Guaranteed", "containerStatuses": [
                        {"name": "main", "containerID": f"containerd://{cid}",
                         "state": {"running": {}}}]}  # fmt: skip
                    await cluster.patch_pod(name, {"status": status})
                async with running_agent(str(api.url), NODE, tmp, kubelet.pod_resources_socket):
                    await eventually(
                        lambda: all(
                            aligned(cluster, n) == ("True", "CpusetsApplied") for n in names
                        ),
                        what="every pod Aligned to the GPUs it holds",
                        timeout=30,
                    )
            owners: dict[str, str] = {}
            for name in names:
                final = assignment_of(cluster, name)
                assert final is not None
                container = final["containers"]["main"]
                if set(container["gpuIndices"]) != real[name]:
                    problems.append(
                        f"{name}: assigned {container['gpuIndices']}, holds {real[name]}"
                    )
                cpus = CPUSet.parse(container["cpus"])
                numa = {c.numa for c in spec.cpus if c.id in cpus}
                # GPUs on two NUMA nodes (single-numa-node cannot hold): best-effort around
                # them, so the CPUs sit on some of their NUMA nodes, never elsewhere.
                if not numa or not numa <= {g.numa for g in spec.gpus if g.index in real[name]}:
                    problems.append(f"{name}: CPUs on NUMA {numa}, GPUs {real[name]}")
                for item in [f"cpu{c}" for c in cpus] + [
                    f"gpu{g}" for g in container["gpuIndices"]
                ]:
                    if item in owners:
                        problems.append(f"{item} booked by {owners[item]} and {name}")
                    owners[item] = name
        finally:
            await starter.stop_all()
    return problems


@pytest.mark.timeout(300)
@settings(
    max_examples=int(os.environ.get("NUMATOPO_FOLLOW_EXAMPLES", "10")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    # Room for every pod on the 8 GPUs: each one is assigned before the kubelet runs.
    plans=st.lists(st.sampled_from([1, 2, 4]), min_size=2, max_size=3).filter(
        lambda p: sum(p) <= 8
    ),
    seed=st.integers(0, 1000),
)
# Pods that took each other's GPUs on paper, every one admitted: each must move.
@example(plans=[1, 2, 4], seed=0)
def test_followed_nodes_realign_every_pod_and_never_double_book(
    plans: list[int], seed: int
) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="follow-"))
    try:
        problems = asyncio.run(_followed_node(plans, seed, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert not problems, problems


async def test_a_forged_observation_never_displaces_another_pods_claim(env: Any) -> None:
    """Tenant b writes `observed` on its own pod (no node-scope guard), saying the kubelet
    gave it pod a's GPUs. a runs under the earlier decision: it keeps its assignment and
    its GPUs, and b is given none of them."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    spec = with_uuids(h100)
    await cluster.create_numatopology(topology_object(NODE, spec))
    await start_operator()
    await cluster.create_pod(pod("a", gpus=2, cpu="4", created="2024-05-01T10:00:00Z"))
    await wait(lambda: assignment_of(cluster, "a") is not None, what="a assigned")
    await cluster.create_pod(pod("b", gpus=2, cpu="4", created="2024-05-01T10:00:01Z"))
    await wait(lambda: assignment_of(cluster, "b") is not None, what="b assigned")
    a, b = assignment_of(cluster, "a"), assignment_of(cluster, "b")
    assert a is not None
    assert b is not None
    a_gpus = a["containers"]["main"]["gpuIndices"]
    forged = {
        "v": 1,
        "seq": b["seq"],
        "containers": {"main": {"devices": {GPU: [uuid_of(g) for g in a_gpus]}, "matches": False}},
    }
    await cluster.patch_pod("b", {"metadata": {"annotations": {keys.OBSERVED: json.dumps(forged)}}})

    await wait(
        lambda: any(r == "NumatopoGPUsNotAlignable" for r, _ in cluster.events_for("b")),
        what="b told it is not realigned",
    )
    assert a == assignment_of(cluster, "a")
    assert "NumatopoDisplaced" not in [reason for reason, _ in cluster.events_for("a")]
    now_b = assignment_of(cluster, "b")
    assert now_b is not None
    assert set(a_gpus).isdisjoint(now_b["containers"]["main"]["gpuIndices"])
