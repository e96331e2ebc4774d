"""Developer use outside a cluster: the node processes log in with `$KUBECONFIG`."""

from __future__ import annotations

import base64
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from numatopo_exporter.kube import ApiError, KubeClient

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
    ("server", "settings", "expected"),
    [
        pytest.param("http://127.0.0.1:8001", ({}, {}), None, id="plain-http-no-tls"),
        pytest.param(
            "https://10.0.0.1:6443",
            ({"insecure-skip-tls-verify": True}, {"token": TOKEN}),
            (ssl.CERT_NONE, False),
            id="insecure-skip-tls-verify",
        ),
        pytest.param(
            "https://10.0.0.1:6443",
            (
                {"certificate-authority-data": "{cert}"},
                {"client-certificate-data": "{cert}", "client-key-data": "{key}"},
            ),
            (ssl.CERT_REQUIRED, True),
            id="client-certificate-and-ca-data",
        ),
        pytest.param(
            "https://10.0.0.1:6443",
            (
                {"certificate-authority": "client.crt"},
                {"client-certificate": "client.crt", "client-key": "client.key"},
            ),
            (ssl.CERT_REQUIRED, True),
            id="client-certificate-files-relative-to-the-kubeconfig",
        ),
    ],
)
def test_tls_settings_follow_the_kubeconfig(
    tmp_path: Path,
    key_pair: tuple[str, str],
    server: str,
    settings: tuple[dict[str, Any], dict[str, Any]],
    expected: tuple[ssl.VerifyMode, bool] | None,
) -> None:
    """Certificates load from data or from files; verification is on unless switched off."""
    pem = {"cert": b64(key_pair[0]), "key": b64(key_pair[1])}
    cluster, user = (
        {k: v.format(**pem) if isinstance(v, str) else v for k, v in part.items()}
        for part in settings
    )
    path = write_config(tmp_path, kubeconfig(server, cluster=cluster, **user))

    client = KubeClient.from_kubeconfig(path)

    context = client._ssl
    actual = None if isinstance(context, bool) else (context.verify_mode, context.check_hostname)
    assert (server, expected) == (client.base_url, actual)


@pytest.mark.parametrize(
    ("config", "expected_end"),
    [
        pytest.param(
            None, "cannot read the kubeconfig {path}: No such file or directory", id="missing"
        ),
        pytest.param("clusters: [", "not a kubeconfig (invalid YAML", id="not-yaml"),
        pytest.param(
            {"apiVersion": "v1"},
            "no current-context (try `kubectl config use-context`)",
            id="no-context",
        ),
        pytest.param(
            {**kubeconfig("http://x"), "current-context": "prod"},
            "no context named 'prod'",
            id="unknown-context",
        ),
        pytest.param(
            kubeconfig("127.0.0.1:6443"),
            "the cluster's server '127.0.0.1:6443' is not an http(s) URL",
            id="server-without-scheme",
        ),
        pytest.param(
            kubeconfig("https://x", exec={"command": "aws"}),
            "the user logs in through `exec`, which numatopo does not run",
            id="credential-plugin",
        ),
        pytest.param(
            kubeconfig("https://x", **{"client-certificate-data": b64("x")}),
            "a client certificate needs both its cert and its key",
            id="certificate-without-key",
        ),
        pytest.param(
            kubeconfig("https://x", **{"client-key-data": "***", "client-certificate-data": "***"}),
            "client-certificate-data is not base64-encoded PEM",
            id="bad-base64",
        ),
    ],
)
def test_a_bad_kubeconfig_is_named_in_one_line(
    tmp_path: Path, config: object, expected_end: str
) -> None:
    path = tmp_path / "kubeconfig"
    if isinstance(config, str):
        path.write_text(config)
    elif config is not None:
        write_config(tmp_path, config)

    with pytest.raises(ApiError) as raised:
        KubeClient.from_kubeconfig(path)

    message = str(raised.value)
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
    ],
)
def test_connect_chooses_the_login(
    tmp_path: Path, environ: dict[str, str], expected_url: str
) -> None:
    config = write_config(
        tmp_path, kubeconfig("https://dev.example:6443", cluster={"insecure-skip-tls-verify": True})
    )
    environ = {k: v.format(config=config) for k, v in environ.items()}
    api_url = "http://127.0.0.1:8001" if not environ else ""

    client = KubeClient.connect(api_url, environ=environ)

    assert expected_url == client.base_url
