"""The admission policies' CEL, evaluated (cel-python) on admission requests as the API
server builds them: who may write the annotations numatopo trusts (`assignment`,
`group-placement`, `observed`; on pods and in Bindings), and which node's objects a node
pod may write.

`admit` follows the ValidatingAdmissionPolicy algorithm: match constraints, then match
conditions, then the variables in order, then every validation (and its message).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from numatopo_engine.annotations import TRUSTED_WRITERS, Writer

celpy = pytest.importorskip("celpy", reason="cel-python is not installed")

NAMESPACE = "numatopo-system"
OPERATOR = f"system:serviceaccount:{NAMESPACE}:numatopo-operator"
NODE = f"system:serviceaccount:{NAMESPACE}:numatopo-node"
NODE_CLAIM = "authentication.kubernetes.io/node-name"
ASSIGNMENT = "numatopo.io/assignment"
PLACEMENT = "numatopo.io/group-placement"
PLANNED = '{"v": 1, "group": "train", "level": "leaf", "domain": "leaf-1", "rank": 0}'
BOOKED = '{"v": 1, "node": "gpu-a", "numaNodes": [0], "containers": {}}'
OBSERVED = "numatopo.io/observed"
SEEN = '{"v": 1, "seq": 3, "containers": {"main": {"devices": {}, "matches": false}}}'


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    message: str = ""


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    environment = celpy.Environment()
    program = environment.program(environment.compile(expression))
    result = program.evaluate(activation)
    if isinstance(result, celpy.CELEvalError):
        raise AssertionError(f"CEL error in {expression!r}: {result}")
    return result


def matches(policy: dict[str, Any], request: dict[str, Any]) -> bool:
    resource = request["resource"]["resource"] + (
        f"/{request['subResource']}" if request.get("subResource") else ""
    )
    return any(
        request["resource"]["group"] in rule["apiGroups"]
        and request["resource"]["version"] in rule["apiVersions"]
        and request["operation"] in rule["operations"]
        and resource in rule["resources"]
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
    )


def admit(policy: dict[str, Any], request: dict[str, Any], new: Any, old: Any) -> Verdict:
    """What the API server decides for this policy alone."""
    if not matches(policy, request):
        return Verdict(True, "not matched")
    activation: dict[str, Any] = {
        "request": celpy.json_to_cel(request),
        "object": celpy.json_to_cel(new),
        "oldObject": celpy.json_to_cel(old),
    }
    spec = policy["spec"]
    for condition in spec.get("matchConditions", []):
        if not bool(evaluate(condition["expression"], activation)):
            return Verdict(True, "not matched")
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        activation["variables"] = celpy.json_to_cel(variables)
        variables[variable["name"]] = evaluate(variable["expression"], activation)
    activation["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()}
    )
    for validation in spec["validations"]:
        if not bool(evaluate(validation["expression"], activation)):
            return Verdict(False, str(evaluate(validation["messageExpression"], activation)))
    return Verdict(True)


def request(
    user: str,
    operation: str,
    *,
    group: str = "",
    resource: str = "pods",
    sub: str = "",
    node: str | None = None,
) -> dict[str, Any]:
    extra = {NODE_CLAIM: [node]} if node is not None else {}
    return {
        "operation": operation,
        "resource": {
            "group": group,
            "version": "v1alpha1" if group else "v1",
            "resource": resource,
        },
        "subResource": sub,
        "userInfo": {"username": user, "groups": ["system:authenticated"], "extra": extra},
    }


def pod(annotations: dict[str, str] | None = None, *, node: str = "gpu-a") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "train", "namespace": "ml"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"nodeName": node}}


def binding(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A v1 Binding as a pods/binding CREATE carries it (the API server copies its
    annotations onto the pod)."""
    metadata: dict[str, Any] = {"name": "train", "namespace": "ml"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"kind": "Node", "name": "gpu-a"},
    }


def numatopology(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "numatopo.io/v1alpha1",
        "kind": "Numatopology",
        "metadata": {"name": name},
        "spec": {},
    }


