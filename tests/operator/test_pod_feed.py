"""The operator's own pod list and watch (`pod_feed`), and the slim view it keeps of
each pod (`pod_view`).

The feed runs here on its own, over a real client against the emulator: the cluster
tests drive it inside the whole operator, but cannot make its watch expire.
"""

from __future__ import annotations

import asyncio
import copy
import json

from numatopo_engine import annotations as keys
from numatopo_engine import request_from_pod
from numatopo_kube import KubeClient
from numatopo_operator import bind_guard, pod_feed, translate
from numatopo_operator.pod_view import pod_key, slim_pod
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings

from .conftest import eventually, make_pod


def fat(pod: dict) -> dict:
    """`pod` with what a real API server and kubectl add around it, none of it read."""
    found = copy.deepcopy(pod)
    metadata = found["metadata"]
    metadata["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}] * 5
    metadata["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "{}" * 500
    metadata["labels"] = {"app": "train"}
    spec = found["spec"]
    spec["volumes"] = [{"name": "data", "emptyDir": {}}]
    spec["initContainers"] = [
        {"name": "setup", "image": "busybox", "restartPolicy": "Always", "command": ["true"]}
    ]
    for container in spec["containers"]:
        container.update(env=[{"name": "X", "value": "1"}] * 20, command=["sleep", "inf"])
    found["status"].update(
        startTime="2024-05-01T10:00:05Z",
        containerStatuses=[{"name": "main", "ready": True, "imageID": "sha256:" + "0" * 64}],
        conditions=[{"type": "Ready", "status": "True"}],
    )
    return found


def test_the_slim_view_reads_as_the_whole_pod_does():
    assigned = make_pod("p", annotations={keys.STATE: "Assigned"})
    for pod in (fat(assigned), fat(make_pod("q", node=None)), make_pod("r")):
        view = slim_pod(pod)

        assert request_from_pod(view) == request_from_pod(pod)
        assert translate.is_admitted(view) == translate.is_admitted(pod)
        assert translate.is_waiting(view) == translate.is_waiting(pod)
        assert pod_key(view) == pod_key(pod)
        assert bind_guard.pod_refusal(view, "numatopo-scheduler") == bind_guard.pod_refusal(
            pod, "numatopo-scheduler"
        )
        assert view["metadata"].get("labels") == pod["metadata"].get("labels")
        assert len(repr(view)) < len(repr(pod))
    view = slim_pod(fat(assigned))
    assert "managedFields" not in view["metadata"]
    assert "volumes" not in view["spec"]
    assert [{"name": "main", "resources": assigned["spec"]["containers"][0]["resources"]}] == (
        view["spec"]["containers"]
    )
    assert ["kubectl.kubernetes.io/last-applied-configuration"] == sorted(
        set(fat(assigned)["metadata"]["annotations"]) - set(view["metadata"]["annotations"])
    )


def test_slim_views_share_what_repeats_and_hold_nothing_of_the_decoded_pod():
    """A kept view is made of its own dicts and lists (a decoded page is freed whole),
    and values that repeat from pod to pod are one string for all of them."""
    raw = [json.loads(json.dumps(fat(make_pod(name)))) for name in ("p", "q")]
    first, second = (slim_pod(pod) for pod in raw)

    def containers(pod):
        return [id(part) for part in walk(pod) if isinstance(part, dict | list)]

    assert not set(containers(first)) & set(containers(raw[0]))
    for path in (
        ("metadata", "namespace"),
        ("spec", "nodeName"),
        ("spec", "containers", 0, "name"),
        ("spec", "containers", 0, "resources", "requests", "cpu"),
        ("status", "phase"),
    ):
        assert at(first, path) is at(second, path), path
        assert at(first, path) == at(raw[0], path)
    assert first["metadata"]["name"] == "p"


def walk(found):
    yield found
    children = (
        found.values() if isinstance(found, dict) else found if isinstance(found, list) else ()
    )
    for child in children:
        yield from walk(child)


def at(found, path):
    for step in path:
        found = found[step]
    return found


async def test_a_watch_too_old_to_resume_lists_again_and_ends_what_vanished(cluster):
    """A watch answered 410 Gone: the feed lists again, and a pod the first list had and
    the second lacks (deleted while nobody watched) is ended, not kept waiting."""
    await cluster.create_pod(make_pod("stays"))
    first = {
        "kind": "PodList",
        "metadata": {"resourceVersion": "7"},
        "items": [make_pod("stays"), make_pod("vanished")],
    }
    cluster.api["list v1/pods"][0:1] << first
    cluster.api["watch v1/pods"][0:1] << 410
    runtime = Runtime(OperatorSettings(), kube=KubeClient.connect(str(cluster.api.url)))
    runtime.indexed.set()  # as if kopf had given the Numatopologies (there are none)
    feed = asyncio.create_task(pod_feed.follow_pods(runtime))
    try:
        await eventually(
            lambda: len(cluster.api["list v1/pods"]) == 2, what="the pods listed a second time"
        )
        await eventually(
            lambda: ["stays"] == [p["metadata"]["name"] for p in runtime.waiting.on("h100-a")],
            what="the vanished pod no longer waits",
        )
        assert runtime.pods_listed.is_set()
    finally:
        feed.cancel()
        await asyncio.gather(feed, return_exceptions=True)
        await runtime.kube.close()
