"""`numatopo_kube.KubeClient` (the one client layer) against the emulated API failing now
and then: idempotent calls are retried a bounded number of times, a Binding never, and an
Event is best-effort; and each kind of write goes out with the content type a real API
server needs for it."""

from __future__ import annotations

import asyncio
import contextlib

import kmock
import pytest

from numatopo_kube import (
    APPLY,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    KubeClient,
    KubeError,
)
from numatopo_kube.client import LIST_PAGE_SIZE

POD_PATH = "/api/v1/namespaces/default/pods/job"
DELAYS = (0.01, 0.01, 0.01)  # three retries, quickly


@pytest.fixture
async def client(cluster, pod):
    await cluster.create_pod(pod("job", node=None))
    kube = KubeClient.connect(str(cluster.api.url), retry_delays=DELAYS)
    yield kube
    await kube.close()


async def get_pod(kube: KubeClient) -> object:
    return (await kube.get_pod("default", "job"))["metadata"]["name"]


async def patch_annotations(kube: KubeClient) -> object:
    await kube.patch_pod_annotations("default", "job", {"numatopo.io/state": "Assigned"})
    return "patched"


async def patch_labels(kube: KubeClient) -> object:
    await kube.patch_pod_labels("default", "job", {"numatopo.io/extender-active": "true"})
    return "patched"


async def bind(kube: KubeClient) -> object:
    await kube.create_binding("default", "job", "", "h100-a")
    return "bound"


# The requests each call sends, in kmock's criteria syntax.
REQUESTS = {
    get_pod: f"get {POD_PATH}",
    patch_annotations: f"patch {POD_PATH}",
    patch_labels: f"patch {POD_PATH}",
    bind: f"post {POD_PATH}/binding",
}


@pytest.mark.parametrize(
    ("call", "failures", "expected"),
    [
        pytest.param(get_pod, [500, 500], ("job", 3), id="get-after-two-500s"),
        pytest.param(
            patch_annotations,
            [429, 503],
            ("patched", 3),
            id="annotation-patch-after-throttling-and-503",
        ),
        pytest.param(patch_labels, [502], ("patched", 2), id="label-patch-after-502"),
        pytest.param(get_pod, [500] * 4, ("HTTP 500", 4), id="gives-up-after-3-retries"),
        pytest.param(get_pod, [403], ("HTTP 403", 1), id="403-is-not-retried"),
        pytest.param(
            bind,
            [500],
            ("HTTP 500", 1),
            id="binding-is-not-retried-a-second-post-would-conflict",
        ),
    ],
)
async def test_transient_errors_are_retried_for_idempotent_calls(
    cluster, client, call, failures, expected
):
    criteria = REQUESTS[call]
    for position, status in enumerate(failures):
        cluster.api[criteria][position : position + 1] << status

    try:
        outcome = await call(client)
    except KubeError as exc:
        outcome = f"HTTP {exc.status}"

    assert expected == (outcome, len(cluster.api[criteria]))


async def test_an_event_the_api_refuses_is_logged_not_raised(cluster, client, caplog):
    cluster.api["post /api/v1/namespaces/default/events"] << 500
    ref = {"namespace": "default", "name": "job", "uid": ""}

    posted = await client.post_event(ref, warning=False, reason="NumatopoAssigned", message="ok")

    assert (False, 1) == (posted, len(cluster.api["post /api/v1/namespaces/default/events"]))
    assert "Event NumatopoAssigned about default/job not posted" in caplog.text


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [
        pytest.param(None, [0.01], id="no-header-uses-the-backoff"),
        pytest.param("1", [1.0], id="seconds-are-waited"),
        pytest.param("0", [0.01], id="zero-still-waits-the-backoff"),
        pytest.param("3600", [2.0], id="a-long-ask-is-capped"),
        pytest.param("Wed, 21 Oct 2015 07:28:00 GMT", [0.01], id="a-date-in-the-past-is-now"),
        pytest.param("soon", [0.01], id="unreadable-is-ignored"),
    ],
)
async def test_throttling_honours_retry_after(cluster, pod, retry_after, expected):
    """A 429 with `Retry-After` pauses that long before the retry, up to a cap."""
    await cluster.create_pod(pod("job", node=None))
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    kube = KubeClient.connect(
        str(cluster.api.url), retry_delays=DELAYS, retry_after_cap=2.0, sleep=sleep
    )
    throttled = cluster.api[REQUESTS[get_pod]][0:1] << 429
    if retry_after is not None:
        throttled << kmock.headers({"Retry-After": retry_after})
    try:
        name = await get_pod(kube)
    finally:
        await kube.close()

    assert ("job", expected) == (name, slept)


def page(*names: str, token: str = "") -> dict:
    return {
        "kind": "PodList",
        "metadata": {"continue": token} if token else {},
        "items": [{"metadata": {"name": name}} for name in names],
    }


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        pytest.param([page("a", token="t1"), page("b")], (["a", "b"], 2), id="pages-are-joined"),
        pytest.param(
            [page("a", token="t1"), 410, page("a", token="t2"), page("b")],
            (["a", "b"], 4),
            id="an-expired-token-lists-again-from-the-first-page",
        ),
    ],
)
async def test_list_pods_reads_every_page(cluster, client, answers, expected):
    criteria = "list v1/pods"
    for position, answer in enumerate(answers):
        cluster.api[criteria][position : position + 1] << answer

    pods = await client.list_pods()

    assert expected == ([p["metadata"]["name"] for p in pods.items], len(cluster.api[criteria]))


