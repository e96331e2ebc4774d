"""One pod's `/bind` twice at once: kube-scheduler gave up on the first (its extender
timeout passed while the bind waited, for a steered node's GPU slot or a slow API) and
binds the pod again while the first still runs. One assignment is written and one
Binding created; the pod is never bound without its assignment, nor its assignment
taken back once it is bound.

The operator's own `Runtime`, ledger, engine thread and client run against kmock's
API server; the watch is stood in for by handing each annotation patch back through
`handlers.pod_seen` at once, as a fast watch would.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest

import signing_keys
from numatopo_engine import annotations as keys
from numatopo_kube import KubeClient, KubeUnavailableError
from numatopo_operator import bind_guard, handlers
from numatopo_operator.extender_wire import BindingArgs
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings
from numatopo_operator.signing_keys import load_keys

from .conftest import h100_spec, make_pod

NODE = "h100-a"
logger = logging.getLogger(__name__)


@pytest.fixture
async def runtime(cluster: Any) -> AsyncIterator[Runtime]:
    settings = OperatorSettings(signing_key_file=signing_keys.KEY_FILE)
    signer, verifier = load_keys(settings)
    found = Runtime(
        settings,
        kube=KubeClient.connect(str(cluster.api.url)),
        signer=signer,
        verifier=verifier,
    )
    for flag in (found.indexed, found.active, found.ledger_current, found.role_known):
        flag.set()
    found.ledger.set_topology(NODE, h100_spec())
    yield found
    await found.kube.close()


def api_server_bindings(cluster: Any) -> list[str]:
    """Serve pods/binding as the API server does: a pod bound already is refused (409);
    returns the nodes of the Bindings asked for, as they come."""
    asked: list[str] = []

    async def bind(request: kmock.Request) -> object:
        name, node = request.data["metadata"]["name"], request.data["target"]["name"]
        asked.append(node)
        bound = cluster.pod(name)["spec"].get("nodeName")
        if bound:
            raise kmock.KubernetesError(
                status=409, reason="Conflict",
                message=f"pod {name} is already assigned to node {bound!r}",
            )  # fmt: skip
        await cluster.patch_pod(name, {"spec": {"nodeName": node}})
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

    cluster.api["post", kmock.subresource("binding")] << bind
    return asked


async def test_a_pod_bound_twice_at_once_is_assigned_and_bound_once(
    cluster: Any, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second bind used to bind the pod as soon as the first had booked it (before
    its assignment was written), or decide and write again; either way one Binding was
    refused, and when the first's was, the assignment of the bound pod was taken back
    (with a NumatopoBindFailed Event)."""
    asked = api_server_bindings(cluster)
    await cluster.create_node(NODE)
    body = make_pod("job", node=None, gpus=2)
    await cluster.create_pod(body)
    handlers.pod_seen(runtime, "ADDED", body, logger)
    patches: list[dict[str, Any]] = []
    events: list[str] = []
    patch = runtime.kube.patch_pod_annotations

    async def patch_and_watch(namespace: str, name: str, annotations: Any, uid: str) -> None:
        patches.append(dict(annotations))
        await patch(namespace, name, annotations, uid=uid)
        handlers.pod_seen(runtime, "MODIFIED", cluster.pod(name), logger)

    def post(about: Any, *, warning: bool, reason: str, message: str) -> None:
        events.append(reason)

    monkeypatch.setattr(runtime.kube, "patch_pod_annotations", patch_and_watch)
    monkeypatch.setattr(runtime.events, "post", post)
    args = BindingArgs("default", "job", body["metadata"]["uid"], NODE)

    answers = await asyncio.gather(
        bind_guard.bind_checked(runtime, args), bind_guard.bind_checked(runtime, args)
    )

    assert "" == answers[0]
    assert answers[1], "the second bind is refused: the scheduler retries the pod"
    assert [NODE] == asked
    assert 1 == len(patches), patches
    stored = cluster.pod("job")
    assert NODE == stored["spec"]["nodeName"]
    annotations = stored["metadata"]["annotations"]
    assert "Assigned" == annotations[keys.STATE]
    assert NODE == json.loads(annotations[keys.ASSIGNMENT])["node"]
    assert ["NumatopoAssigned"] == events
    assert runtime.ledger.node_of("default/job") == NODE


