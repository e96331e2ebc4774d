"""The admission policies' CEL, evaluated (cel-python) on admission requests as the API
server builds them: who may write `numatopo.io/assignment`, and which node's objects a
node pod may write.

`admit` follows the ValidatingAdmissionPolicy algorithm: match constraints, then match
conditions, then the variables in order, then every validation (and its message).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

celpy = pytest.importorskip("celpy", reason="cel-python is not installed")

NAMESPACE = "numatopo-system"
OPERATOR = f"system:serviceaccount:{NAMESPACE}:numatopo-operator"
NODE = f"system:serviceaccount:{NAMESPACE}:numatopo-node"
NODE_CLAIM = "authentication.kubernetes.io/node-name"
ASSIGNMENT = "numatopo.io/assignment"
PLACEMENT = "numatopo.io/group-placement"
PLANNED = '{"v": 1, "group": "train", "level": "leaf", "domain": "leaf-1", "rank": 0}'
BOOKED = '{"v": 1, "node": "gpu-a", "numaNodes": [0], "containers": {}}'


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


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(None, ["Deny"], id="deny-by-default"),
        pytest.param(
            {"admission": {"validationActions": ["Warn", "Audit"]}},
            ["Warn", "Audit"],
            id="warn-and-audit-for-a-trial",
        ),
    ],
)
def test_bindings_apply_the_configured_actions(
    render: Any, values: Any, expected: list[str]
) -> None:
    bindings = [m for m in render(values) if m["kind"] == "ValidatingAdmissionPolicyBinding"]

    assert [expected, expected] == [b["spec"]["validationActions"] for b in bindings]


def test_admission_policies_can_be_switched_off(render: Any) -> None:
    kinds = {m["kind"] for m in render({"admission": {"enabled": False}})}

    assert set() == kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
