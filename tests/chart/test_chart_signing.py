"""The assignment-signing key from a Secret of the user's (`signing.source: existingSecret`),
rendered by the real Helm engine without any `lookup`: what the operator mounts, what the
node agents trust, what the chart refuses, and a key made with the documented openssl
commands signing through the operator's code and verifying in the agent's."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

helm = pytest.importorskip("helm_python")

from numatopo_cli.main import build_parser  # noqa: E402
from numatopo_engine.annotations import Assignment, ContainerAssignment  # noqa: E402
from numatopo_engine.cpuset import CPUSet  # noqa: E402
from numatopo_engine.signing import PodIdentity, Signer  # noqa: E402
from numatopo_exporter.agent.pod_view import PodView as AgentPodView  # noqa: E402
from numatopo_exporter.agent.pods import unsigned  # noqa: E402
from numatopo_exporter.agent.serve import TRUSTED_KEYS_ENV, trusted_keys  # noqa: E402
from numatopo_operator.pod_view import PodView as OperatorPodView  # noqa: E402
from numatopo_operator.settings import from_env  # noqa: E402
from numatopo_operator.signing_keys import load_keys  # noqa: E402

from .conftest import NAMESPACE, RELEASE  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OPERATOR, NODE = "numatopo-operator", "numatopo-node"
CONFIGMAP, CHART_SECRET = "numatopo-signing-key", "numatopo-signing"
# docs/operations.md, "Security": how a user makes the key and its public half.
MAKE_KEY = "openssl genpkey -algorithm ed25519 -out key.pem"
PUBLIC_KEY = "openssl pkey -in key.pem -pubout -out public.pem"
CERTIFICATE = (
    "openssl req -x509 -new -key key.pem -subj /CN=numatopo-signing -days 36500 -out public.pem"
)


def _openssl(directory: Path, *commands: str) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl binary")
    for command in commands:
        subprocess.run(command.split(), cwd=directory, check=True, capture_output=True)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two keys as the docs make them (`new/`, `old/`), each with public.pem; `old/` with
    a certificate instead of a bare public key, the form the chart's own key has; and an
    RSA one (`rsa/`)."""
    made = {}
    for name, public in (("new", PUBLIC_KEY), ("old", CERTIFICATE)):
        directory = tmp_path_factory.mktemp(name)
        _openssl(directory, MAKE_KEY, public)
        made[name] = directory
    # Not Ed25519: what the chart must refuse.
    made["rsa"] = tmp_path_factory.mktemp("rsa")
    _openssl(made["rsa"], "openssl genpkey -algorithm rsa -out key.pem", PUBLIC_KEY)
    return made


def _values(secret: str = "corp-signing", trusted: str = "") -> dict[str, Any]:
    return {
        "signing": {"source": "existingSecret", "existingSecret": secret, "trustedKeys": trusted}
    }


def _pem(directory: Path) -> str:
    return (directory / "public.pem").read_text()


def _operator(manifests: list[dict[str, Any]], find: Any) -> dict[str, Any]:
    spec: dict[str, Any] = find(manifests, "Deployment", OPERATOR)["spec"]["template"]["spec"]
    return spec


def test_the_docs_give_the_commands_these_tests_run() -> None:
    operations = (REPO / "docs" / "operations.md").read_text()

    assert [] == [c for c in (MAKE_KEY, PUBLIC_KEY, CERTIFICATE) if c not in operations]


def test_an_existing_secret_is_mounted_and_its_public_keys_are_published(
    render: Any, find: Any, keys: dict[str, Path]
) -> None:
    manifests = render(_values(trusted=_pem(keys["new"]) + _pem(keys["old"])))
    published = find(manifests, "ConfigMap", CONFIGMAP)["data"]
    operator = _operator(manifests, find)
    (volume,) = [v for v in operator["volumes"] if v["name"] == "signing-key"]
    node = find(manifests, "DaemonSet", NODE)["spec"]["template"]["spec"]
    (agent,) = [c for c in node["containers"] if c["name"] == "agent"]
    (agent_keys,) = [e for e in agent["env"] if e["name"] == TRUSTED_KEYS_ENV]

    # No key of the chart's own, so nothing differs between two offline renders.
    assert [] == [
        m["metadata"]["name"]
        for m in manifests
        if m["kind"] == "Secret" and not m["metadata"]["name"].startswith("numatopo-extender-")
    ]
    assert {"secretName": "corp-signing", "items": [{"key": "key.pem", "path": "key.pem"}]} == {
        k: volume["secret"][k] for k in ("secretName", "items")
    }
    assert (_pem(keys["new"]), _pem(keys["old"]), _pem(keys["new"]) + _pem(keys["old"])) == (
        published["current.pem"],
        published["previous.pem"],
        published["trusted.pem"],
    )
    assert {"name": CONFIGMAP, "key": "trusted.pem"} == agent_keys["valueFrom"]["configMapKeyRef"]


