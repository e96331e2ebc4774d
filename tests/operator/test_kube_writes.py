"""The writes made for every decided pod (the pod's merge patch, its Event, its node's
status patch) over the operator's own transport (`numatopo_kube.write_transport`, with
`lean_writes`), against the emulator over HTTP and a real TLS server: the object
changed as lightkube changes it, each refusal the same `KubeError`, the same retries,
the login of the kubeconfig (its token, a rotated token file, its CA and client
certificate)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from numatopo_kube import (
    KubeClient,
    KubeConflictError,
    KubeError,
    KubeForbiddenError,
    KubeNotFoundError,
    KubeUnavailableError,
)

from .conftest import numatopology
from .test_extender_tls import Issued, issue

POD_PATH = "/api/v1/namespaces/default/pods/job"
NTP_PATH = "/apis/numatopo.io/v1alpha1/numatopologies/h100-a"
DELAYS = (0.01, 0.01, 0.01)
JOB = {"namespace": "default", "name": "job", "uid": "u-1"}


@pytest.fixture(params=[True, False], ids=["lean-writes", "lightkube"])
async def client(request, cluster, pod, h100) -> AsyncIterator[KubeClient]:
    """Both ways of writing (the operator's `lean_writes`, the node processes' lightkube),
    which must not differ in anything a caller sees."""
    await cluster.create_pod(pod("job", node=None))
    await cluster.create_numatopology(numatopology("h100-a", h100))
    kube = KubeClient.connect(str(cluster.api.url), retry_delays=DELAYS, lean_writes=request.param)
    yield kube
    await kube.close()


async def read(cluster, path: str) -> dict[str, Any]:
    async with cluster.api.get(path) as response:
        assert response.status == 200, await response.text()
        return dict(await response.json())


async def test_each_write_changes_the_object_as_asked(cluster, client):
    await client.patch_pod_annotations("default", "job", {"numatopo.io/state": "Assigned"})
    await client.patch_pod_annotations("default", "job", {"numatopo.io/state": None, "a": "b"})
    await client.patch_pod_labels("default", "job", {"team": "ml"})
    await client.patch_numatopology_status("h100-a", {"freeGPUs": 3, "pods": 1})
    posted = await client.post_event(JOB, warning=True, reason="NumatopoUnsatisfiable", message="x")

    job = (await read(cluster, POD_PATH))["metadata"]
    status = (await read(cluster, NTP_PATH))["status"]
    events = (await read(cluster, "/api/v1/namespaces/default/events"))["items"]
    assert {"numatopo.io/policy": "single-numa-node", "a": "b"} == job["annotations"]
    assert "ml" == job["labels"]["team"]
    # A merge patch: the exporter's fields stay beside ours.
    assert (3, 1, "Exported") == (
        status["freeGPUs"],
        status["pods"],
        status["conditions"][0]["type"],
    )
    assert posted
    assert [("Warning", "NumatopoUnsatisfiable", "x", "job", "u-1")] == [
        (
            e["type"],
            e["reason"],
            e["message"],
            e["involvedObject"]["name"],
            e["involvedObject"]["uid"],
        )
        for e in events
    ]
    sent = {(r.method.upper(), r.url.path, r.headers.get("Content-Type")) for r in cluster.api}
    assert {
        ("PATCH", POD_PATH, "application/merge-patch+json"),
        ("PATCH", f"{NTP_PATH}/status", "application/merge-patch+json"),
        ("POST", "/api/v1/namespaces/default/events", "application/json"),
    } <= sent


async def patch_annotations(kube: KubeClient) -> None:
    await kube.patch_pod_annotations("default", "job", {"numatopo.io/state": "Assigned"})


async def patch_status(kube: KubeClient) -> None:
    await kube.patch_numatopology_status("h100-a", {"freeGPUs": 3})


# The request each call sends, in kmock's criteria syntax.
REQUESTS = {patch_annotations: f"patch {POD_PATH}", patch_status: f"patch {NTP_PATH}/status"}

STATUS_CONFLICT = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "reason": "Conflict",
    "message": "the object has been modified",
    "code": 409,
}


@pytest.mark.parametrize(
    ("call", "answers", "expected"),
    [
        pytest.param(
            patch_annotations,
            [[409, STATUS_CONFLICT]],
            (KubeConflictError, "Conflict", 1),
            id="409-a-conflict-with-the-status-message-not-retried",
        ),
        pytest.param(
            patch_annotations,
            [[403]],
            (KubeForbiddenError, "Forbidden", 1),
            id="403-forbidden-not-retried",
        ),
        pytest.param(
            patch_status,
            [[404]],
            (KubeNotFoundError, "Not Found", 1),
            id="404-not-found",
        ),
        pytest.param(
            patch_status,
            [[503], [500]],
            (None, "", 3),
            id="5xx-retried-until-it-passes",
        ),
        pytest.param(
            patch_annotations,
            [[502]] * 4,
            (KubeUnavailableError, "Bad Gateway", 4),
            id="5xx-given-up-after-three-retries",
        ),
    ],
)
async def test_refusals_are_the_same_errors_with_the_same_retries(
    cluster, client, call, answers, expected
):
    criteria = REQUESTS[call]
    for position, answer in enumerate(answers):
        reaction = cluster.api[criteria][position : position + 1]
        for part in answer:
            reaction = reaction << part

    raised: KubeError | None = None
    try:
        await call(client)
    except KubeError as exc:
        raised = exc

    kind, reason, attempts = expected
    assert (kind, reason, attempts) == (
        type(raised) if raised else None,
        raised.reason if raised else "",
        len(cluster.api[criteria]),
    )
    if kind is KubeConflictError:
        assert "patch pod default/job: " in str(raised)
        assert "the object has been modified" in str(raised)


async def test_a_write_to_an_absent_pod_is_not_found(cluster, client):
    with pytest.raises(KubeNotFoundError, match="patch pod default/gone"):
        await client.patch_pod_annotations("default", "gone", {"a": "b"})


async def test_an_event_refused_is_counted_false_not_raised(cluster, client):
    cluster.api["post /api/v1/namespaces/default/events"] << 403

    assert not await client.post_event(JOB, warning=False, reason="NumatopoAssigned", message="")


def kubeconfig(tmp_path: Path, server: str, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "dev",
                "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u"}}],
                "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
                "users": [{"name": "u", "user": user}],
            }
        )
    )
    return path


async def test_the_token_is_sent_and_a_rotated_token_file_read_again(cluster, client, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("old-token")
    config = kubeconfig(tmp_path, str(cluster.api.url), {}, {"tokenFile": str(token_file)})
    fixed = kubeconfig(tmp_path / "fixed", str(cluster.api.url), {}, {"token": "fixed-token"})

    async with KubeClient.connect(environ={"KUBECONFIG": str(fixed)}, lean_writes=True) as kube:
        await patch_annotations(kube)
    async with KubeClient.connect(environ={"KUBECONFIG": str(config)}, lean_writes=True) as kube:
        await patch_annotations(kube)
        token_file.write_text("new-token\n")  # rotated: the server refuses the old one
        (
            cluster.api[lambda request: request.headers.get("Authorization") == "Bearer old-token"]
            << 401
        )
        await patch_status(kube)

    sent = [
        (r.method.upper(), r.headers.get("Authorization"))
        for r in cluster.api
        if r.method.upper() == "PATCH"
    ]
    assert [
        ("PATCH", "Bearer fixed-token"),
        ("PATCH", "Bearer old-token"),
        ("PATCH", "Bearer old-token"),
        ("PATCH", "Bearer new-token"),
    ] == sent


@pytest.fixture
async def tls_server(tmp_path: Path) -> AsyncIterator[tuple[str, Path, list[str]]]:
    """An HTTPS server (certificate from its own CA) that asks each client for a
    certificate of that CA: (its URL, the folder of the CA and a client's PEM files,
    the common names of the clients it served)."""
    ca = issue("test-ca", ca=True)
    served: list[str] = []
    write(tmp_path, "ca", ca)
    write(tmp_path, "server", issue("localhost", by=ca, dns=("localhost",)))
    write(tmp_path, "client", issue("numatopo-operator", by=ca))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=tmp_path / "ca.crt")
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")

    async def answer(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        served.extend(value for rdn in (peer or {}).get("subject", ()) for _, value in rdn)
        await request.read()
        return web.json_response({"kind": "Pod"})

    app = web.Application()
    app.router.add_route("*", "/{path:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    yield f"https://127.0.0.1:{port}", tmp_path, served
    await runner.cleanup()


def write(folder: Path, stem: str, issued: Issued) -> None:
    issued.write(folder, stem)


async def test_the_kubeconfig_tls_settings_are_honoured(tls_server, tmp_path):
    url, pki, served = tls_server
    user = {"client-certificate": str(pki / "client.crt"), "client-key": str(pki / "client.key")}
    trusted = kubeconfig(tmp_path, url, {"certificate-authority": str(pki / "ca.crt")}, user)
    other_ca = tmp_path / "other"
    write(other_ca, "ca", issue("another-ca", ca=True))
    untrusted = kubeconfig(other_ca, url, {"certificate-authority": str(other_ca / "ca.crt")}, user)

    async with KubeClient.connect(
        environ={"KUBECONFIG": str(trusted)}, retry_delays=(), lean_writes=True
    ) as kube:
        await patch_annotations(kube)
    async with KubeClient.connect(
        environ={"KUBECONFIG": str(untrusted)}, retry_delays=(), lean_writes=True
    ) as kube:
        with pytest.raises(KubeUnavailableError) as refused:
            await patch_annotations(kube)

    # The client showed its certificate to the server it trusted, and trusted no other.
    assert ["numatopo-operator"] == served
    assert 0 == refused.value.status
    assert "certificate verify failed" in str(refused.value)
