"""The client layer refuses to build a URL from a name no API object can have, whoever
calls it: nothing is sent, and the error says which name was wrong. Both ways of
writing are played: lightkube's (node processes) and the operator's `lean_writes`,
whose paths `write_transport` takes as they are built here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from numatopo_kube import KubeClient, KubeError, KubeInvalidNameError

TRAVERSAL = "../../../../apis/numatopo.io/v1alpha1/numatopologies/h100-a"

Call = Callable[[KubeClient], Awaitable[Any]]

CALLS: list[Any] = [
    pytest.param(lambda k: k.get_pod("default", TRAVERSAL), "name", id="get-pod-traversal"),
    pytest.param(lambda k: k.get_pod("..", "job"), "namespace", id="get-pod-namespace-dotdot"),
    pytest.param(lambda k: k.get_pod("default", "job\x00"), "name", id="get-pod-nul"),
    pytest.param(lambda k: k.get_pod("default", "job\ud800"), "name", id="get-pod-surrogate"),
    pytest.param(lambda k: k.get_node("h100-a/status"), "name", id="get-node-slash"),
    pytest.param(
        lambda k: k.patch_pod_annotations("default", "job/..", {"a": "b"}),
        "name",
        id="patch-annotations",
    ),
    pytest.param(
        lambda k: k.create_binding("default", "job", "uid", "../h100-a"),
        "name",
        id="binding-to-a-bad-node",
    ),
    pytest.param(
        lambda k: k.create_binding("Default", "job", "uid", "h100-a"),
        "namespace",
        id="binding-in-a-bad-namespace",
    ),
    pytest.param(lambda k: k.get_numatopology("h100-a/.."), "name", id="get-numatopology"),
    pytest.param(
        lambda k: k.patch_numatopology_status("%2e%2e", {}), "name", id="numatopology-status"
    ),
    pytest.param(lambda k: k.get_lease("ns", "lease/../x"), "name", id="get-lease"),
    pytest.param(lambda k: k.list_pods(namespaces=["ml", "../x"]), "namespace", id="list-pods"),
    pytest.param(
        lambda k: k.patch_networktopology_status("a/../b", {}), "name", id="nettopo-status"
    ),
]
WRITE_PATHS = [pytest.param(False, id="lightkube"), pytest.param(True, id="lean-writes")]


@pytest.mark.parametrize("lean", WRITE_PATHS)
@pytest.mark.parametrize(("call", "which"), CALLS)
async def test_a_name_that_is_no_kubernetes_name_never_reaches_the_api(
    cluster, pod, call: Call, which: str, lean: bool
):
    await cluster.create_pod(pod("job", node=None))
    before = len(list(cluster.api))
    kube = KubeClient.connect(str(cluster.api.url), lean_writes=lean)
    try:
        with pytest.raises(KubeInvalidNameError, match=f"^InvalidName: {which} ") as caught:
            await call(kube)
        found = await kube.get_pod("default", "job")
    finally:
        await kube.close()

    assert not caught.value.transient
    assert isinstance(caught.value, KubeError)
    assert "job" == found["metadata"]["name"]
    # Only the valid call went out.
    sent = [(r.method.upper(), r.url.path) for r in list(cluster.api)[before:]]
    assert [("GET", "/api/v1/namespaces/default/pods/job")] == sent


@pytest.mark.parametrize("lean", WRITE_PATHS)
async def test_an_event_about_a_bad_name_is_not_posted(cluster, caplog, lean: bool):
    kube = KubeClient.connect(str(cluster.api.url), lean_writes=lean)
    try:
        posted = await kube.post_event(
            {"namespace": "default", "name": "../job"}, warning=True, reason="R", message="m"
        )
    finally:
        await kube.close()

    assert (False, []) == (posted, list(cluster.api))
    assert "name '../job' is not a valid name" in caplog.text