@pytest.fixture(scope="module")
def policies(render: Any) -> dict[str, dict[str, Any]]:
    return {
        m["metadata"]["name"].removeprefix("numatopo-"): m
        for m in render(None)
        if m["kind"] == "ValidatingAdmissionPolicy"
    }


USER = "alice@example.com"
RS_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"


@pytest.mark.parametrize(
    ("req", "new", "old", "allowed"),
    [
        pytest.param(request(USER, "CREATE"), pod(), None, True, id="plain-pod-created"),
        pytest.param(
            request(USER, "CREATE"),
            pod({ASSIGNMENT: BOOKED}),
            None,
            False,
            id="user-creates-pod-with-own-assignment",
        ),
        pytest.param(
            request(RS_CONTROLLER, "CREATE"),
            pod({ASSIGNMENT: BOOKED}),
            None,
            False,
            id="controller-copies-assignment-from-a-template",
        ),
        pytest.param(
            request(OPERATOR, "UPDATE"),
            pod({ASSIGNMENT: BOOKED}),
            pod(),
            True,
            id="operator-writes-assignment",
        ),
        pytest.param(
            request(OPERATOR, "UPDATE"),
            pod({}),
            pod({ASSIGNMENT: BOOKED}),
            True,
            id="operator-removes-assignment",
        ),
        pytest.param(
            request(USER, "UPDATE"),
            pod({ASSIGNMENT: BOOKED, "team": "a"}),
            pod({ASSIGNMENT: BOOKED}),
            True,
            id="user-edits-other-annotations",
        ),
        pytest.param(
            request(USER, "UPDATE"),
            pod({ASSIGNMENT: BOOKED.replace("[0]", "[0, 1]")}),
            pod({ASSIGNMENT: BOOKED}),
            False,
            id="user-widens-assignment",
        ),
        pytest.param(
            request(USER, "UPDATE"),
            pod({}),
            pod({ASSIGNMENT: BOOKED}),
            False,
            id="user-removes-assignment",
        ),
        pytest.param(
            request(USER, "UPDATE"),
            pod({ASSIGNMENT: ""}),
            pod(),
            False,
            id="user-adds-empty-assignment",
        ),
        pytest.param(
            request(NODE, "UPDATE", node="gpu-a"),
            pod({ASSIGNMENT: BOOKED, "numatopo.io/state": "Enforced"}),
            pod({ASSIGNMENT: BOOKED}),
            True,
            id="agent-sets-state-keeps-assignment",
        ),
        pytest.param(
            request(NODE, "UPDATE", sub="status", node="gpu-a"),
            pod({ASSIGNMENT: "{}"}),
            pod({ASSIGNMENT: BOOKED}),
            False,
            id="agent-rewrites-assignment-through-status",
        ),
        pytest.param(
            request(USER, "UPDATE"),
            pod({ASSIGNMENT: BOOKED, PLACEMENT: PLANNED.replace("leaf-1", "leaf-2")}),
            pod({ASSIGNMENT: BOOKED, PLACEMENT: PLANNED}),
            False,
            id="user-rewrites-group-placement",
        ),
        pytest.param(
            request(USER, "CREATE"),
            pod({PLACEMENT: PLANNED}),
            None,
            False,
            id="user-creates-pod-with-group-placement",
        ),
        pytest.param(
            request(OPERATOR, "UPDATE"),
            pod({ASSIGNMENT: BOOKED, PLACEMENT: PLANNED}),
            pod(),
            True,
            id="operator-plans-a-group-member",
        ),
        pytest.param(
            request(OPERATOR, "UPDATE"),
            pod({}),
            pod({ASSIGNMENT: BOOKED, PLACEMENT: PLANNED}),
            True,
            id="operator-voids-a-plan",
        ),
        pytest.param(
            request(USER, "UPDATE"),
            pod({ASSIGNMENT: BOOKED, PLACEMENT: PLANNED, "team": "a"}),
            pod({ASSIGNMENT: BOOKED, PLACEMENT: PLANNED}),
            True,
            id="user-edits-other-annotations-of-a-member",
        ),
        pytest.param(
            request("system:serviceaccount:other:numatopo-operator", "UPDATE"),
            pod({ASSIGNMENT: BOOKED}),
            pod(),
            False,
            id="same-account-name-in-another-namespace",
        ),
    ],
)
def test_only_the_operator_writes_assignments(
    policies: dict[str, Any], req: dict[str, Any], new: Any, old: Any, allowed: bool
) -> None:
    verdict = admit(policies["assignment"], req, new, old)

    assert allowed == verdict.allowed


