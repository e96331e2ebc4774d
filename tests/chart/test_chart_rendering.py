"""The chart lints, renders with every value set, and the API's schemas accept the result."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

jsonschema = pytest.importorskip("jsonschema")
kubernetes_validate = pytest.importorskip("kubernetes_validate")
helm = pytest.importorskip("helm_python")

from packaging.version import Version  # noqa: E402  (only after the skips above)

from numatopo_operator.leadership import ACTIVE_LABEL, ACTIVE_VALUE  # noqa: E402

CHART_DIR = Path(__file__).resolve().parents[2] / "helm" / "numatopo"
VALUES_DIR = Path(__file__).resolve().parent / "values"
NAMESPACE = "numatopo-system"

# Rendered kinds that no Kubernetes release defines; their shape is checked below.
NOT_IN_KUBERNETES = {("monitoring.coreos.com/v1", "ServiceMonitor")}

# Fields of k8s.io/kube-scheduler/config/v1 Extender, as KubeSchedulerConfiguration
# decodes them strictly: a misspelt key would stop the scheduler at start.
EXTENDER_FIELDS = {
    "urlPrefix",
    "filterVerb",
    "preemptVerb",
    "prioritizeVerb",
    "weight",
    "bindVerb",
    "enableHTTPS",
    "tlsConfig",
    "httpTimeout",
    "nodeCacheCapable",
    "managedResources",
    "ignorable",
}


def newest_minor_versions(count: int) -> list[str]:
    """The `count` newest Kubernetes minor versions kubernetes-validate has schemas for."""
    minors = {re.sub(r"^(\d+\.\d+).*", r"\1", v) for v in kubernetes_validate.utils.all_versions()}
    return sorted(minors, key=Version)[-count:]


KUBE_VERSIONS = newest_minor_versions(2)


def load_values(name: str | None) -> dict[str, Any] | None:
    return None if name is None else yaml.safe_load((VALUES_DIR / f"{name}.yaml").read_text())


VALUE_SETS = [pytest.param(None, id="defaults")] + [
    pytest.param(path.stem, id=path.stem) for path in sorted(VALUES_DIR.glob("*.yaml"))
]


def chart_crds(chart: Any) -> list[dict[str, Any]]:
    """The CRDs in the chart's own crds/ folder, which Helm applies first (none since the
    kopf peering CRDs went; a CRD added there is validated with the templates)."""
    return [d for crd in chart.crds for d in yaml.safe_load_all(crd["data"]) if d]


def custom_resource_schemas(crds: list[dict[str, Any]]) -> dict[tuple[str, str], Any]:
    """(apiVersion, kind) -> the openAPIV3Schema a CRD declares for it."""
    return {
        (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"]): version[
            "schema"
        ]["openAPIV3Schema"]
        for crd in crds
        if crd["kind"] == "CustomResourceDefinition"
        for version in crd["spec"]["versions"]
    }


def validation_problems(manifest: dict[str, Any], kube_version: str, custom: Any) -> list[str]:
    """What the API server would refuse in `manifest`: its Kubernetes schema, or for a
    custom resource the schema of its CRD."""
    label = f"{manifest['kind']}/{manifest['metadata']['name']}"
    schema = custom.get((manifest["apiVersion"], manifest["kind"]))
    if schema is not None:
        errors = jsonschema.Draft7Validator(schema).iter_errors(manifest)
        return [f"{label} {'/'.join(map(str, e.path))}: {e.message}" for e in errors]
    try:
        kubernetes_validate.validate(manifest, kube_version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{label} {'/'.join(map(str, exc.path))}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError as exc:
        return [exc.message]
    return []


@pytest.mark.parametrize("values_name", VALUE_SETS)
def test_chart_lints_without_findings(values_name: str | None) -> None:
    """`helm lint --strict` (warnings count as errors) finds nothing."""
    report = helm.lint(
        str(CHART_DIR),
        load_values(values_name),
        strict=True,
        namespace=NAMESPACE,
        kube_version=f"v{KUBE_VERSIONS[-1]}.0",
    )
    findings = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]

    assert [] == findings


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values_name", VALUE_SETS)
def test_every_manifest_is_valid_for_kubernetes(
    chart: Any, render: Any, values_name: str | None, kube_version: str
) -> None:
    """Each rendered object (and each CRD of crds/) passes the strict OpenAPI schema of
    its kind, custom resources the schema of their CRD."""
    manifests = render(load_values(values_name)) + chart_crds(chart)
    custom = custom_resource_schemas(manifests)
    problems = [
        problem
        for manifest in manifests
        if (manifest["apiVersion"], manifest["kind"]) not in NOT_IN_KUBERNETES
        for problem in validation_problems(manifest, kube_version, custom)
    ]

    assert [] == problems


@pytest.mark.parametrize(
    ("values_name", "expected"),
    [
        pytest.param(
            None,
            {
                "ClusterRole",
                "ClusterRoleBinding",
                "ConfigMap",
                "CustomResourceDefinition",
                "DaemonSet",
                "Deployment",
                "NetworkPolicy",
                "Pod",
                "Role",
                "RoleBinding",
                "Secret",
                "Service",
                "ServiceAccount",
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding",
            },
            id="defaults-have-no-scheduler-and-no-servicemonitor",
        ),
        pytest.param(
            "everything-on",
            {
                "ClusterRole",
                "ClusterRoleBinding",
                "ConfigMap",
                "CustomResourceDefinition",
                "DaemonSet",
                "Deployment",
                "NetworkPolicy",
                "Pod",
                "PodDisruptionBudget",
                "Role",
                "RoleBinding",
                "Secret",
                "Service",
                "ServiceAccount",
                "ServiceMonitor",
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding",
            },
            id="everything-on-adds-scheduler-lease-role-servicemonitors-and-pdb",
        ),
        pytest.param(
            "namespaced-operator",
            {
                "ClusterRole",
                "ClusterRoleBinding",
                "ConfigMap",
                "CustomResourceDefinition",
                "DaemonSet",
                "Deployment",
                "NetworkPolicy",
                "Pod",
                "Role",
                "RoleBinding",
                "Secret",
                "Service",
                "ServiceAccount",
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding",
            },
            id="namespaced-operator-has-its-lease-role-and-may-label-its-own-pod",
        ),
    ],
)
def test_rendered_kinds(render: Any, values_name: str | None, expected: set[str]) -> None:
    actual = {m["kind"] for m in render(load_values(values_name))}

    assert expected == actual


def _services_by_labels(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == "Service"]


def test_servicemonitors_scrape_named_service_ports(render: Any) -> None:
    """Each ServiceMonitor endpoint names a port of a Service its selector matches."""
    manifests = render(load_values("everything-on"))
    missing = []
    for monitor in (m for m in manifests if m["kind"] == "ServiceMonitor"):
        wanted = monitor["spec"]["selector"]["matchLabels"]
        services = [
            s
            for s in _services_by_labels(manifests)
            if wanted.items() <= s["metadata"]["labels"].items()
        ]
        ports = {p["name"] for s in services for p in s["spec"]["ports"]}
        missing += [
            f"{monitor['metadata']['name']}:{e['port']}"
            for e in monitor["spec"]["endpoints"]
            if e["port"] not in ports
        ]

    assert [] == missing


def test_scheduler_profile_calls_the_operator_extender(render: Any, find: Any) -> None:
    """The second scheduler's profile reaches the operator Service's extender port."""
    manifests = render({"scheduler": {"enabled": True}})
    config = yaml.safe_load(
        find(manifests, "ConfigMap", "numatopo-scheduler")["data"]["config.yaml"]
    )
    service = find(manifests, "Service", "numatopo-operator")
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "extender")
    (extender,) = config["extenders"]

    assert {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "profiles": [{"schedulerName": "numatopo-scheduler"}],
        "leaderElect": False,
        "urlPrefix": f"https://numatopo-operator.{NAMESPACE}.svc:{port}",
        "verbs": ("filter", "prioritize", "bind"),
        "nodeCacheCapable": True,
        "ignorable": False,
        "unknown fields": set(),
    } == {
        "apiVersion": config["apiVersion"],
        "profiles": config["profiles"],
        "leaderElect": config["leaderElection"]["leaderElect"],
        "urlPrefix": extender["urlPrefix"],
        "verbs": (extender["filterVerb"], extender["prioritizeVerb"], extender["bindVerb"]),
        "nodeCacheCapable": extender["nodeCacheCapable"],
        "ignorable": extender["ignorable"],
        "unknown fields": set(extender) - EXTENDER_FIELDS,
    }


def test_scheduler_image_follows_the_cluster_minor_version(render: Any, find: Any) -> None:
    """Without a tag, the scheduler image is `v<major>.<minor>.0` of the target cluster."""
    manifests = render({"scheduler": {"enabled": True}})
    deployment = find(manifests, "Deployment", "numatopo-scheduler")
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]

    assert re.fullmatch(r"registry\.k8s\.io/kube-scheduler:v1\.\d+\.0", image), image


def _host_mounts(manifests: list[dict[str, Any]], find: Any) -> dict[tuple[str, str], bool]:
    """(container, hostPath volume) -> read-only, in the node DaemonSet."""
    pod = find(manifests, "DaemonSet", "numatopo-node")["spec"]["template"]["spec"]
    host_volumes = {v["name"] for v in pod["volumes"] if "hostPath" in v}
    return {
        (c["name"], m["name"]): bool(m.get("readOnly"))
        for c in pod["containers"]
        for m in c["volumeMounts"]
        if m["name"] in host_volumes
    }


@pytest.mark.parametrize(
    ("values_name", "expected"),
    [
        pytest.param(None, {("agent", "host-cgroup")}, id="defaults-only-the-cgroup-tree"),
        pytest.param(
            "everything-on",
            {
                ("agent", "host-cgroup"),
                ("exporter", "host-dev"),
                ("agent", "host-device-plugins"),
                ("agent", "host-steering"),
            },
            id="driver-mounts-add-dev-for-nvml-steering-its-sockets",
        ),
        pytest.param("namespaced-operator", set(), id="observe-only-writes-nothing"),
    ],
)
def test_writable_host_mounts(
    render: Any, find: Any, values_name: str | None, expected: set[tuple[str, str]]
) -> None:
    mounts = _host_mounts(render(load_values(values_name)), find)

    assert expected == {key for key, read_only in mounts.items() if not read_only}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param({"operator": {"replicas": 1}}, {}, id="one-replica-standalone"),
        pytest.param(
            None,
            {
                "NUMATOPO_LEASE_NAME": "numatopo-operator",
                "NUMATOPO_LEASE_DURATION_SECONDS": "4",
                "NUMATOPO_RENEW_DEADLINE_SECONDS": "3",
                "NUMATOPO_RETRY_PERIOD_SECONDS": "1",
            },
            id="two-replicas-compete-for-a-lease",
        ),
        pytest.param(
            {"operator": {"lease": {"name": "ntp", "durationSeconds": 10}}},
            {
                "NUMATOPO_LEASE_NAME": "ntp",
                "NUMATOPO_LEASE_DURATION_SECONDS": "10",
                "NUMATOPO_RENEW_DEADLINE_SECONDS": "3",
                "NUMATOPO_RETRY_PERIOD_SECONDS": "1",
            },
            id="lease-values-reach-the-operator",
        ),
    ],
)
def test_lease_settings_reach_the_operator_when_replicas_compete(
    render: Any, find: Any, values: dict[str, Any] | None, expected: dict[str, str]
) -> None:
    """More than one replica: each is told the Lease and its durations; none renders a
    kopf peering object any more (the Lease decides)."""
    manifests = render(values)
    container = find(manifests, "Deployment", "numatopo-operator")["spec"]["template"]["spec"][
        "containers"
    ][0]
    lease_env = {
        e["name"]: e["value"]
        for e in container["env"]
        if e["name"].startswith("NUMATOPO_LEASE")
        or e["name"] in ("NUMATOPO_RENEW_DEADLINE_SECONDS", "NUMATOPO_RETRY_PERIOD_SECONDS")
    }

    assert expected == lease_env
    assert [] == [m for m in manifests if m["apiVersion"] == "kopf.dev/v1"]


def test_operator_probes_and_rollout(render: Any, find: Any) -> None:
    """Every replica turns Ready, so the Deployment rolls one replica at a time."""
    deployment = find(render(None), "Deployment", "numatopo-operator")
    container = deployment["spec"]["template"]["spec"]["containers"][0]

    assert (
        "/healthz",
        "/readyz",
        {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
        2,
    ) == (
        container["livenessProbe"]["httpGet"]["path"],
        container["readinessProbe"]["httpGet"]["path"],
        deployment["spec"]["strategy"],
        deployment["spec"]["replicas"],
    )


def test_extender_service_selects_the_active_replica_metrics_service_all(
    render: Any, find: Any
) -> None:
    """The extender Service asks for the label the active replica sets on its own pod (the
    operator's constant, the pod found through the downward API); metrics come from all."""
    manifests = render(None)
    pod_template = find(manifests, "Deployment", "numatopo-operator")["spec"]["template"]
    env = {e["name"]: e.get("valueFrom") for e in pod_template["spec"]["containers"][0]["env"]}
    extender = find(manifests, "Service", "numatopo-operator")["spec"]
    metrics = find(manifests, "Service", "numatopo-operator-metrics")["spec"]

    assert {**pod_template["metadata"]["labels"], ACTIVE_LABEL: ACTIVE_VALUE} == extender[
        "selector"
    ]
    assert pod_template["metadata"]["labels"] == metrics["selector"]
    assert (["extender"], ["metrics"]) == (
        [p["name"] for p in extender["ports"]],
        [p["name"] for p in metrics["ports"]],
    )
    assert (
        {"fieldRef": {"fieldPath": "metadata.name"}},
        {"fieldRef": {"fieldPath": "metadata.namespace"}},
    ) == (env["NUMATOPO_POD_NAME"], env["NUMATOPO_POD_NAMESPACE"])


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(None, [], id="off-by-default"),
        pytest.param(
            {"operator": {"podDisruptionBudget": {"enabled": True}}},
            [(1, True)],
            id="drains-keep-one-replica",
        ),
    ],
)
def test_operator_pod_disruption_budget(
    render: Any, find: Any, values: dict[str, Any] | None, expected: list[tuple[int, bool]]
) -> None:
    """Optional; when on, it covers exactly the operator pods."""
    manifests = render(values)
    pod_labels = find(manifests, "Deployment", "numatopo-operator")["spec"]["template"]["metadata"][
        "labels"
    ]

    actual = [
        (m["spec"]["minAvailable"], m["spec"]["selector"]["matchLabels"] == pod_labels)
        for m in manifests
        if m["kind"] == "PodDisruptionBudget"
    ]

    assert expected == actual


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param({"operator": {"replicas": "2"}}, "/operator/replicas", id="replicas-string"),
        pytest.param({"operator": {"replicas": 0}}, "/operator/replicas", id="replicas-zero"),
        pytest.param({"operator": {"extenderPort": 70000}}, "/operator/extenderPort", id="port"),
        pytest.param({"operator": {"replica": 2}}, "replica", id="misspelt-key"),
        pytest.param(
            {"operator": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}},
            "/operator/rollingUpdate/maxUnavailable",
            id="rollout-that-can-never-progress",
        ),
        pytest.param(
            {"operator": {"podDisruptionBudget": {"enabled": "yes"}}},
            "/operator/podDisruptionBudget/enabled",
            id="pdb-enabled-as-string",
        ),
        pytest.param({"node": {"gpu": {"mode": "cuda"}}}, "/node/gpu/mode", id="gpu-mode-enum"),
        pytest.param({"crds": {"enabled": "yes"}}, "/crds/enabled", id="bool-as-string"),
        pytest.param({"resourceNames": {"gpu": []}}, "/resourceNames/gpu", id="no-gpu-resource"),
        pytest.param(
            {"resourceNames": {"nic": ["rdma"]}}, "/resourceNames/nic/0", id="resource-no-domain"
        ),
        pytest.param(
            {"node": {"hostPaths": {"sys": "sys"}}}, "/node/hostPaths/sys", id="relative-host-path"
        ),
        pytest.param(
            {"scheduler": {"extender": {"httpTimeout": "10"}}},
            "/scheduler/extender/httpTimeout",
            id="duration-without-unit",
        ),
        pytest.param(
            {"admission": {"assignmentGuard": {"validationActions": ["Block"]}}},
            "/admission/assignmentGuard/validationActions/0",
            id="unknown-validation-action",
        ),
        pytest.param(
            # The one switch for both guards' actions before they had their own: an
            # upgrade with it is told, not silently given Deny everywhere.
            {"admission": {"validationActions": ["Warn"]}},
            "validationActions",
            id="pre-split-validation-actions",
        ),
        pytest.param(
            # The agent has no dry-run mode: the value once rendered `--dry-run`, which the
            # agent refused, and the DaemonSet crash-looped. Now install refuses it.
            {"agent": {"dryRun": True}},
            "dryRun",
            id="agent-dry-run-does-not-exist",
        ),
    ],
)
def test_schema_rejects_wrong_values(chart: Any, values: dict[str, Any], expected: str) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        chart.render(values, name="numatopo", namespace=NAMESPACE)

    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(
            {"scheduler": {"enabled": True}, "operator": {"enabled": False}},
            "scheduler.enabled needs operator.enabled",
            id="scheduler-without-operator",
        ),
        pytest.param(
            {"admission": {"nodeScopeGuard": {"validationActions": ["Deny", "Warn"]}}},
            "admission.nodeScopeGuard.validationActions: Deny and Warn cannot be combined",
            id="deny-with-warn",
        ),
        pytest.param(
            {"scheduler": {"enabled": True, "name": "gpu-scheduler"}},
            "must be equal",
            id="scheduler-name-mismatch",
        ),
        pytest.param(
            {"exporter": {"metricsPort": 9000}, "agent": {"metricsPort": 9000}},
            "must differ",
            id="node-ports-clash",
        ),
        pytest.param(
            {"operator": {"replicas": 1, "podDisruptionBudget": {"enabled": True}}},
            "no node drain could ever evict an operator pod",
            id="budget-as-large-as-the-replicas",
        ),
        pytest.param(
            {"operator": {"serviceAccount": {"create": False}}},
            "operator.serviceAccount.name is required",
            id="external-account-without-name",
        ),
    ],
)
def test_impossible_combinations_fail_with_a_message(
    chart: Any, values: dict[str, Any], expected: str
) -> None:
    with pytest.raises(helm.HelmRenderError) as caught:
        chart.render(values, name="numatopo", namespace=NAMESPACE)

    assert expected in str(caught.value)


