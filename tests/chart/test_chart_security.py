"""The chart's guards, rendered by the real Helm engine: the extender's mutual TLS (and
its certificates kept across upgrades), the NetworkPolicies, and node pods that mount
only the kubelet files they read."""

from __future__ import annotations

import argparse
import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

x509 = pytest.importorskip("cryptography.x509")
helm = pytest.importorskip("helm_python")

from cryptography.x509.oid import ExtensionOID  # noqa: E402

from .conftest import CHART_DIR, NAMESPACE, RELEASE, parse_manifests  # noqa: E402

SERVER, CLIENT, CA = (
    "numatopo-extender-server-tls",
    "numatopo-extender-client-tls",
    "numatopo-extender-ca",
)
SCHEDULER_ON = {"scheduler": {"enabled": True}}


SIGNING = "numatopo-signing"  # the assignment signing key: made whatever `tls.source` says


def secrets(manifests: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The extender's TLS Secrets the chart makes (name -> data)."""
    return {
        m["metadata"]["name"]: m["data"]
        for m in manifests
        if m["kind"] == "Secret" and m["metadata"]["name"] != SIGNING
    }


def cert(data: dict[str, str], key: str) -> Any:
    return x509.load_pem_x509_certificate(base64.b64decode(data[key]))


def signed_by(child: Any, parent: Any) -> bool:
    try:
        child.verify_directly_issued_by(parent)
    except (ValueError, TypeError, Exception):
        return False
    return True


def pod_spec(manifests: list[dict[str, Any]], find: Any, kind: str, name: str) -> Any:
    return find(manifests, kind, name)["spec"]["template"]["spec"]


def projected(spec: dict[str, Any], volume: str) -> set[tuple[str, str, str]]:
    """(Secret, key, file) of a projected volume."""
    (found,) = [v for v in spec.get("volumes", []) if v["name"] == volume]
    return {
        (source["secret"]["name"], item["key"], item["path"])
        for source in found["projected"]["sources"]
        for item in source["secret"]["items"]
    }


def test_the_generated_pki_has_two_cas_and_each_pod_gets_only_its_side(
    render: Any, find: Any
) -> None:
    manifests = render(SCHEDULER_ON)
    found = secrets(manifests)
    server, client, cas = found[SERVER], found[CLIENT], found[CA]
    server_ca, client_ca = cert(cas, "server-ca.crt"), cert(cas, "client-ca.crt")
    names = cert(server, "tls.crt").extensions.get_extension_for_oid(
        ExtensionOID.SUBJECT_ALTERNATIVE_NAME
    )

    assert (True, True, False, False) == (
        signed_by(cert(server, "tls.crt"), server_ca),
        signed_by(cert(client, "tls.crt"), client_ca),
        # The operator accepts clients of the client CA: its own certificate is not one.
        signed_by(cert(server, "tls.crt"), client_ca),
        server_ca.subject == client_ca.subject,
    )
    assert {
        "numatopo-operator",
        f"numatopo-operator.{NAMESPACE}.svc",
        f"numatopo-operator.{NAMESPACE}.svc.cluster.local",
    } == set(names.value.get_values_for_type(x509.DNSName))
    assert (cas["server-ca.crt"], cas["client-ca.crt"]) == (server["ca.crt"], client["ca.crt"])

    operator = pod_spec(manifests, find, "Deployment", "numatopo-operator")
    scheduler = pod_spec(manifests, find, "Deployment", "numatopo-scheduler")
    assert {
        (SERVER, "tls.crt", "tls.crt"),
        (SERVER, "tls.key", "tls.key"),
        (CLIENT, "ca.crt", "client-ca.crt"),
    } == projected(operator, "extender-tls")
    assert {
        (CLIENT, "tls.crt", "tls.crt"),
        (CLIENT, "tls.key", "tls.key"),
        (SERVER, "ca.crt", "server-ca.crt"),
    } == projected(scheduler, "extender-tls")


def test_no_pod_mounts_a_ca_key(render: Any) -> None:
    manifests = render(SCHEDULER_ON)
    text = json.dumps(
        [
            m["spec"]["template"]["spec"]
            for m in manifests
            if m["kind"] in ("Deployment", "DaemonSet")
        ]
    )

    assert (False, False) == (CA in text, "ca.key" in text)


def test_operator_and_scheduler_are_told_the_mounted_files(render: Any, find: Any) -> None:
    """The operator's TLS variables and the scheduler's tlsConfig name files of the
    projected volumes, and the scheduler calls https."""
    manifests = render(SCHEDULER_ON)
    operator = pod_spec(manifests, find, "Deployment", "numatopo-operator")
    (container,) = operator["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "extender-tls"]
    files = {f"{mount['mountPath']}/{path}" for _, _, path in projected(operator, "extender-tls")}

    scheduler = pod_spec(manifests, find, "Deployment", "numatopo-scheduler")
    (scheduler_mount,) = [
        m for m in scheduler["containers"][0]["volumeMounts"] if m["name"] == "extender-tls"
    ]
    scheduler_files = {
        f"{scheduler_mount['mountPath']}/{path}"
        for _, _, path in projected(scheduler, "extender-tls")
    }
    config = yaml.safe_load(
        find(manifests, "ConfigMap", "numatopo-scheduler")["data"]["config.yaml"]
    )
    (extender,) = config["extenders"]

    assert files == {
        env["NUMATOPO_EXTENDER_TLS_CERT"],
        env["NUMATOPO_EXTENDER_TLS_KEY"],
        env["NUMATOPO_EXTENDER_CLIENT_CA"],
    }
    assert "NUMATOPO_EXTENDER_INSECURE_PLAIN_HTTP" not in env
    assert (True, scheduler_files, True) == (
        extender["enableHTTPS"],
        set(extender["tlsConfig"].values()),
        extender["urlPrefix"].startswith("https://"),
    )


def test_the_insecure_value_switches_tls_off_everywhere(render: Any, find: Any) -> None:
    manifests = render({"scheduler": {"enabled": True, "extender": {"insecurePlainHTTP": True}}})
    operator = pod_spec(manifests, find, "Deployment", "numatopo-operator")
    env = {e["name"]: e.get("value") for e in operator["containers"][0]["env"]}
    config = yaml.safe_load(
        find(manifests, "ConfigMap", "numatopo-scheduler")["data"]["config.yaml"]
    )
    (extender,) = config["extenders"]

    assert (
        {},
        "true",
        False,
        "tlsConfig" in extender,
        True,
        [],
    ) == (
        secrets(manifests),
        env["NUMATOPO_EXTENDER_INSECURE_PLAIN_HTTP"],
        extender["enableHTTPS"],
        False,
        extender["urlPrefix"].startswith("http://"),
        [k for k in env if k.startswith("NUMATOPO_EXTENDER_TLS")],
    )


def _chart_seeing(tmp_path: Path, cluster: dict[str, dict[str, Any]]) -> Any:
    """A copy of the chart whose one Secret `lookup` (the `numatopo.existingSecret` helper)
    answers from `cluster` (Secret name -> object) instead of an API server: offline
    Helm answers every lookup with nothing, so this is how an upgrade renders."""
    copy = tmp_path / "numatopo"
    shutil.copytree(CHART_DIR, copy)
    (copy / "cluster-secrets.json").write_text(json.dumps(cluster))
    helpers = copy / "templates" / "_helpers.tpl"
    text = helpers.read_text()
    lookup = '{{- $found := lookup "v1" "Secret" (index . 0).Release.Namespace (index . 1) }}'
    assert lookup in text, "the helper's lookup changed; change this test with it"
    answer = (
        '{{- $cluster := (index . 0).Files.Get "cluster-secrets.json" | fromJson }}\n'
        "{{- $found := index $cluster (index . 1) }}"
    )
    helpers.write_text(text.replace(lookup, answer))
    return helm.Chart.load(str(copy))


def _upgrade(chart: Any) -> list[dict[str, Any]]:
    return parse_manifests(
        chart.render(SCHEDULER_ON, name=RELEASE, namespace=NAMESPACE, is_upgrade=True)
    )


def test_an_upgrade_keeps_every_certificate(render: Any, tmp_path: Path) -> None:
    installed = {m["metadata"]["name"]: m for m in render(SCHEDULER_ON) if m["kind"] == "Secret"}

    with _chart_seeing(tmp_path, installed) as chart:
        manifests = _upgrade(chart)

    # The assignment signing key is kept through the same lookup as the certificates.
    assert {name: s["data"] for name, s in installed.items()} == {
        m["metadata"]["name"]: m["data"] for m in manifests if m["kind"] == "Secret"
    }
    assert SIGNING in installed


def test_a_deleted_client_secret_is_signed_again_by_the_kept_ca(
    render: Any, tmp_path: Path
) -> None:
    """Renewing the scheduler's certificate: delete its Secret and upgrade. The operator's
    certificate and both CAs stay; the new client certificate chains to the kept CA."""
    installed = {m["metadata"]["name"]: m for m in render(SCHEDULER_ON) if m["kind"] == "Secret"}
    del installed[CLIENT]

    with _chart_seeing(tmp_path, installed) as chart:
        upgraded = secrets(_upgrade(chart))

    assert (installed[SERVER]["data"], installed[CA]["data"]) == (upgraded[SERVER], upgraded[CA])
    assert signed_by(
        cert(upgraded[CLIENT], "tls.crt"), cert(installed[CA]["data"], "client-ca.crt")
    )


def test_a_fresh_render_makes_new_certificates(render: Any) -> None:
    """Without the lookup's answer (offline, or a first install) nothing is reused: the
    test above is what keeps them, not a fixed seed."""
    first, second = secrets(render(SCHEDULER_ON)), secrets(render(SCHEDULER_ON))

    assert first[SERVER]["tls.crt"] != second[SERVER]["tls.crt"]


@pytest.mark.parametrize(
    ("issuer_ref", "server_issuer"),
    [
        pytest.param({}, "numatopo-extender-server-ca", id="chart-ca"),
        pytest.param(
            {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"},
            "corp-ca",
            id="named-issuer",
        ),
    ],
)
def test_cert_manager_issues_both_certificates_and_the_client_ca_is_the_charts(
    render: Any, find: Any, issuer_ref: dict[str, str], server_issuer: str
) -> None:
    manifests = render(
        {
            "scheduler": {"enabled": True},
            "tls": {"source": "certManager", "certManager": {"issuerRef": issuer_ref}},
        }
    )
    server = find(manifests, "Certificate", SERVER)["spec"]
    client = find(manifests, "Certificate", CLIENT)["spec"]
    issuers = {m["metadata"]["name"] for m in manifests if m["kind"] == "Issuer"}

    assert {} == secrets(manifests)
    assert (server_issuer, "numatopo-extender-client-ca") == (
        server["issuerRef"]["name"],
        client["issuerRef"]["name"],
    )
    assert "numatopo-extender-client-ca" in issuers
    assert (["server auth", "digital signature"], ["client auth", "digital signature"]) == (
        server["usages"],
        client["usages"],
    )
    assert f"numatopo-operator.{NAMESPACE}.svc" in server["dnsNames"]
    operator = pod_spec(manifests, find, "Deployment", "numatopo-operator")
    assert (SERVER, "tls.key", "tls.key") in projected(operator, "extender-tls")


def test_existing_secrets_are_mounted_and_nothing_is_generated(render: Any, find: Any) -> None:
    manifests = render(
        {
            "scheduler": {"enabled": True},
            "tls": {
                "source": "existingSecrets",
                "existingSecrets": {"server": "op", "client": "ks"},
            },
        }
    )
    operator = pod_spec(manifests, find, "Deployment", "numatopo-operator")
    scheduler = pod_spec(manifests, find, "Deployment", "numatopo-scheduler")

    assert {} == secrets(manifests)
    assert {
        ("op", "tls.crt", "tls.crt"),
        ("op", "tls.key", "tls.key"),
        ("ks", "ca.crt", "client-ca.crt"),
    } == projected(operator, "extender-tls")
    assert {
        ("ks", "tls.crt", "tls.crt"),
        ("ks", "tls.key", "tls.key"),
        ("op", "ca.crt", "server-ca.crt"),
    } == projected(scheduler, "extender-tls")


def test_existing_secrets_need_their_names(chart: Any) -> None:
    with pytest.raises(helm.HelmRenderError, match=r"tls\.existingSecrets\.server is required"):
        chart.render({"tls": {"source": "existingSecrets"}}, name=RELEASE, namespace=NAMESPACE)


def _policy(manifests: list[dict[str, Any]], find: Any, name: str) -> dict[str, Any]:
    return find(manifests, "NetworkPolicy", name)["spec"]


def test_by_default_only_the_scheduler_reaches_the_extender_and_nobody_the_metrics(
    render: Any, find: Any
) -> None:
    manifests = render(SCHEDULER_ON)
    operator = _policy(manifests, find, "numatopo-operator")
    node = _policy(manifests, find, "numatopo-node")
    scheduler_labels = find(manifests, "Deployment", "numatopo-scheduler")["spec"]["template"][
        "metadata"
    ]["labels"]
    operator_labels = find(manifests, "Deployment", "numatopo-operator")["spec"]["template"][
        "metadata"
    ]["labels"]
    node_labels = find(manifests, "DaemonSet", "numatopo-node")["spec"]["template"]["metadata"][
        "labels"
    ]

    assert (operator_labels, node_labels) == (
        operator["podSelector"]["matchLabels"],
        node["podSelector"]["matchLabels"],
    )
    # `helm test`'s pod asks the extender as the scheduler does (templates/tests).
    selftest_labels = find(manifests, "Pod", "numatopo-selftest")["metadata"]["labels"]
    assert [
        {
            "ports": [{"port": 8888, "protocol": "TCP"}],
            "from": [
                {"podSelector": {"matchLabels": scheduler_labels}},
                {"podSelector": {"matchLabels": selftest_labels}},
            ],
        }
    ] == operator["ingress"]
    assert (["Ingress"], []) == (node["policyTypes"], node["ingress"])


def test_without_the_charts_scheduler_the_extender_port_is_closed(render: Any, find: Any) -> None:
    """A rule with no `from` would admit everyone; no rule at all admits no one."""
    assert [] == _policy(render(None), find, "numatopo-operator")["ingress"]


def test_metrics_peers_open_the_metrics_ports_only(render: Any, find: Any) -> None:
    monitoring = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}]
    manifests = render({"networkPolicy": {"metrics": {"from": monitoring}}})

    assert [{"ports": [{"port": 8080, "protocol": "TCP"}], "from": monitoring}] == _policy(
        manifests, find, "numatopo-operator"
    )["ingress"]
    assert [
        {
            "ports": [{"port": 9101, "protocol": "TCP"}, {"port": 9102, "protocol": "TCP"}],
            "from": monitoring,
        }
    ] == _policy(manifests, find, "numatopo-node")["ingress"]


def test_network_policies_can_be_turned_off(render: Any) -> None:
    manifests = render({"networkPolicy": {"enabled": False}})

    assert [] == [m for m in manifests if m["kind"] == "NetworkPolicy"]


def _host_paths(spec: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        v["name"]: (v["hostPath"]["path"], v["hostPath"].get("type", ""))
        for v in spec["volumes"]
        if "hostPath" in v
    }


@pytest.mark.parametrize(
    ("values", "kubelet_paths"),
    [
        pytest.param(
            None,
            {
                "host-kubelet-config": ("/var/lib/kubelet/config.yaml", "File"),
                "host-cpu-manager-state": ("/var/lib/kubelet/cpu_manager_state", "File"),
                "host-pod-resources": ("/var/lib/kubelet/pod-resources", "Directory"),
            },
            id="defaults",
        ),
        pytest.param(
            {"agent": {"steer": {"enabled": True}}},
            {
                "host-kubelet-config": ("/var/lib/kubelet/config.yaml", "File"),
                "host-cpu-manager-state": ("/var/lib/kubelet/cpu_manager_state", "File"),
                "host-pod-resources": ("/var/lib/kubelet/pod-resources", "Directory"),
                "host-device-plugins": ("/var/lib/kubelet/device-plugins", "Directory"),
            },
            id="steering-adds-device-plugins",
        ),
        pytest.param(
            {"agent": {"follow": {"enabled": False}}},
            {
                "host-kubelet-config": ("/var/lib/kubelet/config.yaml", "File"),
                "host-cpu-manager-state": ("/var/lib/kubelet/cpu_manager_state", "File"),
            },
            id="no-follow-no-pod-resources",
        ),
        pytest.param(
            {
                "node": {
                    "hostPaths": {
                        "kubeletDir": "/data/kubelet",
                        "kubeletConfig": "/etc/kubernetes/kubelet/config.json",
                    }
                }
            },
            {
                "host-kubelet-config": ("/etc/kubernetes/kubelet/config.json", "File"),
                "host-cpu-manager-state": ("/data/kubelet/cpu_manager_state", "File"),
                "host-pod-resources": ("/data/kubelet/pod-resources", "Directory"),
            },
            id="eks-like-paths",
        ),
    ],
)
def test_node_pods_mount_the_kubelet_files_they_read_and_not_its_directory(
    render: Any, find: Any, values: dict[str, Any] | None, kubelet_paths: dict[str, tuple[str, str]]
) -> None:
    manifests = render(values)
    spec = pod_spec(manifests, find, "DaemonSet", "numatopo-node")
    kubelet_dir = ((values or {}).get("node", {}).get("hostPaths", {})).get(
        "kubeletDir", "/var/lib/kubelet"
    )
    found = {
        name: path
        for name, path in _host_paths(spec).items()
        if path[0].startswith(kubelet_dir) or "kubelet" in path[0]
    }

    assert kubelet_paths == found
    # Each is mounted where the host has it, under /host: the processes' paths hold.
    mounts = {m["name"]: m["mountPath"] for c in spec["containers"] for m in c["volumeMounts"]}
    assert {name: f"/host{path}" for name, (path, _) in kubelet_paths.items()} == {
        name: mounts[name] for name in kubelet_paths
    }


def test_node_processes_parse_their_rendered_flags(render: Any, find: Any) -> None:
    """The exporter's `--metrics-address` (and every other rendered flag) is one its
    parser knows, with the values' address."""
    from numatopo_cli.main import build_parser

    spec = pod_spec(
        render({"exporter": {"metricsAddress": "127.0.0.1"}}), find, "DaemonSet", "numatopo-node"
    )
    parsed = {
        c["name"]: build_parser().parse_args([a.replace("$(NODE_NAME)", "n") for a in c["args"]])
        for c in spec["containers"]
    }

    assert ("127.0.0.1", "0.0.0.0") == (
        parsed["exporter"].metrics_address,
        parsed["agent"].metrics_address,
    )
    assert isinstance(parsed["exporter"], argparse.Namespace)