def test_the_gitops_value_set_renders_the_same_every_time(render: Any) -> None:
    """What a GitOps tool renders offline at every sync (values/gitops.yaml: the signing
    key and the certificates from Secrets of the user's): the same objects, or each sync
    would roll the pods or, with the chart's own key, replace the key."""
    values = yaml.safe_load((Path(__file__).parent / "values" / "gitops.yaml").read_text())

    assert render(values) == render(values)


def test_new_trusted_keys_restart_the_operator_and_the_agents(
    render: Any, find: Any, keys: dict[str, Path]
) -> None:
    """Both read the keys only at start: a rotation's new value must roll them."""

    def checksums(values: dict[str, Any] | None) -> list[str | None]:
        manifests = render(values)
        return [
            find(manifests, kind, name)["spec"]["template"]["metadata"]
            .get("annotations", {})
            .get("checksum/signing-trusted-keys")
            for kind, name in (("Deployment", OPERATOR), ("DaemonSet", NODE))
        ]

    one = checksums(_values(trusted=_pem(keys["old"])))
    both = checksums(_values(trusted=_pem(keys["old"]) + _pem(keys["new"])))

    assert None not in one + both
    assert (one[0], both[0]) == (one[1], both[1])
    assert one[0] != both[0]
    assert [None, None] == checksums(None)


@pytest.mark.parametrize(
    ("values", "refusal"),
    [
        pytest.param(_values(), r"signing\.trustedKeys is required", id="no-public-half"),
        pytest.param(
            _values(secret="", trusted="@new"),
            r"signing\.existingSecret is required",
            id="no-secret",
        ),
        pytest.param(
            _values(trusted="MCowBQYDK2VwAyEA"), r"holds something besides PEM blocks", id="not-pem"
        ),
        pytest.param(
            _values(trusted="@new\nand a note"),
            r"holds something besides PEM blocks",
            id="trailing-text",
        ),
        pytest.param(
            _values(trusted="@private"),
            r"a PRIVATE KEY block is neither a PUBLIC KEY nor a CERTIFICATE",
            id="private-key",
        ),
        pytest.param(
            _values(trusted="@new@rsa"),
            r"PEM block 2 \(PUBLIC KEY\) holds no Ed25519 public key",
            id="rsa",
        ),
        pytest.param(
            {"signing": {"existingSecret": "corp-signing"}},
            r"take effect only with signing\.source=existingSecret",
            id="secret-without-source",
        ),
    ],
)
def test_the_chart_refuses_a_key_it_cannot_publish(
    chart: Any, keys: dict[str, Path], values: dict[str, Any], refusal: str
) -> None:
    signing = values["signing"]
    if signing.get("trustedKeys"):
        signing = {**signing, "trustedKeys": _expand(signing["trustedKeys"], keys)}

    with pytest.raises(helm.HelmRenderError, match=refusal):
        chart.render({**values, "signing": signing}, name=RELEASE, namespace=NAMESPACE)


def _expand(text: str, keys: dict[str, Path]) -> str:
    """`@new` the new public key, `@private` its private key, `@rsa` an RSA public key."""
    return (
        text.replace("@new", _pem(keys["new"]))
        .replace("@private", (keys["new"] / "key.pem").read_text())
        .replace("@rsa", _pem(keys["rsa"]))
    )


