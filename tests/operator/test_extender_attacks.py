"""The extender against a caller that is not kube-scheduler, over real HTTP, with the real
operator and the API emulator: a forged `/bind` creates no Binding, and no body, however
malformed, gets anything but a JSON answer (no 500, no traceback, still serving after)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from numatopo_engine import annotations as keys
from numatopo_operator import extender as extender_module
from numatopo_operator import extender_wire

PLAIN, TAINTED, LABELLED, CORDONED = "h100-a", "h100-tainted", "h100-labelled", "h100-cordoned"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATES_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
FORGED_UID = "3f2a1b4c-1234-5678-9abc-def012345678"


@pytest.fixture
async def extender(env):
    cluster, start_operator, h100, _, topology_object, wait = env.parts()
    for node in (PLAIN, TAINTED, LABELLED, CORDONED):
        await cluster.create_numatopology(topology_object(node, h100))
    await cluster.create_node(PLAIN)
    await cluster.create_node(TAINTED)
    await cluster.patch_node(TAINTED, {"spec": {"taints": [GPU_TAINT]}})
    await cluster.create_node(LABELLED, {"gpu": "h100", "zone": "a"})
    await cluster.create_node(CORDONED)
    await cluster.patch_node(CORDONED, {"spec": {"unschedulable": True}})
    running = await start_operator()
    await wait(lambda: running.runtime.deciding, what="the operator decides")
    await wait(
        lambda: all(running.runtime.ledger.topology(n) for n in (PLAIN, TAINTED, CORDONED)),
        what="every Numatopology seen",
    )
    return running


def pending(pod: Callable[..., dict[str, Any]], name: str = "job", **spec: Any) -> dict[str, Any]:
    """A Pending pod of the numatopo profile asking for 1 GPU, with `spec` fields added
    (a None value removes the field)."""
    manifest = pod(name, node=None, gpus=1)
    for field, value in spec.items():
        if value is None:
            manifest["spec"].pop(field, None)
        else:
            manifest["spec"][field] = value
    return manifest


def refuses(error: str, *fragments: str) -> None:
    assert error, "the extender accepted a forged bind"
    for fragment in fragments:
        assert fragment in error


def assert_nothing_bound(cluster, bindings: list[dict[str, Any]], *names: str) -> None:
    assert [] == bindings
    for name in names:
        stored = cluster.pods().get(name)
        if stored is not None:
            assert "nodeName" not in stored["spec"]
            assert keys.ASSIGNMENT not in stored["metadata"].get("annotations", {})


# -- forged binds of real pods ------------------------------------------------------------


async def test_no_uid_binds_nothing(extender, cluster, pod):
    bindings = cluster.emulate_binding()
    await cluster.create_pod(pending(pod))
    body = cluster.binding_args("job", PLAIN)
    del body["PodUID"]

    status, result = await extender.post("/bind", body)

    assert 200 == status
    refuses(result["Error"], "PodUID is missing")
    assert_nothing_bound(cluster, bindings, "job")


async def test_a_wrong_uid_and_a_missing_pod_get_the_same_answer(extender, cluster, pod):
    """Neither the real uid nor whether the pod exists is told to the caller."""
    bindings = cluster.emulate_binding()
    await cluster.create_pod(pending(pod))
    real_uid = cluster.pod("job")["metadata"]["uid"]
    body = {**cluster.binding_args("job", PLAIN), "PodUID": FORGED_UID}

    _, wrong_uid = await extender.post("/bind", body)
    await cluster.delete_pod("job")
    _, missing = await extender.post("/bind", body)

    expected = f"pod default/job with uid {FORGED_UID} is not a pending pod of this scheduler"
    assert (expected, expected) == (wrong_uid["Error"], missing["Error"])
    assert real_uid not in wrong_uid["Error"]
    assert [] == bindings


@pytest.mark.parametrize(
    ("namespace", "spec", "why"),
    [
        pytest.param(
            "default",
            {"schedulerName": None},
            "its schedulerName is default-scheduler, not numatopo-scheduler",
            id="default-scheduler-pod",
        ),
        pytest.param(
            "ml",
            {"schedulerName": "volcano"},
            "its schedulerName is volcano, not numatopo-scheduler",
            id="another-namespaces-pod-of-another-scheduler",
        ),
        pytest.param(
            "default",
            {"schedulingGates": [{"name": "numatopo.io/group"}]},
            "it still has scheduling gates",
            id="gated",
        ),
        pytest.param("default", {"nodeName": TAINTED}, "it is bound to a node already", id="bound"),
    ],
)
async def test_a_pod_kube_scheduler_would_not_bind_is_refused(
    extender, cluster, pod, *, namespace, spec, why
):
    bindings = cluster.emulate_binding()
    manifest = pending(pod, **spec)
    manifest["metadata"]["namespace"] = namespace
    await cluster.create_pod(manifest)

    status, result = await extender.post("/bind", cluster.binding_args("job", PLAIN, namespace))

    assert 200 == status
    uid = manifest["metadata"]["uid"]
    assert (
        f"pod {namespace}/job with uid {uid} is not a pending pod of this scheduler: {why}"
        == (result["Error"])
    )
    assert [] == bindings
    stored = cluster.pod("job", namespace)
    assert stored["spec"].get("nodeName") == spec.get("nodeName")
    if "nodeName" not in spec:  # a bound pod gets its assignment from the assigner
        assert keys.ASSIGNMENT not in stored["metadata"].get("annotations", {})


@pytest.mark.parametrize(
    ("status", "metadata", "why"),
    [
        pytest.param({"phase": "Succeeded"}, {}, "it is Succeeded, not Pending", id="succeeded"),
        pytest.param({"phase": "Running"}, {}, "it is Running, not Pending", id="running"),
        pytest.param({}, {}, "it is in no phase, not Pending", id="no-phase"),
        pytest.param(
            {"phase": "Pending"},
            {"deletionTimestamp": "2024-05-01T10:00:00Z", "finalizers": ["example.com/keep"]},
            "it is being deleted",
            id="deleting",
        ),
    ],
)
async def test_a_pod_that_is_not_pending_is_refused(
    extender, cluster, pod, *, status, metadata, why
):
    bindings = cluster.emulate_binding()
    manifest = pending(pod)
    manifest["status"] = status
    manifest["metadata"].update(metadata)
    await cluster.create_pod(manifest)

    _, result = await extender.post("/bind", cluster.binding_args("job", PLAIN))

    refuses(result["Error"], why)
    assert_nothing_bound(cluster, bindings, "job")


@pytest.mark.parametrize(
    ("node", "spec", "why"),
    [
        pytest.param(
            TAINTED,
            {},
            "the node has the taint nvidia.com/gpu=present:NoSchedule, which the pod does not "
            "tolerate",
            id="taint-untolerated",
        ),
        pytest.param(
            TAINTED,
            {
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}
                ]
            },
            "the node has the taint nvidia.com/gpu=present:NoSchedule",
            id="taint-tolerated-for-another-effect",
        ),
        pytest.param(
            LABELLED,
            {"nodeSelector": {"gpu": "a100"}},
            "the node's labels do not match the pod's nodeSelector",
            id="node-selector-mismatch",
        ),
        pytest.param(
            PLAIN,
            {"nodeSelector": {"gpu": "h100"}},
            "the node's labels do not match the pod's nodeSelector",
            id="node-selector-label-missing",
        ),
        pytest.param(
            LABELLED,
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "zone", "operator": "NotIn", "values": ["a"]}
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            "the node does not match the pod's required node affinity",
            id="affinity-mismatch",
        ),
        pytest.param(
            CORDONED,
            {},
            "the node is unschedulable (cordoned)",
            id="unschedulable-node",
        ),
        pytest.param(
            "h100-nowhere",
            {},
            "there is no such node",
            id="no-such-node",
        ),
    ],
)
async def test_a_node_kube_scheduler_would_not_choose_is_refused(
    extender, cluster, pod, *, node, spec, why
):
    bindings = cluster.emulate_binding()
    await cluster.create_pod(pending(pod, **spec))

    status, result = await extender.post("/bind", cluster.binding_args("job", node))

    assert 200 == status
    refuses(result["Error"], f"pod default/job cannot go to node {node}: {why}")
    assert_nothing_bound(cluster, bindings, "job")


AFFINITY_ZONE_A = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                {
                    "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
                    "matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": [LABELLED]}
                    ],
                },
            ]
        }
    }
}


@pytest.mark.parametrize(
    ("node", "spec"),
    [
        pytest.param(PLAIN, {}, id="plain"),
        pytest.param(TAINTED, {"tolerations": TOLERATES_GPU}, id="tolerated-taint"),
        pytest.param(TAINTED, {"tolerations": [{"operator": "Exists"}]}, id="tolerates-all"),
        pytest.param(
            LABELLED,
            {"nodeSelector": {"gpu": "h100"}, "affinity": AFFINITY_ZONE_A},
            id="selector-and-affinity-match",
        ),
        pytest.param(
            CORDONED,
            {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]},
            id="cordoned-but-tolerated",
        ),
    ],
)
async def test_what_kube_scheduler_would_bind_is_bound(extender, cluster, pod, *, node, spec):
    bindings = cluster.emulate_binding()
    await cluster.create_pod(pending(pod, **spec))

    status, result = await extender.post("/bind", cluster.binding_args("job", node))

    assert (200, {"Error": ""}) == (status, result)
    assert [node] == [b["target"]["name"] for b in bindings]
    assert node == cluster.pod("job")["spec"]["nodeName"]
    assert node == json.loads(cluster.annotations("job")[keys.ASSIGNMENT])["node"]


# -- names that are not Kubernetes names ----------------------------------------------------

TRAVERSAL = "../../../../apis/numatopo.io/v1alpha1/numatopologies/h100-a"


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        pytest.param("PodName", TRAVERSAL, "PodName '../../../../apis/", id="pod-path-traversal"),
        pytest.param("PodName", "job/binding", "PodName 'job/binding'", id="pod-slash"),
        pytest.param("PodName", "job\x00", "PodName 'job\\x00'", id="pod-nul"),
        pytest.param("PodName", "job\ud800", "PodName 'job\\ud800'", id="pod-surrogate"),
        pytest.param("PodName", "job\n", "PodName 'job\\n'", id="pod-newline"),
        pytest.param("PodName", "Job", "PodName 'Job'", id="pod-upper-case"),
        pytest.param("PodName", "j" * 254, "PodName 'jjj", id="pod-too-long"),
        pytest.param("PodNamespace", "..", "PodNamespace '..'", id="namespace-dotdot"),
        pytest.param("PodNamespace", "a.b", "PodNamespace 'a.b'", id="namespace-not-a-label"),
        pytest.param("PodNamespace", "\udfff", "PodNamespace '\\udfff'", id="ns-surrogate"),
        pytest.param("PodNamespace", None, "PodNamespace is missing", id="namespace-missing"),
        pytest.param("Node", f"{PLAIN}/../{TAINTED}", "Node 'h100-a/../", id="node-traversal"),
        pytest.param("Node", "h100-a\x00", "Node 'h100-a\\x00'", id="node-nul"),
        pytest.param("Node", "", "Node is missing", id="node-empty"),
        pytest.param("PodUID", "uid/../x", "PodUID is missing or not a uid", id="uid-slash"),
        pytest.param("PodUID", 12, "PodUID is missing or not a uid", id="uid-number"),
        pytest.param("PodName", ["job"], "PodName is missing", id="pod-name-a-list"),
    ],
)
async def test_a_name_that_is_not_a_kubernetes_name_never_reaches_a_url(
    extender, cluster, pod, *, field, value, fragment
):
    bindings = cluster.emulate_binding()
    await cluster.create_pod(pending(pod))
    body = cluster.binding_args("job", PLAIN)
    if value is None:
        del body[field]
    else:
        body[field] = value
    before = len(list(cluster.api))

    status, result = await extender.post("/bind", body)

    assert 200 == status
    refuses(result["Error"], fragment)
    assert_nothing_bound(cluster, bindings, "job")
    asked = [r.url.path for r in list(cluster.api)[before:] if r.method.upper() != "WATCH"]
    assert [] == [path for path in asked if "/pods/" in path or "/nodes/" in path]
    assert [] == [path for path in asked if path.endswith("/numatopologies/h100-a")]


# -- every answer is JSON --------------------------------------------------------------------


def nest(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


def pod_body(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "metadata": {
            "name": "fuzz",
            "namespace": "default",
            "uid": "uid-fuzz",
            "annotations": {keys.POLICY: "single-numa-node"},
        },
        "spec": {
            "containers": [
                {"name": "main", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}
            ]
        },
    }
    base.update(changes)
    return base


def container(**changes: Any) -> dict[str, Any]:
    return pod_body(spec={"containers": [{"name": "main", **changes}]})


OBJECT_BODIES: list[Any] = [
    # Not an object at all.
    None,
    True,
    0,
    -1.5,
    "ExtenderArgs",
    [],
    [{}],
    [[]],
    # ExtenderArgs with a wrong type at each level.
    {},
    {"Pod": None},
    {"Pod": 1},
    {"Pod": "pod"},
    {"Pod": []},
    {"Pod": [pod_body()]},
    {"Pod": {"metadata": 1}},
    {"Pod": {"metadata": []}},
    {"Pod": {"metadata": "x"}},
    {"Pod": {"spec": 1}},
    {"Pod": {"spec": []}},
    {"Pod": pod_body(metadata={"name": 1, "namespace": [], "uid": {}, "annotations": "x"})},
    {"Pod": pod_body(metadata={"annotations": {keys.POLICY: 1}})},
    {"Pod": pod_body(metadata={"annotations": [keys.POLICY]})},
    {
        "Pod": pod_body(
            metadata={"name": "a\x00b", "uid": "\ud800", "annotations": {keys.POLICY: "none"}}
        )
    },
    {"Pod": pod_body(metadata={"annotations": {keys.POLICY: "x", keys.GROUP_PLACEMENT: 3}})},
    {"Pod": pod_body(metadata={"annotations": {keys.POLICY: "x", keys.ASSIGNMENT: "{"}})},
    {"Pod": pod_body(spec={"containers": 1})},
    {"Pod": pod_body(spec={"containers": [1, None, "c"]})},
    {"Pod": pod_body(spec={"containers": [{"name": 1}]})},
    {"Pod": container(resources=1)},
    {"Pod": container(resources={"requests": 1})},
    {"Pod": container(resources={"requests": {"cpu": []}, "limits": {"cpu": {}}})},
    {"Pod": container(resources={"requests": {"cpu": "1e400"}, "limits": {"cpu": "-1"}})},
    {"Pod": container(resources={"requests": {"nvidia.com/gpu": 1e308}})},
    {"Pod": pod_body(spec={"containers": [], "initContainers": "x"})},
    {"Pod": pod_body(), "NodeNames": 1},
    {"Pod": pod_body(), "NodeNames": "h100-a"},
    {"Pod": pod_body(), "NodeNames": [1, None, []]},
    {"Pod": pod_body(), "NodeNames": [{"name": "h100-a"}]},
    {"Pod": pod_body(), "NodeNames": ["h100-a\x00", "\ud800", "../x", ""]},
    {"Pod": pod_body(), "NodeNames": [f"n{i}" for i in range(20_000)]},
    {"Pod": pod_body(), "Nodes": 1},
    {"Pod": pod_body(), "Nodes": []},
    {"Pod": pod_body(), "Nodes": {"items": 1}},
    {"Pod": pod_body(), "Nodes": {"items": ["h100-a", 1, None]}},
    {"Pod": pod_body(), "Nodes": {"items": [{"metadata": 1}]}},
    {"Pod": pod_body(), "Nodes": {"items": [{"metadata": {"name": 1}}]}},
    {"Pod": pod_body(), "Nodes": {"items": [{"metadata": {"name": "\ud800\x00"}}]}},
    {"pod": pod_body(), "nodenames": ["h100-a"], "NODENAMES": 7},
    # ExtenderBindingArgs with a wrong type at each field.
    {"PodName": None, "PodNamespace": None, "PodUID": None, "Node": None},
    {"PodName": 1, "PodNamespace": 2, "PodUID": 3, "Node": 4},
    {"PodName": [], "PodNamespace": {}, "PodUID": [], "Node": {}},
    {"PodName": "job", "PodNamespace": "default", "PodUID": "u", "Node": ["h100-a"]},
    {"PodName": "job\x00", "PodNamespace": "default", "PodUID": "u", "Node": "h100-a"},
    {"PodName": "job", "PodNamespace": "\ud800", "PodUID": "u", "Node": "h100-a"},
    {"PodName": "job", "PodNamespace": "default", "PodUID": "\udc00", "Node": "h100-a"},
    {"PodName": "x" * 100_000, "PodNamespace": "default", "PodUID": "u", "Node": "h100-a"},
    {"podname": "job", "podnamespace": "default", "poduid": "u", "node": "../h100-a"},
]

RAW_BODIES: list[tuple[bytes, str]] = [
    (b"", "application/json"),
    (b" ", "application/json"),
    (b"{", "application/json"),
    (b"{'Pod': 1}", "application/json"),
    (b"not json", "text/plain"),
    (b'{"Pod": 1,}', "application/json"),
    (b"NaN", "application/json"),
    (b'{"Pod": Infinity}', "application/json"),
    (b'{"a": 1e999999}', "application/json"),
    (b"1" * 10_000, "application/json"),
    (b'{"Pod": "\xff\xfe"}', "application/json"),  # not UTF-8
    (b'{"PodName": "\xed\xa0\x80"}', "application/json"),  # a surrogate encoded as UTF-8
    (b"\xef\xbb\xbf{}", "application/json"),  # a byte order mark
    ('{"PodName": "job"}'.encode("utf-16"), "application/json"),
    (b'{"PodName": "\\ud800", "Node": "\\u0000"}', "application/json"),
    (b'{"Pod": {}}', "application/x-www-form-urlencoded"),
    (b'{"Pod": {}}', ""),
    (b"PodName=job&Node=h100-a", "application/x-www-form-urlencoded"),
    (nest(100_000).encode(), "application/json"),
    (("{" + '"a":{' * 100_000 + "}" * 100_001).encode(), "application/json"),
    (('{"Pod": ' + nest(100_000) + "}").encode(), "application/json"),
    (('{"Pod": ' + nest(900) + "}").encode(), "application/json"),
    (('{"Pod": ' + nest(150) + "}").encode(), "application/json"),
    (('{"NodeNames": ' + nest(extender_wire.MAX_DEPTH) + "}").encode(), "application/json"),
    (nest(100_000, leaf="").encode()[:-5], "application/json"),  # unbalanced
    (b'{"Pod": "' + b"[" * 100_000 + b'"}', "application/json"),  # brackets in a string
    (b"[]" * 1_000_000, "application/json"),
    (b'{"Pod": "' + b"x" * (extender_wire.MAX_BODY_BYTES + 1) + b'"}', "application/json"),
]

BODIES = [(json.dumps(body).encode(), "application/json") for body in OBJECT_BODIES] + RAW_BODIES


async def _send(session, method: str, url: str, body: bytes, content_type: str):
    headers = {"Content-Type": content_type} if content_type else {}
    async with session.request(method, url, data=io.BytesIO(body), headers=headers) as response:
        return response.status, response.content_type, await response.text()


def _check_json_answer(status: int, content_type: str, text: str, what: str) -> Any:
    assert status < 500, f"{what}: HTTP {status} {text[:200]}"
    assert "application/json" == content_type, f"{what}: {content_type} {text[:200]}"
    assert "Traceback" not in text, what
    return json.loads(text)


async def test_every_malformed_body_gets_a_json_answer_and_the_operator_serves_on(
    extender, cluster, pod, caplog
):
    """About 90 bodies per verb; none reaches the catch-all (no unexpected exception is
    logged): each is told what was wrong, in the verb's own shape."""
    assert len(BODIES) >= 70
    caplog.set_level(logging.WARNING)
    bindings = cluster.emulate_binding()
    verbs = ("/filter", "/prioritize", "/bind")
    async with aiohttp.ClientSession() as session:
        for index, (body, content_type) in enumerate(BODIES):
            for verb in verbs:
                what = f"body {index} ({body[:60]!r}...) to {verb}"
                status, kind, text = await _send(
                    session, "POST", extender.url(verb), body, content_type
                )
                answer = _check_json_answer(status, kind, text, what)
                if verb == "/bind":
                    assert 200 == status, what
                    assert answer["Error"], what
                elif verb == "/filter":
                    assert 200 == status, what
                    assert {"Nodes", "NodeNames", "FailedNodes", "Error"} <= set(answer), what

    assert [] == bindings
    unexpected = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [] == [r.getMessage() for r in unexpected]
    # Still serving, and still right.
    await cluster.create_pod(pending(pod))
    status, filtered = await extender.post(
        "/filter", {"Pod": pending(pod), "NodeNames": [PLAIN, TAINTED]}
    )
    assert (200, "", [PLAIN, TAINTED]) == (status, filtered["Error"], filtered["NodeNames"])
    assert {"Error": ""} == (await extender.post("/bind", cluster.binding_args("job", PLAIN)))[1]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/filter", 405, id="get-filter"),
        pytest.param("GET", "/bind", 405, id="get-bind"),
        pytest.param("PUT", "/prioritize", 405, id="put-prioritize"),
        pytest.param("DELETE", "/bind", 405, id="delete-bind"),
        pytest.param("GET", "/", 404, id="root"),
        pytest.param("POST", "/filter/extra", 404, id="unknown-subpath"),
        pytest.param("POST", "/../../etc/passwd", 404, id="traversal"),
        pytest.param("GET", "/metrics", 404, id="metrics-are-on-another-port"),
    ],
)
async def test_other_methods_and_paths_get_json(extender, method, path, status):
    async with aiohttp.ClientSession() as session:
        answer = _check_json_answer(
            *await _send(session, method, extender.url(path), b"{}", "application/json"),
            f"{method} {path}",
        )
        found_status, _, _ = await _send(session, method, extender.url(path), b"{}", "")
        async with session.request(method, extender.url(path)) as response:
            allow = response.headers.get("Allow")

    assert status == found_status
    assert (allow == "POST") == (status == 405)
    assert answer["Error"].startswith(f"{status} ")