SCHEDULER = "system:kube-scheduler"


@pytest.mark.parametrize(
    ("req", "new", "old", "allowed"),
    [
        pytest.param(
            request(USER, "UPDATE"),
            pod({OBSERVED: SEEN}),
            pod(),
            False,
            id="tenant-writes-observed-on-own-pod",
        ),
        pytest.param(
            request(USER, "UPDATE"),
            pod({OBSERVED: SEEN.replace("false", "true")}),
            pod({OBSERVED: SEEN}),
            False,
            id="tenant-changes-observed",
        ),
        pytest.param(
            request(USER, "CREATE"),
            pod({OBSERVED: SEEN}),
            None,
            False,
            id="tenant-creates-pod-with-observed",
        ),
        pytest.param(
            request(OPERATOR, "UPDATE"),
            pod({OBSERVED: SEEN}),
            pod(),
            False,
            id="operator-writes-observed",
        ),
        pytest.param(
            request(NODE, "UPDATE", node="gpu-a"),
            pod({OBSERVED: SEEN}),
            pod(),
            True,
            id="node-agent-writes-observed",
        ),
        pytest.param(
            request(USER, "UPDATE"),
            pod({OBSERVED: SEEN, "team": "a"}),
            pod({OBSERVED: SEEN}),
            True,
            id="tenant-edits-other-annotations-keeping-observed",
        ),
        pytest.param(
            request(NODE, "UPDATE", node="gpu-a"),
            pod({ASSIGNMENT: BOOKED}),
            pod(),
            False,
            id="node-agent-writes-assignment",
        ),
        pytest.param(
            request(SCHEDULER, "CREATE", sub="binding"),
            binding(),
            None,
            True,
            id="scheduler-binds-without-annotations",
        ),
        pytest.param(
            request(USER, "CREATE", sub="binding"),
            binding({ASSIGNMENT: BOOKED}),
            None,
            False,
            id="tenant-binding-carries-assignment",
        ),
        pytest.param(
            request(SCHEDULER, "CREATE", sub="binding"),
            binding({PLACEMENT: PLANNED}),
            None,
            False,
            id="other-scheduler-binding-carries-group-placement",
        ),
        pytest.param(
            request(USER, "CREATE", sub="binding"),
            binding({OBSERVED: SEEN}),
            None,
            False,
            id="tenant-binding-carries-observed",
        ),
        pytest.param(
            request(NODE, "CREATE", sub="binding", node="gpu-a"),
            binding({OBSERVED: SEEN}),
            None,
            False,
            id="node-agent-binding-carries-observed",
        ),
        pytest.param(
            request(OPERATOR, "CREATE", sub="binding"),
            binding({ASSIGNMENT: BOOKED}),
            None,
            True,
            id="operator-binding-carries-assignment",
        ),
        pytest.param(
            request(USER, "CREATE", sub="binding"),
            binding({"team": "a"}),
            None,
            True,
            id="binding-with-other-annotations",
        ),
    ],
)
def test_trusted_annotations_come_only_from_their_writers(
    policies: dict[str, Any], req: dict[str, Any], new: Any, old: Any, allowed: bool
) -> None:
    verdict = admit(policies["assignment"], req, new, old)

    assert allowed == verdict.allowed


