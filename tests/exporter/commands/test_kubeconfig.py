"""How the node processes log in (`numatopo_kube.KubeClient.connect`): `--api-url`,
else in-cluster (the pod's service account), else `$KUBECONFIG` (a developer's machine)."""

from __future__ import annotations

import base64
import gc
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from numatopo_kube import KubeClient, KubeConfigError

from ..daemon.conftest import NODE
from .conftest import main_in_thread

NTP = "numatopo.io/v1alpha1/numatopologies"
TOKEN = "dev-token-123"


def kubeconfig(server: str, *, cluster: dict[str, Any] | None = None, **user: Any) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "dev",
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "u", "user": user}],
    }


def write_config(tmp_path: Path, config: object) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def key_pair(tmp_path: Path) -> tuple[str, str]:
    """A throw-away self-signed client certificate and its key (PEM), made by openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not on PATH to make a test certificate")
    cert, key = tmp_path / "client.crt", tmp_path / "client.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"),
            *("-nodes", "-days", "1", "-subj", "/CN=dev", "-keyout", key, "-out", cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert.read_text(), key.read_text()


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# lightkube writes `*-data` credentials to temporary files that are closed only when
# garbage-collected (a ResourceWarning, raised in whichever test runs then): the tests
# that make them collect them before they end, and ignore just those warnings.
TEMP_CREDENTIAL_FILES = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning"
)


async def test_exporter_publishes_through_kubeconfig_with_a_token(
    cluster: kmock.KubernetesEmulator,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    node_root: Path,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv(
        "KUBECONFIG", str(write_config(tmp_path, kubeconfig(str(cluster.url), token=TOKEN)))
    )

    code = await main_in_thread(
        ["exporter", "--oneshot", "--no-nvml", f"--sysfs-root={node_root}", f"--node-name={NODE}"]
    )

    assert 0 == code
    assert NODE == dict(cluster.objects[NTP, None, NODE].raw)["metadata"]["name"]
    assert {f"Bearer {TOKEN}"} == {r.headers.get("Authorization") for r in cluster}


@pytest.mark.parametrize(
    ("server", "settings"),
    [
        pytest.param("http://127.0.0.1:8001", ({}, {}), id="plain-http-no-tls"),
        pytest.param(
            "https://10.0.0.1:6443",
            ({"insecure-skip-tls-verify": True}, {"token": TOKEN}),
            id="insecure-skip-tls-verify",
        ),
        pytest.param(
            "https://10.0.0.1:6443",
            (
                {"certificate-authority-data": "{cert}"},
                {"client-certificate-data": "{cert}", "client-key-data": "{key}"},
            ),
            id="client-certificate-and-ca-data",
        ),
        pytest.param(
            "https://10.0.0.1:6443",
            (
                {"certificate-authority": "client.crt"},
                {"client-certificate": "client.crt", "client-key": "client.key"},
            ),
            id="client-certificate-files-relative-to-the-kubeconfig",
        ),
    ],
)
@TEMP_CREDENTIAL_FILES
async def test_tls_settings_follow_the_kubeconfig(
    tmp_path: Path,
    key_pair: tuple[str, str],
    server: str,
    settings: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """Certificates load from data or from files (lightkube loads them when connecting:
    a certificate it cannot use fails there, see the bad kubeconfigs below)."""
    pem = {"cert": b64(key_pair[0]), "key": b64(key_pair[1])}
    cluster, user = (
        {k: v.format(**pem) if isinstance(v, str) else v for k, v in part.items()}
        for part in settings
    )
    path = write_config(tmp_path, kubeconfig(server, cluster=cluster, **user))

    async with KubeClient.connect(environ={"KUBECONFIG": str(path)}) as client:
        assert server == client.server
    gc.collect()


@pytest.mark.parametrize(
    ("config", "expected_end"),
    [
        pytest.param(None, "{path}: not a usable kubeconfig: ", id="missing"),
        pytest.param("clusters: [", "{path}: not a kubeconfig (invalid YAML", id="not-yaml"),
        pytest.param({"apiVersion": "v1"}, "{path}: not a usable kubeconfig", id="no-context"),
        pytest.param(
            {**kubeconfig("http://x"), "current-context": "prod"},
            "Context 'prod' not found",
            id="unknown-context",
        ),
        pytest.param(
            kubeconfig("127.0.0.1:6443"),
            "the cluster's server '127.0.0.1:6443' is not an http(s) URL",
            id="server-without-scheme",
        ),
        pytest.param(
            kubeconfig("https://x", **{"client-certificate-data": b64("x")}),
            "https://x: cannot load the TLS credentials",
            id="certificate-without-key",
        ),
        pytest.param(
            kubeconfig("https://x", **{"client-key-data": "***", "client-certificate-data": "***"}),
            "https://x: cannot load the TLS credentials",
            id="bad-pem",
        ),
    ],
)
@TEMP_CREDENTIAL_FILES
def test_a_bad_kubeconfig_is_named_in_one_line(
    tmp_path: Path, config: object, expected_end: str
) -> None:
    path = tmp_path / "kubeconfig"
    if isinstance(config, str):
        path.write_text(config)
    elif config is not None:
        write_config(tmp_path, config)

    with pytest.raises(KubeConfigError) as raised:
        KubeClient.connect(environ={"KUBECONFIG": str(path)})

    message = str(raised.value)
    gc.collect()
    assert (1, True) == (len(message.splitlines()), expected_end.format(path=path) in message)


@pytest.mark.parametrize(
    ("environ", "expected_url"),
    [
        pytest.param({}, "http://127.0.0.1:8001", id="api-url-wins"),
        pytest.param({"KUBECONFIG": "{config}"}, "https://dev.example:6443", id="kubeconfig"),
        pytest.param(
            {"KUBECONFIG": "{config}:/nonexistent/second"},
            "https://dev.example:6443",
            id="kubeconfig-list-first-file",
        ),
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBECONFIG": "{config}"},
            "https://10.96.0.1:443",
            id="in-cluster-before-kubeconfig",
        ),
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "fd00::1"},
            "https://[fd00::1]:443",
            id="in-cluster-ipv6",
        ),
    ],
)
async def test_connect_chooses_the_login(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    key_pair: tuple[str, str],
    environ: dict[str, str],
    expected_url: str,
) -> None:
    config = write_config(
        tmp_path, kubeconfig("https://dev.example:6443", cluster={"insecure-skip-tls-verify": True})
    )
    environ = {k: v.format(config=config) for k, v in environ.items()}
    api_url = "http://127.0.0.1:8001" if not environ else ""
    account = service_account(tmp_path, key_pair[0], "sa-token")
    # lightkube reads the service's address from the process environment itself.
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    if "KUBERNETES_SERVICE_HOST" in environ:
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", environ["KUBERNETES_SERVICE_HOST"])
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")

    async with KubeClient.connect(api_url, environ=environ, service_account=account) as client:
        assert expected_url == client.server


def service_account(tmp_path: Path, ca: str, token: str) -> Path:
    """A pod's service-account folder: token, CA certificate, namespace."""
    account = tmp_path / "serviceaccount"
    account.mkdir(exist_ok=True)
    (account / "token").write_text(token)
    (account / "ca.crt").write_text(ca)
    (account / "namespace").write_text("numatopo")
    return account


