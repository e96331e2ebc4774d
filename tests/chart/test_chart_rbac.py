"""Least privilege: the chart grants each ServiceAccount exactly the API calls its code makes.

Two halves meet here. Each helper of the one client layer (`numatopo_kube.KubeClient`)
declares the (API group, resource, verb) it needs (`numatopo_kube.API_CALLS`), and
`collect_helper_calls` reads the source of each component (AST, no import side effects)
for the helpers it calls: the operator's for its account, the node processes' (exporter
and agent) for the node pods' account. `CODE_CALLS` is the same list written down by
hand, so that a new helper call fails the test until it is declared (and then the RBAC
test shows what to grant). `FRAMEWORK_CALLS` lists what kopf does on the operator's
behalf, which no line of our code shows. The rendered Roles must allow all of it, and nothing else.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from numatopo_kube import API_CALLS

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "numatopo-system"

Permission = tuple[str, str, str]  # (API group, resource[/subresource], verb)

# -- what the code calls, written down ---------------------------------------------------

HELPER = "numatopo_kube:KubeClient"

CODE_CALLS: dict[str, dict[str, set[Permission]]] = {
    # The `numatopo_kube.KubeClient` helpers the operator's modules call.
    "operator": {
        f"{HELPER}.get_pod": {("", "pods", "get")},
        # The extender's bind checks the node's taints, labels and cordon (bind_guard).
        f"{HELPER}.get_node": {("", "nodes", "get")},
        f"{HELPER}.list_pods": {("", "pods", "list")},
        # pod_feed: the operator's own pod watch; cluster_feed: its own list and watch
        # of Numatopologies, and of Nodes when groups are on.
        f"{HELPER}.watch_pods": {("", "pods", "watch")},
        f"{HELPER}.list_numatopologies": {("numatopo.io", "numatopologies", "list")},
        f"{HELPER}.watch_numatopologies": {("numatopo.io", "numatopologies", "watch")},
        f"{HELPER}.list_nodes": {("", "nodes", "list")},
        f"{HELPER}.watch_nodes": {("", "nodes", "watch")},
        f"{HELPER}.patch_pod_annotations": {("", "pods", "patch")},
        f"{HELPER}.patch_pod_labels": {("", "pods", "patch")},
        f"{HELPER}.create_binding": {("", "pods/binding", "create")},
        f"{HELPER}.post_event": {("", "events", "create")},
        f"{HELPER}.get_lease": {("coordination.k8s.io", "leases", "get")},
        f"{HELPER}.create_lease": {("coordination.k8s.io", "leases", "create")},
        f"{HELPER}.patch_lease": {("coordination.k8s.io", "leases", "patch")},
        f"{HELPER}.patch_numatopology_status": {("numatopo.io", "numatopologies/status", "patch")},
        # exports.py, one format each (server-side apply; delete; list at a term's start).
        f"{HELPER}.apply_node_resource_topology": {
            ("topology.node.k8s.io", "noderesourcetopologies", "patch"),
            ("topology.node.k8s.io", "noderesourcetopologies", "create"),
        },
        f"{HELPER}.delete_node_resource_topology": {
            ("topology.node.k8s.io", "noderesourcetopologies", "delete")
        },
        f"{HELPER}.list_node_resource_topologies": {
            ("topology.node.k8s.io", "noderesourcetopologies", "list")
        },
        f"{HELPER}.apply_volcano_numatopology": {
            ("nodeinfo.volcano.sh", "numatopologies", "patch"),
            ("nodeinfo.volcano.sh", "numatopologies", "create"),
        },
        f"{HELPER}.delete_volcano_numatopology": {
            ("nodeinfo.volcano.sh", "numatopologies", "delete")
        },
        f"{HELPER}.list_volcano_numatopologies": {
            ("nodeinfo.volcano.sh", "numatopologies", "list")
        },
        # Groups: phase 2 of a group placement (nodeSelector added, gate removed); the
        # pod read back when a patch guarded by its uid is refused.
        f"{HELPER}.patch_pod_spec": {("", "pods", "patch"), ("", "pods", "get")},
        f"{HELPER}.patch_networktopology_status": {
            ("numatopo.io", "networktopologies/status", "patch")
        },
        # GPUs on DRA clusters (dra.py): read slices, classes and claims; allocate claims.
        f"{HELPER}.get_resource_claim": {("resource.k8s.io", "resourceclaims", "get")},
        f"{HELPER}.list_resource_claims": {("resource.k8s.io", "resourceclaims", "list")},
        f"{HELPER}.list_resource_slices": {("resource.k8s.io", "resourceslices", "list")},
        f"{HELPER}.list_device_classes": {("resource.k8s.io", "deviceclasses", "list")},
        # dra_feed.py: what allocated claims hold, kept in the ledger; the extender's copies.
        f"{HELPER}.watch_resource_claims": {("resource.k8s.io", "resourceclaims", "watch")},
        f"{HELPER}.watch_resource_slices": {("resource.k8s.io", "resourceslices", "watch")},
        f"{HELPER}.watch_device_classes": {("resource.k8s.io", "deviceclasses", "watch")},
        f"{HELPER}.patch_resource_claim": {("resource.k8s.io", "resourceclaims", "patch")},
        f"{HELPER}.patch_resource_claim_status": {
            ("resource.k8s.io", "resourceclaims/status", "patch")
        },
    },
    # The helpers the node processes call: the exporter (`Publisher`, and the Node read
    # at start) and the agent (`AgentLoop`).
    "node": {
        f"{HELPER}.get_node": {("", "nodes", "get")},
        f"{HELPER}.get_numatopology": {("numatopo.io", "numatopologies", "get")},
        # server-side apply: patch, and create when the object does not exist yet
        f"{HELPER}.apply_numatopology": {
            ("numatopo.io", "numatopologies", "patch"),
            ("numatopo.io", "numatopologies", "create"),
        },
        # The exporter and the agent apply their own status conditions.
        f"{HELPER}.apply_numatopology_status": {("numatopo.io", "numatopologies/status", "patch")},
        f"{HELPER}.watch_numatopologies": {("numatopo.io", "numatopologies", "watch")},
        f"{HELPER}.list_pods": {("", "pods", "list")},
        f"{HELPER}.probe_pods": {("", "pods", "list")},
        f"{HELPER}.watch_pods": {("", "pods", "watch")},
        f"{HELPER}.patch_pod_annotations": {("", "pods", "patch")},
        # Only its own condition: a JSON patch guarded by a test of the entry, re-read
        # once when the guard fails; a strategic merge patch when there is no list.
        f"{HELPER}.patch_pod_status": {("", "pods/status", "patch")},
        f"{HELPER}.get_pod_status": {("", "pods/status", "get")},
        f"{HELPER}.post_event": {("", "events", "create")},
    },
}

# Call sites that act on the operator's own pod, in the release namespace wherever the
# operator watches pods (the active replica labels itself for the extender Service).
OWN_POD_CALLS = {f"{HELPER}.patch_pod_labels"}
# The Lease the replicas compete for lives in the release namespace; a single replica
# runs standalone and never calls these.
LEASE_CALLS = {f"{HELPER}.get_lease", f"{HELPER}.create_lease", f"{HELPER}.patch_lease"}
# Only with `operator.groups.enabled` (the default).
GROUP_CALLS = {
    f"{HELPER}.patch_networktopology_status",
    f"{HELPER}.list_nodes",
    f"{HELPER}.watch_nodes",
}

# The exports the operator writes only while their chart value is on (`exports.*`).
EXPORT_CALLS = {
    "nodeResourceTopology": {
        f"{HELPER}.apply_node_resource_topology",
        f"{HELPER}.delete_node_resource_topology",
        f"{HELPER}.list_node_resource_topologies",
    },
    "volcano": {
        f"{HELPER}.apply_volcano_numatopology",
        f"{HELPER}.delete_volcano_numatopology",
        f"{HELPER}.list_volcano_numatopologies",
    },
}

# kopf's own calls for the operator's handlers and indexes (peering is off).
FRAMEWORK_CALLS: dict[str, set[Permission]] = {
    "kopf: index and event handlers on NetworkTopologies (groups)": {
        ("numatopo.io", "networktopologies", "list"),
        ("numatopo.io", "networktopologies", "watch"),
    },
    "kopf: resource observer (CRDs added later)": {
        ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
    },
}

# Where the code of the node pods' account lives: (source root, package folder).
NODE_SOURCES = (
    (REPO / "exporter", "numatopo_exporter"),
    (REPO / "cli", "numatopo_cli/commands"),
)
NAMESPACED_RESOURCES = {"pods", "pods/binding", "pods/status", "events"}

# -- reading the code -------------------------------------------------------------------


def collect_helper_calls(root: Path, package: str) -> dict[str, set[Permission]]:
    """`numatopo_kube.KubeClient` helper ("numatopo_kube:KubeClient.name") -> the
    permissions it declares (`numatopo_kube.API_CALLS`), for every helper that some
    module of `package` (a package folder, or one module) calls (any
    `<something>.kube.<helper>(...)` or `kube.<helper>`)."""
    calls: dict[str, set[Permission]] = {}
    where = root / package
    for path in sorted(where.rglob("*.py")) if where.is_dir() else [where]:
        for call in ast.walk(ast.parse(path.read_text())):
            if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
                continue
            receiver, method = ast.unparse(call.func.value), call.func.attr
            if receiver.rsplit(".", 1)[-1] in ("kube", "client") and method in API_CALLS:
                calls[f"{HELPER}.{method}"] = set(API_CALLS[method])
    return calls


# Modules of the client layer that call helpers on a component's behalf: counted for a
# component whose source imports them (the Event queue both sides post through).
KUBE_CALLERS = ("event_posts",)


def collect_code_calls(account: str) -> dict[str, set[Permission]]:
    """Helper ("numatopo_kube:KubeClient.name") -> permissions, for the helpers the
    account's code calls, read from the source (and from the `KUBE_CALLERS` it uses)."""
    sources = [(REPO / "operator", "numatopo_operator")] if account == "operator" else NODE_SOURCES
    calls: dict[str, set[Permission]] = {}
    for root, package in sources:
        calls |= collect_helper_calls(root, package)
    text = "\n".join(
        path.read_text() for root, package in sources for path in (root / package).rglob("*.py")
    )
    for module in KUBE_CALLERS:
        if re.search(rf"numatopo_kube(\.| import ){module}\b", text):
            calls |= collect_helper_calls(REPO / "kube", f"numatopo_kube/{module}.py")
    return calls