@pytest.mark.parametrize(
    ("node", "allowed"),
    [
        pytest.param("gpu-a", True, id="agent-of-the-pods-node"),
        pytest.param("gpu-b", False, id="agent-of-another-node"),
        pytest.param(None, False, id="agent-token-without-node-claim"),
    ],
)
def test_observed_only_from_the_agent_of_the_pods_node(
    policies: dict[str, Any], node: str | None, allowed: bool
) -> None:
    req = request(NODE, "UPDATE", node=node)
    new, old = pod({OBSERVED: SEEN}, node="gpu-a"), pod(node="gpu-a")

    verdicts = [admit(policies[name], req, new, old) for name in ("assignment", "node-scope")]

    assert allowed == all(v.allowed for v in verdicts)


def _quoted_keys(expression: str) -> set[str]:
    return {
        word for word in expression.replace("'", " ").split() if word.startswith("numatopo.io/")
    }


def test_policies_guard_exactly_the_trusted_annotations(policies: dict[str, Any]) -> None:
    """The chart's lists and the engine's one list (`TRUSTED_WRITERS`) agree."""
    found = {
        v["name"]: _quoted_keys(v["expression"])
        for v in policies["assignment"]["spec"]["variables"]
    }

    assert {
        "byOperator": {k for k, w in TRUSTED_WRITERS.items() if w == Writer.OPERATOR},
        "byNodeAgent": {k for k, w in TRUSTED_WRITERS.items() if w == Writer.NODE_AGENT},
    } == {name: found[name] for name in ("byOperator", "byNodeAgent")}
    assert found["byOperator"] == found["oldByOperator"]
    assert found["byNodeAgent"] == found["oldByNodeAgent"]


@pytest.mark.parametrize(
    ("req", "new", "old", "allowed"),
    [
        pytest.param(
            request(NODE, "CREATE", group="numatopo.io", resource="numatopologies", node="gpu-a"),
            numatopology("gpu-a"),
            None,
            True,
            id="exporter-creates-own-numatopology",
        ),
        pytest.param(
            request(NODE, "UPDATE", group="numatopo.io", resource="numatopologies", node="gpu-a"),
            numatopology("gpu-b"),
            numatopology("gpu-b"),
            False,
            id="exporter-overwrites-another-node",
        ),
        pytest.param(
            request(
                NODE,
                "UPDATE",
                group="numatopo.io",
                resource="numatopologies",
                sub="status",
                node="gpu-a",
            ),
            numatopology("gpu-b"),
            numatopology("gpu-b"),
            False,
            id="exporter-marks-another-node-stale",
        ),
        pytest.param(
            request(NODE, "CREATE", group="numatopo.io", resource="numatopologies"),
            numatopology("gpu-a"),
            None,
            False,
            id="token-without-node-claim",
        ),
        pytest.param(
            request(NODE, "DELETE", group="numatopo.io", resource="numatopologies", node="gpu-a"),
            None,
            numatopology("gpu-b"),
            False,
            id="exporter-deletes-another-node",
        ),
        pytest.param(
            request(NODE, "UPDATE", node="gpu-a"),
            pod(node="gpu-a"),
            pod(node="gpu-a"),
            True,
            id="agent-reports-on-own-node-pod",
        ),
        pytest.param(
            request(NODE, "UPDATE", sub="status", node="gpu-a"),
            pod(node="gpu-b"),
            pod(node="gpu-b"),
            False,
            id="agent-reports-on-another-node-pod",
        ),
        pytest.param(
            request(
                OPERATOR, "UPDATE", group="numatopo.io", resource="numatopologies", sub="status"
            ),
            numatopology("gpu-b"),
            numatopology("gpu-b"),
            True,
            id="operator-writes-any-status",
        ),
        pytest.param(
            request(USER, "UPDATE", group="numatopo.io", resource="numatopologies"),
            numatopology("gpu-b"),
            numatopology("gpu-b"),
            True,
            id="other-accounts-left-to-rbac",
        ),
    ],
)
def test_node_pods_write_only_their_own_node(
    policies: dict[str, Any], req: dict[str, Any], new: Any, old: Any, allowed: bool
) -> None:
    verdict = admit(policies["node-scope"], req, new, old)

    assert allowed == verdict.allowed


