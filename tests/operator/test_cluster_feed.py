"""The operator's own list and watch of Numatopologies and Nodes (`cluster_feed`).

The feed runs here on its own, over a real client against the emulator: the cluster
tests drive it inside the whole operator, but cannot make its watch expire or look at
the ledger at the moment the first list is in.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator

import pytest

from numatopo_engine.model import NumatopologySpec
from numatopo_kube import KubeClient, Listing, WatchEvent
from numatopo_operator import cluster_feed, list_watch
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings

from .conftest import NUMATOPOLOGIES, Cluster, eventually, h100_spec, numatopology


@pytest.fixture
async def runtime(cluster: Cluster) -> AsyncIterator[Runtime]:
    found = Runtime(OperatorSettings(), kube=KubeClient.connect(str(cluster.api.url)))
    feed = asyncio.create_task(cluster_feed.follow_cluster(found))
    try:
        yield found
    finally:
        feed.cancel()
        await asyncio.gather(feed, return_exceptions=True)
        await found.kube.close()


async def _path_call(cluster: Cluster, method: str, path: str, body: object = None) -> None:
    async with getattr(cluster.api, method)(path, json=body) as response:
        assert response.status < 300, await response.text()


async def test_the_ledger_holds_every_listed_node_when_the_gate_opens(cluster: Cluster):
    """No decision or extender answer may see a half-listed cluster: `indexed` is set only
    once every Numatopology of the first list is in the ledger (stale ones included)."""
    spec = h100_spec()
    for name in ("n0", "n1", "n2"):
        await cluster.create_numatopology(numatopology(name, spec))
    await cluster.create_numatopology(numatopology("quiet", spec, exported="False"))
    runtime = Runtime(OperatorSettings(), kube=KubeClient.connect(str(cluster.api.url)))

    async def at_the_gate() -> list[str]:
        await runtime.indexed.wait()
        return list(runtime.ledger.nodes())

    seen = asyncio.create_task(at_the_gate())
    feed = asyncio.create_task(cluster_feed.follow_cluster(runtime))
    try:
        async with asyncio.timeout(10):
            assert ["n0", "n1", "n2", "quiet"] == sorted(await seen)
        assert ["quiet"] == list(runtime.ledger.stale_nodes(0))
    finally:
        feed.cancel()
        await asyncio.gather(feed, return_exceptions=True)
        await runtime.kube.close()


async def test_a_watch_too_old_to_resume_lists_again_and_loses_nothing(cluster: Cluster):
    """A watch answered 410 Gone: the feed lists again. A node created meanwhile is in
    the ledger; one the first list had and the second lacks (deleted while nobody
    watched) is dropped, not decided on."""
    spec = h100_spec()
    await cluster.create_numatopology(numatopology("stays", spec))
    await cluster.create_numatopology(numatopology("created", spec))
    first = {
        "kind": "NumatopologyList",
        "metadata": {"resourceVersion": "7"},
        "items": [numatopology("stays", spec), numatopology("vanished", spec)],
    }
    cluster.api[f"list {NUMATOPOLOGIES}"][0:1] << first
    cluster.api[f"watch {NUMATOPOLOGIES}"][0:1] << 410
    runtime = Runtime(OperatorSettings(), kube=KubeClient.connect(str(cluster.api.url)))
    feed = asyncio.create_task(cluster_feed.follow_cluster(runtime))
    try:
        await eventually(
            lambda: len(cluster.api[f"list {NUMATOPOLOGIES}"]) == 2,
            what="the Numatopologies listed a second time",
        )
        await eventually(
            lambda: ["created", "stays"] == sorted(runtime.ledger.nodes()),
            what="the ledger holds what the second list has, and only that",
        )
        assert runtime.ledger.topology("vanished") is None
    finally:
        feed.cancel()
        await asyncio.gather(feed, return_exceptions=True)
        await runtime.kube.close()


async def test_a_deleted_numatopology_drops_the_nodes_hardware(cluster: Cluster, runtime):
    await cluster.create_numatopology(numatopology("n0", h100_spec()))
    await eventually(lambda: runtime.ledger.topology("n0") is not None, what="n0 in the ledger")

    await _path_call(cluster, "delete", f"/apis/{NUMATOPOLOGIES}/n0")

    await eventually(lambda: runtime.ledger.topology("n0") is None, what="n0's hardware dropped")
    assert "n0" not in runtime.statuses


async def test_a_numatopology_changed_to_an_invalid_spec_is_decided_on_no_more(
    cluster: Cluster, runtime
):
    spec = h100_spec()
    await cluster.create_numatopology(numatopology("n0", spec))
    await eventually(lambda: runtime.ledger.topology("n0") is not None, what="n0 in the ledger")
    broken = numatopology("n0", spec)
    broken["spec"]["cpus"].append(broken["spec"]["cpus"][0])  # a duplicate CPU id

    await _path_call(cluster, "patch", f"/apis/{NUMATOPOLOGIES}/n0", {"spec": broken["spec"]})

    await eventually(lambda: runtime.ledger.topology("n0") is None, what="n0 dropped")


async def test_node_views_follow_nodes_for_groups(cluster: Cluster, runtime):
    """Groups read each Node's labels and whether new pods may go there; the worker
    decides only once the first list of Nodes is in."""
    await cluster.create_node("a", {"rack": "r1"})
    await eventually(lambda: runtime.groups.nodes is not None, what="Nodes listed")
    await eventually(lambda: runtime.groups.node_view("a") is not None, what="a seen")

    await cluster.create_node("b")
    await cluster.patch_node("a", {"spec": {"unschedulable": True}})

    def cordoned() -> bool:
        view = runtime.groups.node_view("a")
        return view is not None and not view.schedulable

    await eventually(cordoned, what="a cordoned")
    assert "r1" == runtime.groups.node_view("a").labels["rack"]
    await eventually(lambda: runtime.groups.node_view("b") is not None, what="b seen")

    await _path_call(cluster, "delete", "/api/v1/nodes/b")

    await eventually(lambda: runtime.groups.node_view("b") is None, what="b gone")


def _counting_parses(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every `NumatopologySpec.model_validate` from now on."""
    parses: list[object] = []
    parse = NumatopologySpec.model_validate

    def counted(cls: object, found: object, **kwargs: object) -> NumatopologySpec:
        parses.append(found)
        return parse(found, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(NumatopologySpec, "model_validate", classmethod(counted))
    return parses


async def test_a_status_change_of_the_same_generation_parses_no_spec(
    cluster: Cluster, runtime, monkeypatch
):
    """The holder's own status writes come back as watch events of the same spec
    generation: the spec parsed before is used again; a new generation is parsed."""
    body = numatopology("n0", h100_spec())
    # Versions as an API server gives them: the watch's replay of the listed object is
    # then skipped as one, and parses nothing whatever its timing.
    body["metadata"] |= {"generation": 1, "resourceVersion": "1"}
    await cluster.create_numatopology(body)
    await eventually(lambda: runtime.ledger.topology("n0") is not None, what="n0 in the ledger")
    first = runtime.ledger.topology("n0")
    parses = _counting_parses(monkeypatch)

    stale = {"conditions": [{"type": "Exported", "status": "False", "reason": "Lost"}]}
    status = {"metadata": {"resourceVersion": "2"}, "status": stale}
    await _path_call(cluster, "patch", f"/apis/{NUMATOPOLOGIES}/n0/status", status)
    await eventually(lambda: "n0" in runtime.ledger.stale_nodes(0), what="the status seen")
    assert [] == parses
    assert runtime.ledger.topology("n0") is first

    spec = body["spec"] | {"reservedCPUs": "0-1"}
    changed = {"metadata": {"generation": 2, "resourceVersion": "3"}, "spec": spec}
    await _path_call(cluster, "patch", f"/apis/{NUMATOPOLOGIES}/n0", changed)
    await eventually(lambda: runtime.ledger.topology("n0") != first, what="the new spec in use")
    assert 1 == len(parses)


async def test_an_object_without_a_generation_is_parsed_every_time(
    cluster: Cluster, runtime, monkeypatch
):
    body = numatopology("n0", h100_spec())
    body["metadata"]["resourceVersion"] = "1"
    await cluster.create_numatopology(body)
    await eventually(lambda: runtime.ledger.topology("n0") is not None, what="n0 in the ledger")
    parses = _counting_parses(monkeypatch)

    stale = {"conditions": [{"type": "Exported", "status": "False", "reason": "Lost"}]}
    status = {"metadata": {"resourceVersion": "2"}, "status": stale}
    await _path_call(cluster, "patch", f"/apis/{NUMATOPOLOGIES}/n0/status", status)

    await eventually(lambda: "n0" in runtime.ledger.stale_nodes(0), what="the status seen")
    assert 1 == len(parses)


async def test_a_feed_keeps_nothing_of_its_list_while_it_watches(cluster: Cluster):
    """The bodies of a list are read once: a feed that kept its list while watching held
    every Numatopology as decoded JSON for the life of the process."""
    spec = h100_spec()
    for name in ("n0", "n1"):
        await cluster.create_numatopology(numatopology(name, spec))
    kube = KubeClient.connect(str(cluster.api.url))
    listings: list[weakref.ref[Listing]] = []
    taken: list[str] = []
    watching = asyncio.Event()

    async def listing() -> Listing:
        answer = await kube.list_numatopologies()
        listings.append(weakref.ref(answer))
        return answer

    async def listed(items: list[dict]) -> None:
        taken.extend(item["metadata"]["name"] for item in items)

    async def watch(version: str | None) -> AsyncIterator[WatchEvent]:
        watching.set()
        async for event in kube.watch_numatopologies(resource_version=version):
            yield event

    kind = list_watch.Followed("Numatopologies", listing, watch, listed, lambda *_: None)
    feed = asyncio.create_task(list_watch.follow(kind))
    try:
        async with asyncio.timeout(10):
            await watching.wait()
        gc.collect()
        assert ["n0", "n1"] == sorted(taken)
        assert [None] == [found() for found in listings]
    finally:
        feed.cancel()
        await asyncio.gather(feed, return_exceptions=True)
        await kube.close()