POD = {"metadata": {"name": "train-0", "namespace": "ml", "uid": "5e1f-0001"}}
ASSIGNMENT = Assignment(
    node="gpu-07",
    numa_nodes=[1],
    containers={"main": ContainerAssignment(cpus=CPUSet({8, 9}), mems=CPUSet({1}))},
    seq=3,
)


def _mounted(
    manifests: list[dict[str, Any]], find: Any, root: Path, secrets: dict[str, dict[str, bytes]]
) -> dict[str, str]:
    """The operator container's environment with its volumes laid out under `root` as the
    kubelet would: the Secret items from `secrets` (the cluster's), the ConfigMap items
    from the render. Paths in the environment point into `root`."""
    spec = _operator(manifests, find)
    (container,) = [c for c in spec["containers"] if c["name"] == "operator"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    moved: dict[str, str] = {}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "secret" in volume:
            data = secrets[volume["secret"]["secretName"]]
        elif "configMap" in volume:
            configmap = find(manifests, "ConfigMap", volume["configMap"]["name"])["data"]
            data = {key: text.encode() for key, text in configmap.items()}
        else:
            continue
        target = root / mount["mountPath"].lstrip("/")
        target.mkdir(parents=True)
        for item in volume.get("secret", volume.get("configMap", {}))["items"]:
            (target / item["path"]).write_bytes(data[item["key"]])
        moved[mount["mountPath"]] = str(target)
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    for name, value in env.items():
        parent = str(PurePosixPath(value).parent)
        if parent in moved:
            env[name] = f"{moved[parent]}/{PurePosixPath(value).name}"
    return env


def _agent_args(manifests: list[dict[str, Any]], find: Any) -> argparse.Namespace:
    node = find(manifests, "DaemonSet", NODE)["spec"]["template"]["spec"]
    (agent,) = [c for c in node["containers"] if c["name"] == "agent"]
    return build_parser().parse_args([a.replace("$(NODE_NAME)", "n") for a in agent["args"]])


def test_a_key_made_as_documented_signs_and_the_agents_accept_it_across_a_rotation(
    render: Any,
    find: Any,
    keys: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mid-rotation (docs/operations.md): the Secret holds the new key, trustedKeys the new
    public key then the old certificate. The operator signs with the mounted key.pem;
    an agent given the rendered trusted.pem (as its DaemonSet passes it) enforces that
    assignment, and still one the old key signed before the rotation; a copy on another
    pod it refuses. A chart-generated key rendered offline is trusted by nobody."""
    manifests = render(_values(trusted=_pem(keys["new"]) + _pem(keys["old"])))
    cluster = {"corp-signing": {"key.pem": (keys["new"] / "key.pem").read_bytes()}}
    signer, operator_verifier = load_keys(from_env(_mounted(manifests, find, tmp_path, cluster)))
    pod = OperatorPodView.of(POD)
    written = signer.sign(ASSIGNMENT, PodIdentity(pod.uid, pod.key))
    before_rotation = Signer.from_pem((keys["old"] / "key.pem").read_bytes()).sign(
        ASSIGNMENT, PodIdentity(pod.uid, pod.key)
    )
    published = find(manifests, "ConfigMap", CONFIGMAP)["data"]["trusted.pem"]
    monkeypatch.setenv(TRUSTED_KEYS_ENV, published)
    agent = trusted_keys(_agent_args(manifests, find))
    other = AgentPodView.of({"metadata": {**POD["metadata"], "uid": "5e1f-0002"}})
    offline = find(render(None), "ConfigMap", CONFIGMAP)["data"]["trusted.pem"]
    monkeypatch.setenv(TRUSTED_KEYS_ENV, offline)
    regenerated = trusted_keys(_agent_args(manifests, find))

    assert ("", "") == (
        unsigned(AgentPodView.of(POD), written, agent),
        unsigned(AgentPodView.of(POD), before_rotation, agent),
    )
    assert ("", "") == (
        operator_verifier.problem(written, PodIdentity(pod.uid, pod.key)),
        operator_verifier.problem(before_rotation, PodIdentity(pod.uid, pod.key)),
    )
    assert "does not match" in unsigned(other, written, agent)
    assert "not one the numatopo operator signs with" in unsigned(
        AgentPodView.of(POD), written, regenerated
    )