async def test_a_page_larger_than_asked_for_lets_the_loop_turn(cluster, client):
    """A server may answer a list in one page however many objects it holds (kmock does):
    the loop turns while `keep` goes through it, so a Lease renewal due meanwhile is not
    held up past its deadline for the whole page."""
    names = [f"p{index}" for index in range(3 * LIST_PAGE_SIZE)]
    cluster.api["list v1/pods"][0:1] << page(*names)
    turns = 0

    async def turning() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    seen_at: list[int] = []

    def keep(pod: dict) -> dict:
        seen_at.append(turns)
        return pod

    counter = asyncio.create_task(turning())
    try:
        pods = await client.list_pods(keep=keep)
    finally:
        counter.cancel()

    assert len(names) == len(pods.items)
    # The other task ran between the first and the last object of the one page.
    assert seen_at[-1] - seen_at[0] >= 2, (seen_at[0], seen_at[-1])


async def test_each_write_sends_the_content_type_a_real_server_needs(cluster, client):
    """The emulator merges every PATCH alike; a real API server reads the content type:
    server-side apply with its field manager, JSON patch, merge patch, strategic merge."""
    await client.patch_pod_annotations("default", "job", {"numatopo.io/state": "Assigned"})
    for patch, content_type in [
        ([{"op": "test", "path": "/status/conditions", "value": []}], JSON_PATCH),
        ({"status": {"conditions": []}}, STRATEGIC_MERGE_PATCH),
    ]:
        with contextlib.suppress(KubeError):  # the emulator cannot apply a JSON patch
            await client.patch_pod_status("default", "job", patch, content_type=content_type)
    body = {"metadata": {"name": "h100-a"}, "spec": {}}
    await client.apply_numatopology(body, field_manager="numatopo-exporter")
    await client.apply_numatopology_status("h100-a", {"conditions": []}, field_manager="agent")

    sent = [
        (r.method.upper(), r.url.path, r.headers.get("Content-Type"), dict(r.params))
        for r in cluster.api
        if r.method.upper() == "PATCH"
    ]

    job, ntp = "/api/v1/namespaces/default/pods/job", "/apis/numatopo.io/v1alpha1/numatopologies"
    assert [
        ("PATCH", job, MERGE_PATCH, {}),
        ("PATCH", f"{job}/status", JSON_PATCH, {}),
        ("PATCH", f"{job}/status", STRATEGIC_MERGE_PATCH, {}),
        ("PATCH", f"{ntp}/h100-a", APPLY, {"fieldManager": "numatopo-exporter", "force": "true"}),
        ("PATCH", f"{ntp}/h100-a/status", APPLY, {"fieldManager": "agent", "force": "true"}),
    ] == sent
    assert "application/apply-patch+yaml" == APPLY


async def test_an_unreadable_object_in_a_watch_is_a_named_retriable_error(cluster, pod):
    """A watched object lightkube cannot parse ends the watch as a `KubeError` the
    caller's loop handles (logs, backs off, lists again), not a bare exception that ends
    the watcher task in silence."""
    broken = pod("broken", node="n1")
    broken["metadata"]["creationTimestamp"] = "not a time"
    await cluster.create_pod(broken)
    kube = KubeClient.connect(str(cluster.api.url), retry_delays=DELAYS)
    try:
        with pytest.raises(KubeError, match="unreadable object") as caught:
            async for _ in kube.watch_pods(field_selector={"spec.nodeName": "n1"}):
                pass
    finally:
        await kube.close()

    assert caught.value.transient


# Each list call and its arguments; the set is checked against the client's `list_*` methods.
LISTS = {
    "list_nodes": {},
    "list_pods": {},
    "list_numatopologies": {},
    "list_network_topologies": {},
    "list_resource_claims": {},
    "list_resource_slices": {},
    "list_device_classes": {},
    "list_node_resource_topologies": {"label_selector": {"app": "numatopo"}},
    "list_volcano_numatopologies": {"label_selector": {"app": "numatopo"}},
}


async def test_every_list_is_read_in_pages(cluster, client):
    """One answer holding every ResourceClaim or pod of a large cluster costs the API server
    and this process its whole size at once: each list asks for pages."""
    assert set(LISTS) == {name for name in dir(KubeClient) if name.startswith("list_")}
    for name, arguments in LISTS.items():
        with contextlib.suppress(KubeError):  # the emulator may not serve every kind
            await getattr(client, name)(**arguments)

    lists = [r for r in cluster.api if r.method.upper() == "GET"]
    limits = {r.url.path: r.params.get("limit") for r in lists}
    assert len(limits) >= len(LISTS), sorted(limits)
    assert {str(LIST_PAGE_SIZE)} == set(limits.values()), limits