@pytest.mark.parametrize("lagging", ["both", "take-back"], ids=["watch-lags", "take-back-lags"])
async def test_a_pod_bound_again_after_a_failed_binding_is_assigned_first(
    cluster: Any, runtime: Runtime, monkeypatch: pytest.MonkeyPatch, lagging: str
) -> None:
    """A Binding refused (the API failed) takes the assignment back; kube-scheduler binds
    the pod again soon after, before the watch showed the take-back (or the assignment
    either). The second bind used to trust the taken-back booking (`take-back-lags`: it
    bound the pod with no assignment), or skip its own write as already said
    (`watch-lags`: bound with none, its fresh booking left in flight for good)."""
    refusals = iter([True])
    bindings: list[bool] = []

    async def bind(request: kmock.Request) -> object:
        name, node = request.data["metadata"]["name"], request.data["target"]["name"]
        bindings.append(keys.ASSIGNMENT in cluster.annotations(name))
        if next(refusals, False):
            raise kmock.KubernetesError(status=500, reason="InternalError", message="etcd timeout")
        await cluster.patch_pod(name, {"spec": {"nodeName": node}})
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

    cluster.api["post", kmock.subresource("binding")] << bind
    await cluster.create_node(NODE)
    body = make_pod("job", node=None, gpus=2)
    await cluster.create_pod(body)
    handlers.pod_seen(runtime, "ADDED", body, logger)
    lagged: list[dict[str, Any]] = []
    patch = runtime.kube.patch_pod_annotations

    async def patch_and_watch(namespace: str, name: str, annotations: Any, uid: str) -> None:
        await patch(namespace, name, annotations, uid=uid)
        shown = cluster.pod(name)
        if lagging == "both" or annotations.get(keys.STATE) is None:
            lagged.append(shown)  # the watch shows it later
        else:
            handlers.pod_seen(runtime, "MODIFIED", shown, logger)

    monkeypatch.setattr(runtime.kube, "patch_pod_annotations", patch_and_watch)
    args = BindingArgs("default", "job", body["metadata"]["uid"], NODE)

    assert "failed" in await bind_guard.bind_checked(runtime, args)
    assert "" == await bind_guard.bind_checked(runtime, args)
    for shown in [*lagged, cluster.pod("job")]:
        handlers.pod_seen(runtime, "MODIFIED", shown, logger)

    assert [True, True] == bindings  # each Binding asked for after its assignment
    stored = cluster.pod("job")
    assert NODE == stored["spec"]["nodeName"]
    written = json.loads(stored["metadata"]["annotations"][keys.ASSIGNMENT])
    booked = runtime.ledger.booking("default/job")
    assert booked is not None
    assert written["seq"] == booked.assignment.seq
    assert runtime.ledger.state(NODE).assignments["default/job"] == booked.assignment


@pytest.mark.parametrize(
    ("status", "reason"),
    [(504, "Timeout"), (500, "InternalError"), (409, "Conflict")],
    ids=["gateway-timeout", "etcd-timeout", "conflict-with-itself"],
)
async def test_a_binding_that_went_through_unanswered_keeps_its_assignment(
    cluster: Any, runtime: Runtime, monkeypatch: pytest.MonkeyPatch, status: int, reason: str
) -> None:
    """The API server commits the Binding and the answer is lost (a proxy's timeout, an
    etcd timeout after the write, or our own Binding seen as a conflict). The pod runs on
    the node: taking its assignment back would free its GPUs for the next pod while it
    holds them. The bind used to take it back and post NumatopoBindFailed."""

    async def bind(request: kmock.Request) -> object:
        name, node = request.data["metadata"]["name"], request.data["target"]["name"]
        await cluster.patch_pod(name, {"spec": {"nodeName": node}})
        raise kmock.KubernetesError(status=status, reason=reason, message="answer lost")

    cluster.api["post", kmock.subresource("binding")] << bind
    await cluster.create_node(NODE)
    body = make_pod("job", node=None, gpus=2)
    await cluster.create_pod(body)
    handlers.pod_seen(runtime, "ADDED", body, logger)
    events: list[str] = []

    def post(about: Any, *, warning: bool, reason: str, message: str) -> None:
        events.append(reason)

    monkeypatch.setattr(runtime.events, "post", post)
    args = BindingArgs("default", "job", body["metadata"]["uid"], NODE)

    assert "" == await bind_guard.bind_checked(runtime, args)

    stored = cluster.pod("job")
    assert NODE == stored["spec"]["nodeName"]
    assert NODE == json.loads(stored["metadata"]["annotations"][keys.ASSIGNMENT])["node"]
    assert NODE == runtime.ledger.node_of("default/job")
    assert ["NumatopoAssigned"] == events


async def test_a_binding_refused_and_not_readable_is_taken_back(
    cluster: Any, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the Binding failed and the pod cannot be read either, nothing says it is bound:
    the assignment is taken back as before (the watch re-decides a pod found bound)."""

    async def bind(request: kmock.Request) -> object:
        raise kmock.KubernetesError(status=503, reason="ServiceUnavailable", message="down")

    cluster.api["post", kmock.subresource("binding")] << bind
    await cluster.create_node(NODE)
    body = make_pod("job", node=None, gpus=2)
    await cluster.create_pod(body)
    handlers.pod_seen(runtime, "ADDED", body, logger)
    reads = 0
    get_pod = runtime.kube.get_pod

    async def get_once(namespace: str, name: str) -> Any:
        nonlocal reads
        reads += 1
        if reads > 1:  # the guard's own read passes; the one after the Binding fails
            raise KubeUnavailableError(503, "ServiceUnavailable", "down")
        return await get_pod(namespace, name)

    monkeypatch.setattr(runtime.kube, "get_pod", get_once)
    args = BindingArgs("default", "job", body["metadata"]["uid"], NODE)

    assert "failed" in await bind_guard.bind_checked(runtime, args)

    assert 2 == reads
    assert keys.ASSIGNMENT not in cluster.annotations("job")
    assert runtime.ledger.node_of("default/job") is None
