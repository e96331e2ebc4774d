"""Exports over HTTP: the real operator (kopf, its writer tasks) against kmock's emulator,
which serves the two foreign CRDs (NRT v1alpha2, Volcano's Numatopology v1alpha1) as an
API server with those CRDs installed would. Every object written is validated against
the published schema (tests/fixtures/schemas).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kmock
import pytest

from foreign_schemas import nrt_errors, volcano_errors
from numatopo_engine import annotations as keys
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import NumatopologySpec

from .conftest import Cluster, eventually, make_pod, numatopology, register_resources

NODE = "h100-a"
NRT = "topology.node.k8s.io/v1alpha2/noderesourcetopologies"
VOLCANO = "nodeinfo.volcano.sh/v1alpha1/numatopologies"
NRT_PATH = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"
VOLCANO_PATH = "/apis/nodeinfo.volcano.sh/v1alpha1/numatopologies"
BOTH = {"export_nrt": True, "export_volcano": True}
FAST_RETRIES = {"retry_base_seconds": 0.1, "retry_max_seconds": 0.5}


def register_foreign(api: kmock.KubernetesEmulator, *, nrt: bool = True) -> None:
    """The two CRDs in the emulator's discovery, as installed by NFD (or scheduler-plugins)
    and Volcano; `nrt=False`: a cluster without the NRT CRD."""
    verbs = {"list", "watch", "get", "create", "patch", "delete"}
    if nrt:
        api.resources[NRT] = kmock.ResourceInfo(
            kind="NodeResourceTopology", namespaced=False, verbs=verbs
        )
    api.resources[VOLCANO] = kmock.ResourceInfo(kind="Numatopology", namespaced=False, verbs=verbs)


def stored(api: kmock.KubernetesEmulator, group: str) -> dict[str, dict[str, Any]]:
    """Live objects of one of the two foreign groups, by name."""
    found = {}
    for (resource, _, name), obj in list(api.objects.items()):
        if str(resource.group) == group and not obj.deleted:
            found[name] = json.loads(json.dumps(dict(obj.raw)))
    return found


def nrts(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return stored(cluster.api, "topology.node.k8s.io")


def volcanos(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return stored(cluster.api, "nodeinfo.volcano.sh")


def available(nrt: dict[str, Any], zone: str, resource: str) -> int:
    for found in nrt["zones"]:
        if found["name"] == zone:
            for entry in found["resources"]:
                if entry["name"] == resource:
                    return int(entry["available"])
    raise KeyError(f"{zone} {resource}")


def export_requests(cluster: Cluster) -> list[int]:
    """Requests to the two foreign groups: (list, create, patch) for NRT, then Volcano."""
    return [
        len(cluster.api[f"{verb} {path}{tail}"])
        for path in (NRT_PATH, VOLCANO_PATH)
        for verb, tail in (("get", ""), ("post", ""), ("patch", f"/{NODE}"))
    ]


def static_h100(h100: NumatopologySpec) -> NumatopologySpec:
    wire = h100.to_wire()
    wire["policies"].update(cpuManagerPolicy="static", topologyManagerPolicy="single-numa-node")
    return NumatopologySpec.model_validate(wire)


@pytest.fixture
async def foreign_cluster() -> AsyncIterator[Cluster]:
    async with kmock.KubernetesEmulator() as api, kmock.Server(api):
        register_resources(api)
        register_foreign(api)
        yield Cluster(api)


async def test_switched_on_objects_are_written_and_follow_the_ledger(
    foreign_cluster, start_operator_on, h100
):
    cluster = foreign_cluster
    spec = static_h100(h100)
    await cluster.create_numatopology(numatopology(NODE, spec))
    running = await start_operator_on(cluster, **BOTH)

    await eventually(lambda: NODE in nrts(cluster) and NODE in volcanos(cluster), what="exports")
    nrt, volcano = nrts(cluster)[NODE], volcanos(cluster)[NODE]
    assert ([], []) == (nrt_errors(nrt), volcano_errors(volcano))
    assert [1, 1, 1, 1, 1, 1] == [min(n, 1) for n in export_requests(cluster)]
    # Reserved CPUs 0 and 104 are threads of one core on NUMA node 0.
    free = {0: 102, 1: 104}
    assert [102, 104] == [available(nrt, f"node-{n}", "cpu") for n in (0, 1)]
    assert {"CPUManagerPolicy": "static", "TopologyManagerPolicy": "single-numa-node"} == (
        volcano["spec"]["policies"]
    )

    await cluster.create_pod(make_pod("train", gpus=2, cpu="8"))
    await eventually(
        lambda: keys.ASSIGNMENT in cluster.annotations("train"), what="train is assigned"
    )
    assignment = json.loads(cluster.annotations("train")[keys.ASSIGNMENT])
    (numa,) = assignment["numaNodes"]
    zone, other = f"node-{numa}", f"node-{1 - numa}"
    await eventually(
        lambda: (
            available(nrts(cluster)[NODE], zone, "nvidia.com/gpu") == 2
            and volcanos(cluster)[NODE]["spec"].get("podAllocations")
        ),
        what="both show the booking",
    )
    nrt, volcano = nrts(cluster)[NODE], volcanos(cluster)[NODE]
    assert (free[numa] - 8, free[1 - numa]) == (
        available(nrt, zone, "cpu"),
        available(nrt, other, "cpu"),
    )
    assert 4 == available(nrt, other, "nvidia.com/gpu")
    memory = {int(n): b for n, b in assignment["containers"]["main"]["memory"].items()}
    assert (1 << 40) - memory[numa] == available(nrt, zone, "memory")
    taken = CPUSet.parse(assignment["containers"]["main"]["cpus"])
    allocatable = CPUSet.parse(volcano["spec"]["numares"]["cpu"]["allocatable"])
    assert CPUSet.parse("0-207") - CPUSet.parse("0,104") - taken == allocatable
    assert ["train"] == [p["name"] for p in volcano["spec"]["podAllocations"]]
    assert ([], []) == (nrt_errors(nrt), volcano_errors(volcano))

    await cluster.delete_pod("train")
    await eventually(
        lambda: (
            available(nrts(cluster)[NODE], zone, "cpu") == free[numa]
            and not volcanos(cluster)[NODE]["spec"].get("podAllocations")
        ),
        what="the pod's CPUs back in the exports",
    )
    assert 4 == available(nrts(cluster)[NODE], zone, "nvidia.com/gpu")

    async with cluster.api.delete(f"/apis/numatopo.io/v1alpha1/numatopologies/{NODE}") as r:
        assert r.status < 300
    await eventually(
        lambda: not nrts(cluster) and not volcanos(cluster), what="exports deleted with the node"
    )
    deleted = [f'numatopo_exports_deleted_total{{format="{f}"}} 1.0' for f in ("nrt", "volcano")]
    await eventually(
        lambda: all(line in running.runtime.metrics.render().decode() for line in deleted),
        what="both deletions counted",
    )


async def test_switched_off_nothing_is_written(foreign_cluster, start_operator_on, h100):
    cluster = foreign_cluster
    await cluster.create_numatopology(numatopology(NODE, h100))
    running = await start_operator_on(cluster)
    await cluster.create_pod(make_pod("train", gpus=1, cpu="4"))

    # The status writer runs on the same period: once it has written the pod's booking,
    # an exports writer that was on would have written too.
    await eventually(
        lambda: cluster.numatopology_status(NODE).get("freeGPUs") == 7, what="status written"
    )
    await asyncio.sleep(0.3)

    assert ({}, {}) == (nrts(cluster), volcanos(cluster))
    assert [0, 0, 0, 0, 0, 0] == export_requests(cluster)
    assert "numatopo_exports_written_total{" not in running.runtime.metrics.render().decode()


class FlakyEmulator(kmock.KubernetesEmulator):
    """Refuses the first writes to the foreign groups, before storing anything (as an API
    server that fails does): `refuse[group]` is the statuses to answer, in order."""

    refuse: dict[str, list[int]]

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        resource = getattr(request, "resource", None)
        group = str(getattr(resource, "group", "")) if resource is not None else ""
        method = str(getattr(request, "method", "")).upper()
        pending = self.refuse.get(group)
        if pending and method.endswith(("PATCH", "POST")):
            status = pending.pop(0)
            reason = {409: "Conflict", 500: "InternalError"}[status]
            return aiohttp.web.json_response(
                {"kind": "Status", "status": "Failure", "reason": reason, "code": status},
                status=status,
            )
        return await super()._handle(request)


async def test_api_errors_are_retried_and_the_writer_lives_on(start_operator_on, h100):
    api = FlakyEmulator()
    # NRT: a conflict (another writer), which the client does not retry; Volcano: four
    # 500s, more than the client's own three quick retries. Both get written later.
    api.refuse = {"topology.node.k8s.io": [409], "nodeinfo.volcano.sh": [500] * 4}
    async with api, kmock.Server(api):
        register_resources(api)
        register_foreign(api)
        cluster = Cluster(api)
        await cluster.create_numatopology(numatopology(NODE, h100))
        running = await start_operator_on(cluster, **BOTH, **FAST_RETRIES)

        await eventually(
            lambda: NODE in nrts(cluster) and NODE in volcanos(cluster),
            what="both written after the failures",
            timeout=15,
        )
        metrics = running.runtime.metrics.render().decode()
        assert 'numatopo_export_errors_total{format="nrt",reason="conflict"} 1.0' in metrics
        assert 'numatopo_export_errors_total{format="volcano",reason="unavailable"} 1.0' in metrics

        # Still writing: a booking reaches the objects.
        await cluster.create_pod(make_pod("train", gpus=1, cpu="4"))
        await eventually(
            lambda: (
                sum(available(nrts(cluster)[NODE], f"node-{n}", "nvidia.com/gpu") for n in (0, 1))
                == 7
            ),
            what="the NRT follows a booking after the failures",
        )
        await running.stop()  # before the emulator goes


async def test_a_missing_crd_is_reported_and_the_other_format_still_written(
    start_operator_on, h100, caplog
):
    async with kmock.KubernetesEmulator() as api, kmock.Server(api):
        register_resources(api)
        register_foreign(api, nrt=False)
        cluster = Cluster(api)
        await cluster.create_numatopology(numatopology(NODE, h100))
        running = await start_operator_on(cluster, **BOTH, **FAST_RETRIES)

        await eventually(lambda: NODE in volcanos(cluster), what="the Volcano object")
        await eventually(
            lambda: 'format="nrt",reason="not_found"' in running.runtime.metrics.render().decode(),
            what="the NRT failure counted",
        )
        assert "is its CRD installed?" in caplog.text
        # Only lists were tried for the NRT (one per back-off), no write per node.
        lists, creates, patches = export_requests(cluster)[:3]
        assert (lists >= 1, creates, patches) == (True, 0, 0)
        assert {} == nrts(cluster)
        await running.stop()  # before the emulator goes


async def test_a_new_term_deletes_what_numatopo_wrote_for_nodes_that_are_gone(
    foreign_cluster, start_operator_on, h100
):
    cluster = foreign_cluster
    ours = {"app.kubernetes.io/managed-by": "numatopo"}
    await cluster.create(NRT_PATH, {"metadata": {"name": "gone", "labels": ours}, "zones": []})
    await cluster.create(NRT_PATH, {"metadata": {"name": "foreign"}, "zones": []})
    await cluster.create(VOLCANO_PATH, {"metadata": {"name": "gone", "labels": ours}, "spec": {}})
    await cluster.create_numatopology(numatopology(NODE, h100))
    await start_operator_on(cluster, **BOTH)

    await eventually(
        lambda: sorted(nrts(cluster)) == ["foreign", NODE] and sorted(volcanos(cluster)) == [NODE],
        what="the orphans deleted, someone else's object kept",
    )


OPERATOR_NAMESPACE = "numatopo-system"


def replica(name: str) -> dict[str, Any]:
    """One of two replicas competing for a Lease (durations in the defaults' ratios)."""
    return {
        "lease_name": "numatopo",
        "pod_name": name,
        "pod_namespace": OPERATOR_NAMESPACE,
        "lease_duration_seconds": 1.2,
        "renew_deadline_seconds": 0.9,
        "retry_period_seconds": 0.1,
        **BOTH,
    }


def written(running: Any) -> float:
    """The exports one replica wrote (its own metrics)."""
    total = 0.0
    for line in running.runtime.metrics.render().decode().splitlines():
        if line.startswith("numatopo_exports_written_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_only_the_lease_holder_writes_and_a_new_holder_takes_over(
    foreign_cluster, start_operator_on, h100
):
    cluster = foreign_cluster
    for name in ("op-a", "op-b"):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": OPERATOR_NAMESPACE},
            "spec": {"containers": [{"name": "operator", "image": "numatopo"}]},
        }
        await cluster.create(f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods", pod)
    await cluster.create_numatopology(numatopology(NODE, h100))
    a = await start_operator_on(cluster, **replica("op-a"))
    await eventually(lambda: a.runtime.deciding, what="A decides")
    b = await start_operator_on(cluster, **replica("op-b"))
    await eventually(lambda: NODE in nrts(cluster) and NODE in volcanos(cluster), what="exports")
    await eventually(b.runtime.indexed.is_set, what="B listed everything")
    await cluster.create_pod(make_pod("train", gpus=1, cpu="4"))
    await eventually(
        lambda: (
            sum(available(nrts(cluster)[NODE], f"node-{n}", "nvidia.com/gpu") for n in (0, 1)) == 7
        ),
        what="A's exports show the pod",
    )

    await eventually(lambda: written(a) >= 2.0, what="A counted both writes")
    assert written(b) == 0.0

    await a.stop()
    await eventually(lambda: b.runtime.deciding, what="B takes over", timeout=15)
    await cluster.delete_pod("train")
    await eventually(
        lambda: (
            sum(available(nrts(cluster)[NODE], f"node-{n}", "nvidia.com/gpu") for n in (0, 1)) == 8
        ),
        what="B's exports show the pod gone",
    )
    await eventually(lambda: written(b) >= 2.0, what="B counted both writes")


async def writes_settled(cluster: Cluster, quiet: float = 1.0, timeout: float = 20.0) -> int:
    """The export writes so far, once none came for `quiet` seconds: on a loaded machine
    a write period can come late, and a fixed pause would count A's last write as B's."""
    deadline = asyncio.get_running_loop().time() + timeout
    seen = export_writes(cluster)
    while True:
        await asyncio.sleep(quiet)
        now = export_writes(cluster)
        if now == seen:
            return now
        assert asyncio.get_running_loop().time() < deadline, "export writes never settled"
        seen = now


def export_writes(cluster: Cluster) -> int:
    """Applies of either format to the node's objects so far (server-side apply: PATCH)."""
    paths = {f"{path}/{NODE}" for path in (NRT_PATH, VOLCANO_PATH)}
    return sum(
        1
        for request in cluster.api
        if str(request.method).upper().endswith("PATCH") and request.url.path in paths
    )


async def test_a_new_holder_rewrites_no_export_that_is_current(
    foreign_cluster, start_operator_on, h100
):
    """At takeover the objects A wrote are what B's ledger says: B writes none of them
    again (it once applied every node's objects anew, a storm on a large cluster), and
    still writes the first change after."""
    cluster = foreign_cluster
    for name in ("op-a", "op-b"):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": OPERATOR_NAMESPACE},
            "spec": {"containers": [{"name": "operator", "image": "numatopo"}]},
        }
        await cluster.create(f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods", pod)
    await cluster.create_numatopology(numatopology(NODE, h100))
    await cluster.create_pod(make_pod("train", gpus=1, cpu="4"))
    a = await start_operator_on(cluster, **replica("op-a"))
    # B starts once A holds the Lease: started together, B may win it, write the exports
    # itself and then count them as if written after the takeover.
    await eventually(lambda: a.runtime.deciding, what="A decides")
    b = await start_operator_on(cluster, **replica("op-b"))
    await eventually(
        lambda: (
            NODE in volcanos(cluster)
            and sum(available(nrts(cluster)[NODE], f"node-{n}", "nvidia.com/gpu") for n in (0, 1))
            == 7
        ),
        what="A's exports show the pod",
    )
    await eventually(lambda: b.runtime.ledger.pods_on(NODE) == 1, what="B watches the pod")
    before = await writes_settled(cluster)  # any write of A's still due has gone out

    await a.stop()
    await eventually(lambda: b.runtime.deciding, what="B takes over", timeout=15)
    # Many write periods (0.1 s): time for any rewrite to go out.
    await asyncio.sleep(2.0)
    assert (0, 0.0) == (export_writes(cluster) - before, written(b))

    await cluster.delete_pod("train")
    await eventually(
        lambda: (
            sum(available(nrts(cluster)[NODE], f"node-{n}", "nvidia.com/gpu") for n in (0, 1)) == 8
        ),
        what="B writes the change",
    )