def test_in_cluster_without_a_readable_service_account_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    missing = tmp_path / "nothing-here"

    with pytest.raises(KubeConfigError) as raised:
        KubeClient.connect(
            environ={"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, service_account=missing
        )

    message = str(raised.value)
    assert (1, True) == (
        len(message.splitlines()),
        f"cannot read the service account in {missing}" in message,
    )


async def test_a_rotated_token_file_is_read_again_after_a_401(
    cluster: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    """The kubelet rotates a projected service-account token in place; the API server
    then refuses the old one (401). lightkube's token-file auth (`BearerTokenFileAuth`:
    the in-cluster login's, and a kubeconfig's `tokenFile`) reads the file again and
    repeats the request, as client-go does, so the process keeps working.

    In-cluster login always speaks https to `$KUBERNETES_SERVICE_HOST`, which the
    emulator (plain http) cannot serve; the same auth class is exercised here through a
    kubeconfig `tokenFile`, and the in-cluster path's use of the token file is
    lightkube's `KubeConfig.from_service_account` (`User(token_file=...)`)."""
    token_file = tmp_path / "token"
    token_file.write_text("old-token")
    path = write_config(tmp_path, kubeconfig(str(cluster.url), tokenFile=str(token_file)))

    async with KubeClient.connect(environ={"KUBECONFIG": str(path)}) as client:
        assert NODE == (await client.get_node(NODE))["metadata"]["name"]
        token_file.write_text("new-token\n")  # rotated: the server refuses the old one
        cluster[lambda request: request.headers.get("Authorization") == "Bearer old-token"] << 401
        assert NODE == (await client.get_node(NODE))["metadata"]["name"]

    sent = [r.headers.get("Authorization") for r in cluster]
    assert ["Bearer old-token", "Bearer old-token", "Bearer new-token"] == sent
