"""Writes for one pod carry its uid, so a late one cannot land on a pod re-created under the
same name (every StatefulSet pod): the API server takes `metadata.uid` in a patch as a
precondition (409) and a JSON patch's `test` of it fails (422). The emulator refuses as
the API server does (`uid_preconditions`, a mock of that behaviour); the client answers
`KubePodReplacedError` (a `KubeNotFoundError`: the pod meant is gone), for both of its
ways of writing; the real operator, whose pod is replaced while its write is on the way,
leaves the namesake as it was created and carries on."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import aiohttp.web
import kmock
import pytest

from numatopo_engine import annotations as keys
from numatopo_kube import STRATEGIC_MERGE_PATCH, KubeClient, KubeNotFoundError, KubePodReplacedError
from uid_preconditions import UidPreconditions

from .conftest import Cluster, eventually, make_pod, numatopology, register_resources

NODE = "h100-a"
GATE = {"name": "numatopo.io/gate"}


@pytest.fixture(params=[True, False], ids=["lean-writes", "lightkube"])
async def client(request: pytest.FixtureRequest, cluster: Cluster) -> AsyncIterator[KubeClient]:
    kube = KubeClient.connect(str(cluster.api.url), retry_delays=(0.01,), lean_writes=request.param)
    yield kube
    await kube.close()


async def recreate(cluster: Cluster, name: str, **options: Any) -> tuple[str, str]:
    """`name` created, deleted and created again; (the first uid, the namesake's)."""
    first = make_pod(name, **options)
    await cluster.create_pod(first)
    await cluster.delete_pod(name)
    await cluster.create_pod(make_pod(name, **options))
    return first["metadata"]["uid"], cluster.pod(name)["metadata"]["uid"]


async def test_an_annotation_write_for_a_deleted_pod_is_refused_by_its_namesake(cluster, client):
    old, new = await recreate(cluster, "web-0")
    before = cluster.pod("web-0")

    with pytest.raises(KubePodReplacedError) as refused:
        await client.patch_pod_annotations("default", "web-0", {keys.STATE: "Assigned"}, uid=old)

    assert isinstance(refused.value, KubeNotFoundError)  # "gone", as every caller reads it
    assert before == cluster.pod("web-0")
    await client.patch_pod_annotations("default", "web-0", {keys.STATE: "Assigned"}, uid=new)
    after = cluster.pod("web-0")["metadata"]
    assert (new, "Assigned") == (after["uid"], after["annotations"][keys.STATE])


async def test_a_gate_removal_for_a_deleted_pod_is_refused_by_its_namesake(cluster, client):
    old, new = await recreate(cluster, "web-0", node=None)
    await cluster.patch_pod("web-0", {"spec": {"schedulingGates": [GATE]}})
    before = cluster.pod("web-0")
    removal = [
        {"op": "test", "path": "/spec/schedulingGates/0", "value": GATE},
        {"op": "remove", "path": "/spec/schedulingGates/0"},
    ]

    with pytest.raises(KubePodReplacedError):
        await client.patch_pod_spec("default", "web-0", removal, uid=old)

    assert before == cluster.pod("web-0")
    await client.patch_pod_spec("default", "web-0", removal, uid=new)
    assert [] == cluster.pod("web-0")["spec"]["schedulingGates"]


async def test_a_status_write_for_a_deleted_pod_is_refused_by_its_namesake(cluster, client):
    old, _ = await recreate(cluster, "web-0")
    before = cluster.pod("web-0")
    condition = {"conditions": [{"type": "numatopo.io/Aligned", "status": "True"}]}

    with pytest.raises(KubePodReplacedError):
        await client.patch_pod_status(
            "default", "web-0", {"status": condition}, content_type=STRATEGIC_MERGE_PATCH, uid=old
        )

    assert before == cluster.pod("web-0")


class ReplacingEmulator(UidPreconditions):
    """Replaces `web-0` with a namesake (no policy, nothing numatopo would decide for) just
    before the operator's first assignment write for it is applied: the write is late."""

    replacing: bool = False  # set first: a second write on its way replaces nothing more
    replaced: bool = False  # set once the namesake exists, for the test to wait on

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        if not self.replacing and _assigns(request, "web-0"):
            self.replacing = True
            base = f"{str(self.url).rstrip('/')}/api/v1/namespaces/default/pods"
            namesake = make_pod("web-0", policy=None)
            async with aiohttp.ClientSession() as session:
                async with session.delete(f"{base}/web-0") as response:
                    assert response.status < 300, await response.text()
                async with session.post(base, json=namesake) as response:
                    assert response.status < 300, await response.text()
            self.replaced = True
        return await super()._handle(request)


def _assigns(request: Any, name: str) -> bool:
    resource = getattr(request, "resource", None)
    if resource is None or str(resource.plural) != "pods" or request.name != name:
        return False
    body = request.data
    if request.action != kmock.action.UPDATE or not isinstance(body, Mapping):
        return False
    return keys.ASSIGNMENT in ((body.get("metadata") or {}).get("annotations") or {})


@pytest.fixture
async def replacing_cluster() -> AsyncIterator[Cluster]:
    api = ReplacingEmulator()
    async with api, kmock.Server(api):
        register_resources(api)
        yield Cluster(api)


async def test_the_operators_late_assignment_leaves_the_namesake_untouched(
    replacing_cluster, start_operator_on, h100
):
    cluster = replacing_cluster
    await cluster.create_numatopology(numatopology(NODE, h100))
    await start_operator_on(cluster)
    await cluster.create_pod(make_pod("web-0", gpus=2))

    await eventually(lambda: cluster.api.replaced, what="the write for web-0 on its way")
    await cluster.create_pod(make_pod("next", gpus=2))
    await eventually(
        lambda: keys.ASSIGNMENT in cluster.annotations("next"), what="the next pod decided"
    )

    namesake = cluster.pod("web-0")["metadata"]
    assert {} == {k: v for k, v in namesake["annotations"].items() if k.startswith("numatopo.io/")}