@pytest.mark.parametrize(
    ("policy", "req", "objects", "expected"),
    [
        pytest.param(
            "assignment",
            request(USER, "CREATE"),
            (pod({ASSIGNMENT: BOOKED}), None),
            f"only the numatopo operator may set, change or remove the pod annotations "
            f"numatopo.io/assignment and numatopo.io/group-placement (request by {USER}); "
            f"remove them from the pod or its template and let numatopo assign the pod",
            id="assignment-names-the-requester-and-the-fix",
        ),
        pytest.param(
            "node-scope",
            request(NODE, "UPDATE", group="numatopo.io", resource="numatopologies", node="gpu-a"),
            (numatopology("gpu-b"), numatopology("gpu-b")),
            "a numatopo node pod on gpu-a may only write its own node's Numatopology and "
            'pods, not numatopologies of node "gpu-b"',
            id="node-scope-names-both-nodes",
        ),
        pytest.param(
            "node-scope",
            request(NODE, "CREATE", group="numatopo.io", resource="numatopologies"),
            (numatopology("gpu-a"), None),
            f"the service-account token of {NODE} names no node (claim "
            f"{NODE_CLAIM}); numatopo node pods need Kubernetes >= 1.30",
            id="missing-claim-says-which-version-is-needed",
        ),
    ],
)
def test_denials_explain_themselves(
    policies: dict[str, Any], policy: str, req: Any, objects: tuple[Any, Any], expected: str
) -> None:
    verdict = admit(policies[policy], req, *objects)

    assert Verdict(False, expected) == verdict


def _guards(render: Any, values: Any) -> dict[str, tuple[str, list[str]]]:
    """Policy name -> (its API version, its binding's actions)."""
    found = render(values)
    policies = {
        m["metadata"]["name"]: m["apiVersion"]
        for m in found
        if m["kind"] == "ValidatingAdmissionPolicy"
    }
    bindings = {
        m["spec"]["policyName"]: m["spec"]["validationActions"]
        for m in found
        if m["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    assert set(policies) == set(bindings)
    return {name: (policies[name], bindings[name]) for name in policies}


V1 = "admissionregistration.k8s.io/v1"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(
            None,
            {"numatopo-assignment": (V1, ["Deny"]), "numatopo-node-scope": (V1, ["Deny"])},
            id="both-deny-by-default",
        ),
        pytest.param(
            {"admission": {"assignmentGuard": {"validationActions": ["Warn", "Audit"]}}},
            {
                "numatopo-assignment": (V1, ["Warn", "Audit"]),
                "numatopo-node-scope": (V1, ["Deny"]),
            },
            id="a-trial-of-one-guard",
        ),
        pytest.param(
            # Kubernetes < 1.30: tokens carry no node name, the assignment guard still works.
            {"admission": {"nodeScopeGuard": {"enabled": False}}},
            {"numatopo-assignment": (V1, ["Deny"])},
            id="node-scope-off-assignment-on",
        ),
        pytest.param(
            {"admission": {"assignmentGuard": {"enabled": False}}},
            {"numatopo-node-scope": (V1, ["Deny"])},
            id="assignment-off-node-scope-on",
        ),
        pytest.param(
            {
                "admission": {
                    "apiVersion": "admissionregistration.k8s.io/v1beta1",
                    "nodeScopeGuard": {"enabled": False},
                }
            },
            {"numatopo-assignment": ("admissionregistration.k8s.io/v1beta1", ["Deny"])},
            id="v1beta1-on-1.28-or-1.29",
        ),
        pytest.param({"admission": {"enabled": False}}, {}, id="all-off"),
    ],
)
def test_each_guard_has_its_own_switch_and_actions(
    render: Any, values: Any, expected: dict[str, tuple[str, list[str]]]
) -> None:
    assert expected == _guards(render, values)
