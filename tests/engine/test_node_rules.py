"""kube-scheduler's node filters (cordon, taints, nodeSelector, required node affinity),
case by case against Kubernetes' semantics (`Toleration.ToleratesTaint`,
`labels.Requirement`, `nodeaffinity.LazyErrorNodeSelector`)."""

from __future__ import annotations

from typing import Any

import pytest

from numatopo_engine import node_rules
from numatopo_engine.node_rules import (
    matches_node_selector,
    matches_required_affinity,
    tolerates,
    untolerated_taint,
)

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        pytest.param(
            {
                "key": "nvidia.com/gpu",
                "operator": "Equal",
                "value": "present",
                "effect": "NoSchedule",
            },
            GPU_TAINT,
            True,
            id="equal-key-value-effect",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            GPU_TAINT,
            True,
            id="no-operator-means-equal",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"},
            GPU_TAINT,
            False,
            id="equal-with-another-value",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "Equal"},
            GPU_TAINT,
            False,
            id="equal-without-value-against-a-valued-taint",
        ),
        pytest.param(
            {"key": "dedicated", "operator": "Equal"},
            {"key": "dedicated", "effect": "NoExecute"},
            True,
            id="equal-empty-values",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "Exists"},
            GPU_TAINT,
            True,
            id="exists-ignores-the-value",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "Exists", "value": "anything"},
            GPU_TAINT,
            True,
            id="exists-with-a-value-still-ignores-it",
        ),
        pytest.param({"operator": "Exists"}, GPU_TAINT, True, id="exists-empty-key-tolerates-all"),
        pytest.param(
            {"operator": "Exists"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
            True,
            id="exists-empty-key-empty-effect-tolerates-every-effect",
        ),
        pytest.param(
            {"operator": "Exists", "effect": "NoExecute"},
            GPU_TAINT,
            False,
            id="exists-empty-key-other-effect",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},
            GPU_TAINT,
            False,
            id="effect-differs",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": ""},
            {**GPU_TAINT, "effect": "NoExecute"},
            True,
            id="empty-effect-matches-every-effect",
        ),
        pytest.param(
            {"key": "dedicated", "operator": "Exists"}, GPU_TAINT, False, id="key-differs"
        ),
        pytest.param(
            {"operator": "Equal", "value": "present"},
            GPU_TAINT,
            True,
            id="empty-key-equal-compares-the-value-only",
        ),
        pytest.param(
            {"operator": "Equal", "value": "other"},
            GPU_TAINT,
            False,
            id="empty-key-equal-other-value",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "Gt", "value": "1"},
            GPU_TAINT,
            False,
            id="unknown-operator-tolerates-nothing",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "exists"},
            GPU_TAINT,
            False,
            id="operators-are-case-sensitive",
        ),
        pytest.param("Exists", GPU_TAINT, False, id="toleration-not-an-object"),
        pytest.param({"key": 7, "operator": "Exists"}, GPU_TAINT, False, id="key-not-a-string"),
        pytest.param({"operator": "Exists"}, "taint", False, id="taint-not-an-object"),
    ],
)
def test_tolerates_taint_as_kubernetes_does(
    toleration: object, taint: object, *, expected: bool
) -> None:
    assert expected is tolerates(toleration, taint)