async def test_prioritize_errors_keep_their_status_with_a_json_body(extender):
    status, answer = await extender.post("/prioritize", {"NodeNames": [PLAIN]})

    assert (400, {"Error": "ExtenderArgs has no Pod object"}) == (status, answer)


async def test_a_5000_node_filter_fits_the_body_bound_three_times(extender, pod):
    """The bound on request bodies, measured: 5,000 names of the longest kind (253
    characters) and a pod with its managedFields, as kube-scheduler marshals them."""
    manifest = pending(pod)
    manifest["metadata"]["managedFields"] = [
        {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:spec": {"f:containers": {'k:{"name":"main"}': {".": {}}}}}}
    ]  # fmt: skip
    names = [f"{i:05d}-{'n' * 247}" for i in range(5000)]
    body = json.dumps({"Pod": manifest, "NodeNames": names}, separators=(",", ":")).encode()

    async with aiohttp.ClientSession() as session:
        status, kind, text = await _send(
            session, "POST", extender.url("/filter"), body, "application/json"
        )
    result = _check_json_answer(status, kind, text, "5,000 nodes")

    assert 3 * len(body) < extender_wire.MAX_BODY_BYTES
    assert (200, "", 5000) == (status, result["Error"], len(result["FailedAndUnresolvableNodes"]))


async def test_an_unexpected_exception_is_a_json_error_and_its_traceback_stays_in_the_log(caplog):
    """The catch-all behind every verb: what a bug would answer, in each verb's shape."""

    async def broken(request: web.Request) -> web.Response:
        raise ZeroDivisionError("internal detail")

    app = web.Application(middlewares=[extender_module.json_answers])
    for path in ("/filter", "/prioritize", "/bind"):
        app.router.add_post(path, broken)
    answers = {}
    async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as session:
        for path in ("/filter", "/prioritize", "/bind"):
            status, kind, text = await _send(
                session, "POST", str(server.make_url(path)), b"{}", "application/json"
            )
            assert "internal detail" not in text
            answers[path] = (status, json.loads(text) if kind == "application/json" else text)

    error = "numatopo extender internal error (ZeroDivisionError); see the operator log"
    assert {
        "/filter": (
            200,
            {
                "Nodes": None,
                "NodeNames": None,
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": error,
            },
        ),
        "/prioritize": (500, {"Error": error}),
        "/bind": (200, {"Error": error}),
    } == answers
    logged = [r for r in caplog.records if r.name == "numatopo_operator.extender"]
    assert 3 == len(logged)
    assert all(r.exc_info and r.exc_info[0] is ZeroDivisionError for r in logged)


async def test_the_profile_name_is_the_one_the_operator_is_given(env):
    """`OperatorSettings.scheduler_name` (chart: operator.schedulerName) says whose pods
    /bind binds: with another name, the default profile's pods are refused."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(PLAIN, h100))
    await cluster.create_node(PLAIN)
    bindings = cluster.emulate_binding()
    running = await start_operator(scheduler_name="gpu-profile")
    await wait(lambda: running.runtime.deciding, what="the operator decides")
    await wait(lambda: running.runtime.ledger.topology(PLAIN), what="the Numatopology seen")
    await cluster.create_pod(pending(pod, "theirs"))
    await cluster.create_pod(pending(pod, "ours", schedulerName="gpu-profile"))

    _, theirs = await running.post("/bind", cluster.binding_args("theirs", PLAIN))
    _, ours = await running.post("/bind", cluster.binding_args("ours", PLAIN))

    refuses(theirs["Error"], "its schedulerName is numatopo-scheduler, not gpu-profile")
    assert {"Error": ""} == ours
    assert ["ours"] == [b["metadata"]["name"] for b in bindings]