def _agent_args(manifests: list[dict[str, Any]], find: Any) -> list[str]:
    pod = find(manifests, "DaemonSet", "numatopo-node")["spec"]["template"]["spec"]
    return next(c["args"] for c in pod["containers"] if c["name"] == "agent")


def test_steering_turns_on_with_its_sockets_and_flags(render: Any, find: Any) -> None:
    """Steering is off by default; on, the agent gets the kubelet's device-plugin folder
    and numatopo's Registration folder writable, and flags the agent's parser accepts."""
    import argparse

    from numatopo_exporter.agent.serve import add_arguments

    default = render(None)
    assert not any(a.startswith("--steer-") for a in _agent_args(default, find))
    assert ("agent", "host-device-plugins") not in _host_mounts(default, find)

    steered = render({"agent": {"steer": {"enabled": True, "answerDeadlineSeconds": 0.3}}})
    mounts = _host_mounts(steered, find)
    assert mounts[("agent", "host-device-plugins")] is False
    assert mounts[("agent", "host-steering")] is False
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        [a.replace("$(NODE_NAME)", "n") for a in _agent_args(steered, find)[1:]]
    )
    assert args.steer_resource == "nvidia.com/gpu"
    assert str(args.steer_kubelet_dir) == "/host/var/lib/kubelet/device-plugins"
    assert str(args.steer_socket_dir) == "/host/var/lib/numatopo/device-plugins"
    assert args.steer_answer_deadline_seconds == 0.3
    assert str(args.pod_resources_socket) == "/host/var/lib/kubelet/pod-resources/kubelet.sock"


def test_follow_off_leaves_gpus_unverified(render: Any, find: Any) -> None:
    import argparse

    from numatopo_exporter.agent.serve import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = _agent_args(render({"agent": {"follow": {"enabled": False}}}), find)
    parsed = parser.parse_args([a.replace("$(NODE_NAME)", "n") for a in args[1:]])
    assert parsed.pod_resources_socket is None