@pytest.mark.parametrize(
    ("tolerations", "taints", "expected"),
    [
        pytest.param(None, None, None, id="no-taints"),
        pytest.param(None, [], None, id="empty-taints"),
        pytest.param(
            None,
            [{"key": "soft", "effect": "PreferNoSchedule"}],
            None,
            id="prefer-no-schedule-never-refuses",
        ),
        pytest.param(None, [GPU_TAINT], GPU_TAINT, id="no-schedule-untolerated"),
        pytest.param(
            [],
            [{"key": "evict", "effect": "NoExecute"}],
            {"key": "evict", "effect": "NoExecute"},
            id="no-execute-untolerated",
        ),
        pytest.param(
            [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            [GPU_TAINT, {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
            {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
            id="the-first-untolerated-of-several",
        ),
        pytest.param(
            [{"key": "nvidia.com/gpu", "operator": "Exists"}, {"key": "dedicated", "value": "ml"}],
            [GPU_TAINT, {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
            None,
            id="all-tolerated",
        ),
        pytest.param(None, "taints", "(unreadable taints)", id="taints-not-a-list"),
        pytest.param(None, ["taint"], "taint", id="a-taint-not-an-object"),
    ],
)
def test_untolerated_taint(tolerations: object, taints: object, expected: object) -> None:
    assert expected == untolerated_taint(tolerations, taints)


LABELS = {"kubernetes.io/hostname": "h100-a", "gpu": "h100", "gpus": "8", "zone": "a"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param(None, True, id="none"),
        pytest.param({}, True, id="empty"),
        pytest.param({"gpu": "h100", "zone": "a"}, True, id="all-equal"),
        pytest.param({"gpu": "h100", "zone": "b"}, False, id="one-differs"),
        pytest.param({"rack": "1"}, False, id="label-missing"),
        pytest.param({"gpu": ""}, False, id="empty-value-is-not-any-value"),
        pytest.param(["gpu"], False, id="not-a-map"),
        pytest.param({"gpu": 8}, False, id="value-not-a-string"),
    ],
)
def test_node_selector(selector: object, *, expected: bool) -> None:
    assert expected is matches_node_selector(selector, LABELS)


NODE = {"metadata": {"name": "h100-a", "labels": LABELS}}


def required(*terms: Any) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    found: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        found["values"] = list(values)
    return found


def labels_term(*expressions: Any) -> dict[str, Any]:
    return {"matchExpressions": list(expressions)}


@pytest.mark.parametrize(
    ("affinity", "expected"),
    [
        pytest.param(None, True, id="no-affinity"),
        pytest.param({"podAffinity": {}}, True, id="no-node-affinity"),
        pytest.param({"nodeAffinity": {}}, True, id="no-required-part"),
        pytest.param(
            {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
            True,
            id="only-preferred",
        ),
        pytest.param(required(), False, id="no-terms-match-nothing"),
        pytest.param(required({}), False, id="an-empty-term-matches-nothing"),
        pytest.param(
            required({"matchExpressions": [], "matchFields": []}),
            False,
            id="a-term-of-empty-lists-matches-nothing",
        ),
        pytest.param(required(labels_term(expr("gpu", "In", "h100", "a100"))), True, id="in"),
        pytest.param(required(labels_term(expr("gpu", "In", "a100"))), False, id="in-other"),
        pytest.param(required(labels_term(expr("rack", "In", "1"))), False, id="in-missing"),
        pytest.param(required(labels_term(expr("gpu", "NotIn", "a100"))), True, id="notin"),
        pytest.param(required(labels_term(expr("gpu", "NotIn", "h100"))), False, id="notin-in"),
        pytest.param(
            required(labels_term(expr("rack", "NotIn", "1"))), True, id="notin-missing-matches"
        ),
        pytest.param(required(labels_term(expr("gpu", "Exists"))), True, id="exists"),
        pytest.param(required(labels_term(expr("rack", "Exists"))), False, id="exists-missing"),
        pytest.param(required(labels_term(expr("rack", "DoesNotExist"))), True, id="doesnotexist"),
        pytest.param(
            required(labels_term(expr("gpu", "DoesNotExist"))), False, id="doesnotexist-present"
        ),
        pytest.param(required(labels_term(expr("gpus", "Gt", "4"))), True, id="gt"),
        pytest.param(required(labels_term(expr("gpus", "Gt", "8"))), False, id="gt-equal"),
        pytest.param(required(labels_term(expr("gpus", "Lt", "9"))), True, id="lt"),
        pytest.param(required(labels_term(expr("gpus", "Lt", "8"))), False, id="lt-equal"),
        pytest.param(required(labels_term(expr("gpu", "Gt", "1"))), False, id="gt-label-not-int"),
        pytest.param(required(labels_term(expr("rack", "Lt", "1"))), False, id="lt-missing"),
        pytest.param(
            required(labels_term(expr("gpus", "Gt", "4", "5"))), False, id="gt-two-values-invalid"
        ),
        pytest.param(required(labels_term(expr("gpus", "Gt"))), False, id="gt-no-value-invalid"),
        pytest.param(
            required(labels_term(expr("gpus", "Gt", "four"))), False, id="gt-not-int-invalid"
        ),
        pytest.param(required(labels_term(expr("gpus", "In"))), False, id="in-no-values-invalid"),
        pytest.param(
            required(labels_term(expr("gpu", "Exists", "h100"))),
            False,
            id="exists-with-values-invalid",
        ),
        pytest.param(
            required(labels_term(expr("gpu", "Equals", "h100"))),
            False,
            id="selector-only-operator-invalid-here",
        ),
        pytest.param(
            required(labels_term(expr("bad key", "Exists"))), False, id="invalid-label-key"
        ),
        pytest.param(
            required(labels_term(expr("gpu", "In", "-h100"))), False, id="invalid-label-value"
        ),
        pytest.param(
            required(labels_term(expr("gpu", "In", "h100"), expr("zone", "In", "b"))),
            False,
            id="expressions-are-anded",
        ),
        pytest.param(
            required(labels_term(expr("zone", "In", "b")), labels_term(expr("gpu", "Exists"))),
            True,
            id="terms-are-ored",
        ),
        pytest.param(
            required({}, labels_term(expr("gpu", "Exists"))),
            True,
            id="an-empty-term-is-skipped",
        ),
        pytest.param(
            required(
                labels_term(expr("gpu", "Exists"), expr("gpus", "Gt", "x")),
                labels_term(expr("zone", "In", "b")),
            ),
            False,
            id="a-term-with-an-invalid-requirement-never-matches",
        ),
        pytest.param(
            required({"matchFields": [expr("metadata.name", "In", "h100-a")]}),
            True,
            id="fields-name-in",
        ),
        pytest.param(
            required({"matchFields": [expr("metadata.name", "In", "h100-b")]}),
            False,
            id="fields-name-in-other",
        ),
        pytest.param(
            required({"matchFields": [expr("metadata.name", "NotIn", "h100-b")]}),
            True,
            id="fields-name-notin",
        ),
        pytest.param(
            required({"matchFields": [expr("metadata.name", "In", "h100-a", "h100-b")]}),
            False,
            id="fields-two-values-invalid",
        ),
        pytest.param(
            required({"matchFields": [expr("metadata.name", "Exists")]}),
            False,
            id="fields-exists-invalid",
        ),
        pytest.param(
            required(
                {
                    "matchExpressions": [expr("gpu", "In", "h100")],
                    "matchFields": [expr("metadata.name", "In", "h100-b")],
                }
            ),
            False,
            id="labels-and-fields-are-anded",
        ),
        pytest.param(
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
            False,
            id="required-without-terms",
        ),
        pytest.param(required("term"), False, id="a-term-not-an-object"),
        pytest.param("affinity", False, id="affinity-not-an-object"),
    ],
)
def test_required_node_affinity(affinity: object, *, expected: bool) -> None:
    assert expected is matches_required_affinity(affinity, NODE)


@pytest.mark.parametrize(
    ("label", "operator", "bound", "expected"),
    [
        pytest.param("007", "Gt", "6", True, id="leading-zeros-parse"),
        pytest.param("1_000", "Gt", "5", False, id="underscores-are-not-digits"),
        pytest.param(" 9", "Gt", "5", False, id="no-spaces"),
        pytest.param("9223372036854775807", "Gt", "5", True, id="int64-max"),
        pytest.param("9223372036854775808", "Gt", "5", False, id="above-int64-does-not-parse"),
        pytest.param("-3", "Lt", "0", True, id="negative-label"),
    ],
)
def test_gt_lt_parse_as_go_parses_int64(
    label: str, operator: str, bound: str, *, expected: bool
) -> None:
    node = {"metadata": {"name": "n", "labels": {"count": label}}}

    assert expected is matches_required_affinity(
        required(labels_term(expr("count", operator, bound))), node
    )


CORDONED = {"metadata": {"name": "h100-a"}, "spec": {"unschedulable": True}}


@pytest.mark.parametrize(
    ("pod_spec", "node", "expected"),
    [
        pytest.param({}, {"metadata": {"name": "h100-a"}}, "", id="plain-pod-plain-node"),
        pytest.param(
            {},
            CORDONED,
            "the node is unschedulable (cordoned) and the pod does not tolerate "
            "node.kubernetes.io/unschedulable:NoSchedule",
            id="cordoned",
        ),
        pytest.param(
            {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]},
            CORDONED,
            "",
            id="cordoned-tolerated",
        ),
        pytest.param(
            {"tolerations": [{"operator": "Exists"}]}, CORDONED, "", id="cordoned-tolerate-all"
        ),
        pytest.param(
            {"tolerations": [{"operator": "Exists", "effect": "NoExecute"}]},
            CORDONED,
            "the node is unschedulable (cordoned) and the pod does not tolerate "
            "node.kubernetes.io/unschedulable:NoSchedule",
            id="cordoned-tolerating-another-effect",
        ),
        pytest.param(
            {},
            {"metadata": {"name": "h100-a"}, "spec": {"taints": [GPU_TAINT]}},
            "the node has the taint nvidia.com/gpu=present:NoSchedule, which the pod does not "
            "tolerate",
            id="tainted",
        ),
        pytest.param(
            {"nodeSelector": {"gpu": "a100"}},
            NODE,
            "the node's labels do not match the pod's nodeSelector",
            id="selector",
        ),
        pytest.param(
            {"affinity": required(labels_term(expr("zone", "In", "b")))},
            NODE,
            "the node does not match the pod's required node affinity",
            id="affinity",
        ),
        pytest.param(
            {
                "nodeSelector": {"gpu": "h100"},
                "affinity": required(labels_term(expr("zone", "In", "a"))),
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            },
            {**NODE, "spec": {"taints": [GPU_TAINT]}},
            "",
            id="everything-matches",
        ),
    ],
)
def test_refusal(pod_spec: dict[str, Any], node: dict[str, Any], expected: str) -> None:
    assert expected == node_rules.refusal(pod_spec, node)