@pytest.mark.parametrize("account", ["operator", "node"])
def test_declared_calls_match_the_code(account: str) -> None:
    """Fails when a call site is added, removed or changed without updating CODE_CALLS."""
    actual = collect_code_calls(account)

    assert CODE_CALLS[account] == actual


# -- reading the rendered RBAC ----------------------------------------------------------

Grant = tuple[str, str, str, str]  # (scope: "cluster" or a namespace, group, resource, verb)


def granted(manifests: list[dict[str, Any]], account: str) -> set[Grant]:
    """Everything the ServiceAccount `account` may do through the rendered bindings."""
    roles = {
        (m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]): m
        for m in manifests
        if m["kind"] in ("Role", "ClusterRole")
    }
    grants: set[Grant] = set()
    for binding in (m for m in manifests if m["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        subjects = binding.get("subjects") or []
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == NAMESPACE
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace")
        key = (ref["kind"], namespace if ref["kind"] == "Role" else None, ref["name"])
        role = roles[key]
        scope = namespace if binding["kind"] == "RoleBinding" else "cluster"
        for rule in role["rules"]:
            assert not rule.get("resourceNames"), "name-restricted rules are not expected here"
            grants |= {
                (scope, group, resource, verb)
                for group in rule["apiGroups"]
                for resource in rule["resources"]
                for verb in rule["verbs"]
            }
    return grants


GROUP_FRAMEWORK = "kopf: index and event handlers on NetworkTopologies (groups)"


def required(
    account: str,
    *,
    lease: bool,
    namespaces: list[str],
    exports: tuple[str, ...] = (),
    groups: bool = True,
) -> set[Grant]:
    """What `account` needs: its code's calls, plus kopf's for the operator; `lease`: the
    replicas compete for a Lease (more than one replica); `exports`: the formats on;
    `groups`: group placement is on."""
    calls = CODE_CALLS[account]
    off = set().union(*(c for name, c in EXPORT_CALLS.items() if name not in exports))
    special = OWN_POD_CALLS | LEASE_CALLS | off | (set() if groups else GROUP_CALLS)
    permissions = set().union(*(p for site, p in calls.items() if site not in special))
    if account == "operator":
        permissions |= set().union(
            *(p for what, p in FRAMEWORK_CALLS.items() if groups or what != GROUP_FRAMEWORK)
        )
    scopes = namespaces or ["cluster"]
    grants = {
        (scope, *permission)
        for permission in permissions
        for scope in (scopes if permission[1] in NAMESPACED_RESOURCES else ["cluster"])
    }
    own = set().union(*(p for site, p in calls.items() if site in OWN_POD_CALLS))
    leases = set().union(*(p for site, p in calls.items() if site in LEASE_CALLS))
    grants |= {(NAMESPACE, *p) for p in leases} if lease else set()
    return grants | {(NAMESPACE if namespaces else "cluster", *p) for p in own}


BOTH_EXPORTS = {
    "exports": {"nodeResourceTopology": {"enabled": True}, "volcano": {"enabled": True}}
}


@pytest.mark.parametrize(
    ("values", "account", "lease", "namespaces", "exports"),
    [
        pytest.param(None, "numatopo-operator", True, [], (), id="operator"),
        pytest.param(
            BOTH_EXPORTS,
            "numatopo-operator",
            True,
            [],
            ("nodeResourceTopology", "volcano"),
            id="operator-exporting-both",
        ),
        pytest.param(
            {"exports": {"nodeResourceTopology": {"enabled": False}, "volcano": {"enabled": True}}},
            "numatopo-operator",
            True,
            [],
            ("volcano",),
            id="operator-exporting-volcano",
        ),
        pytest.param(BOTH_EXPORTS, "numatopo-node", False, [], (), id="node-with-exports-on"),
        pytest.param(
            {"operator": {"replicas": 1}},
            "numatopo-operator",
            False,
            [],
            (),
            id="operator-standalone",
        ),
        pytest.param(
            {"operator": {"groups": {"enabled": False}}},
            "numatopo-operator",
            True,
            [],
            (),
            id="operator-without-groups",
        ),
        pytest.param(
            {"operator": {"watchNamespaces": ["ml", "research"]}},
            "numatopo-operator",
            True,
            ["ml", "research"],
            (),
            id="operator-namespaced",
        ),
        pytest.param(
            {"operator": {"watchNamespaces": ["ml", NAMESPACE]}},
            "numatopo-operator",
            True,
            ["ml", NAMESPACE],
            (),
            id="operator-namespaced-including-its-own-namespace",
        ),
        pytest.param(None, "numatopo-node", False, [], (), id="node"),
    ],
)
def test_rbac_grants_exactly_what_the_code_calls(
    render: Any,
    values: Any,
    account: str,
    *,
    lease: bool,
    namespaces: list[str],
    exports: tuple[str, ...],
) -> None:
    component = account.removeprefix("numatopo-")
    groups = ((values or {}).get("operator") or {}).get("groups", {}).get("enabled", True)
    expected = required(
        component, lease=lease, namespaces=namespaces, exports=exports, groups=groups
    )

    assert sorted(expected) == sorted(granted(render(values), account))


def test_observe_only_node_pods_cannot_touch_pods(render: Any) -> None:
    """With the agent off, the node account keeps only the exporter's rights."""
    actual = {g[2] for g in granted(render({"agent": {"enabled": False}}), "numatopo-node")}

    assert {"nodes", "numatopologies", "numatopologies/status"} == actual


def test_no_role_uses_wildcards(render: Any) -> None:
    """No rendered rule says `*` for groups, resources or verbs, in any value set."""
    manifests = render(
        {"scheduler": {"enabled": True, "replicas": 2}, "operator": {"watchNamespaces": ["ml"]}}
    )
    wildcards = [
        f"{m['kind']}/{m['metadata']['name']}"
        for m in manifests
        if m["kind"] in ("Role", "ClusterRole")
        for rule in m["rules"]
        if "*" in rule["apiGroups"] + rule["resources"] + rule["verbs"]
    ]

    assert [] == wildcards


def test_scheduler_gets_the_builtin_scheduler_roles_only(render: Any) -> None:
    """The stock kube-scheduler is bound to the roles Kubernetes defines for it, and to a
    Lease of its own name for leader election."""
    manifests = render({"scheduler": {"enabled": True, "replicas": 2}})
    bindings = sorted(
        (m["kind"], m["metadata"].get("namespace", ""), m["roleRef"]["name"])
        for m in manifests
        if m["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(s["name"] == "numatopo-scheduler" for s in m["subjects"])
    )

    assert [
        ("ClusterRoleBinding", "", "system:kube-scheduler"),
        ("ClusterRoleBinding", "", "system:volume-scheduler"),
        ("RoleBinding", "kube-system", "extension-apiserver-authentication-reader"),
        ("RoleBinding", NAMESPACE, "numatopo-scheduler-lease"),
    ] == bindings
