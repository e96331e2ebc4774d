"""Whether kube-scheduler's own node filters let a pod onto a node (pure).

Whatever binds a pod in kube-scheduler's place (the extender's `/bind`, a group's placement) must
never put it where kube-scheduler itself would not. These are the filters that judge a pod against a
node's own fields, with k8s.io/kubernetes' semantics (plain dicts in, as the API server serves
them):

  NodeUnschedulable  a cordoned node (`spec.unschedulable`) takes only a pod tolerating the
                     taint `node.kubernetes.io/unschedulable:NoSchedule`
  TaintToleration    every `NoSchedule` and `NoExecute` taint of the node is tolerated
                     (`PreferNoSchedule` is a preference, never a refusal)
  NodeAffinity       `spec.nodeSelector` (each label equal) and the required node affinity
                     (any term whose expressions and fields all match)

Not here: what needs other objects (resources fit, host ports, volumes, inter-pod affinity, topology
spread). Anything malformed counts against the pod: a toleration that cannot be read tolerates
nothing, an affinity term that cannot be read matches nothing (as `LazyErrorNodeSelector` does).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from numatopo_engine import kube_names

UNSCHEDULABLE_TAINT: Mapping[str, str] = {
    "key": "node.kubernetes.io/unschedulable",
    "effect": "NoSchedule",
}
# The taint effects a filter refuses on (`TaintToleration`'s filter).
_REFUSING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
# Go's strconv.ParseInt(s, 10, 64): an optional sign and decimal digits, nothing else.
_INT64 = re.compile(r"[+-]?[0-9]+", re.ASCII)
_INT64_RANGE = range(-(2**63), 2**63)
# The one field a node selector term may match on (`matchFields`).
_NODE_NAME_FIELD = "metadata.name"


def _strings(obj: object, *names: str) -> tuple[str, ...] | None:
    """The named fields of an object ('' where absent); None for a non-object or non-string."""
    if not isinstance(obj, Mapping):
        return None
    found: list[str] = []
    for name in names:
        value = obj.get(name)
        if value is not None and not isinstance(value, str):
            return None
        found.append(value or "")
    return tuple(found)


def tolerates(toleration: object, taint: object) -> bool:
    """k8s.io/api/core/v1 `Toleration.ToleratesTaint`: an empty effect matches every effect, an
    empty key every key; `Exists` ignores the value, `Equal` (or no operator) wants it equal. Any
    other operator tolerates nothing."""
    wants = _strings(toleration, "key", "operator", "value", "effect")
    has = _strings(taint, "key", "value", "effect")
    if wants is None or has is None:
        return False
    key, operator, value, effect = wants
    taint_key, taint_value, taint_effect = has
    if (effect and effect != taint_effect) or (key and key != taint_key):
        return False
    if operator in ("", "Equal"):
        return value == taint_value
    return operator == "Exists"


def _list(obj: object) -> Sequence[Any] | None:
    """A list field: [] when absent, None when it is something else."""
    if obj is None:
        return []
    return obj if isinstance(obj, list) else None


def untolerated_taint(tolerations: object, taints: object) -> object | None:
    """The first `NoSchedule`/`NoExecute` taint (unreadable ones too) nothing tolerates, or None."""
    found_taints, found_tolerations = _list(taints), _list(tolerations) or []
    if found_taints is None:
        return "(unreadable taints)"
    taint: object
    for taint in found_taints:
        effect = _strings(taint, "effect")
        if effect is not None and effect[0] not in _REFUSING_EFFECTS:
            continue
        if not any(tolerates(toleration, taint) for toleration in found_tolerations):
            return taint
    return None


def _metadata(node: Mapping[str, Any], key: str) -> object:
    metadata = node.get("metadata")
    return metadata.get(key) if isinstance(metadata, Mapping) else None


def _labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    labels = _metadata(node, "labels")
    if not isinstance(labels, Mapping):
        return {}
    return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}


def matches_node_selector(selector: object, labels: Mapping[str, str]) -> bool:
    """`spec.nodeSelector`: every key is a label of the node with exactly that value."""
    if selector is None:
        return True
    if not isinstance(selector, Mapping):
        return False
    return all(isinstance(v, str) and labels.get(k) == v for k, v in selector.items())


def _int64(text: str) -> int | None:
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if value in _INT64_RANGE else None


def _label_requirement(expression: object) -> tuple[str, str, list[str]] | None:
    """(key, operator, values) of a `matchExpressions` entry; None if `NewRequirement` refuses."""
    if not isinstance(expression, Mapping):
        return None
    key, operator = expression.get("key"), expression.get("operator")
    values = _list(expression.get("values"))
    if not kube_names.is_qualified_name(key) or not isinstance(operator, str) or values is None:
        return None
    assert isinstance(key, str)
    if not all(kube_names.is_label_value(v) for v in values):
        return None
    if operator in ("In", "NotIn"):
        ok = len(values) > 0
    elif operator in ("Exists", "DoesNotExist"):
        ok = len(values) == 0
    elif operator in ("Gt", "Lt"):
        ok = len(values) == 1 and _int64(values[0]) is not None
    else:
        ok = False
    return (key, operator, list(values)) if ok else None


def _label_matches(key: str, operator: str, values: list[str], labels: Mapping[str, str]) -> bool:
    """`labels.Requirement.Matches`."""
    present = key in labels
    if operator in ("In", "NotIn"):
        return (present and labels[key] in values) == (operator == "In")
    if operator in ("Exists", "DoesNotExist"):
        return present == (operator == "Exists")
    if not present:
        return False
    have, bound = _int64(labels[key]), _int64(values[0])
    if have is None or bound is None:
        return False
    return have > bound if operator == "Gt" else have < bound


def _field_requirement(expression: object) -> tuple[str, str, str] | None:
    """(key, operator, value) of a `matchFields` entry: `In` or `NotIn` with exactly one value
    (`nodeSelectorRequirementsAsFieldSelector`), else None."""
    if not isinstance(expression, Mapping):
        return None
    key, operator = expression.get("key"), expression.get("operator")
    values = _list(expression.get("values"))
    if not isinstance(key, str) or operator not in ("In", "NotIn") or values is None:
        return None
    if len(values) != 1 or not isinstance(values[0], str):
        return None
    return key, str(operator), values[0]


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    """One node selector term: all its expressions and fields hold, and all parse."""
    expressions, fields = _list(term.get("matchExpressions")), _list(term.get("matchFields"))
    if expressions is None or fields is None:
        return False
    # A field selector reads a field the node does not have as '' (fields.Set.Get).
    node_fields = {_NODE_NAME_FIELD: name}
    matched = True
    for expression in expressions:
        requirement = _label_requirement(expression)
        if requirement is None:
            return False
        matched = matched and _label_matches(*requirement, labels)
    for expression in fields:
        found = _field_requirement(expression)
        if found is None:
            return False
        key, operator, value = found
        matched = matched and (node_fields.get(key, "") == value) == (operator == "In")
    return matched


def matches_required_affinity(affinity: object, node: Mapping[str, Any]) -> bool:
    """`spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`: none matches
    every node; else some non-empty term matches (the terms are ORed, a term's requirements ANDed,
    an empty term matches nothing, no terms match nothing)."""
    required: object = affinity
    for key in ("nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"):
        if required is None:
            return True
        if not isinstance(required, Mapping):
            return False
        required = required.get(key)
    if required is None:
        return True
    terms = _list(required.get("nodeSelectorTerms")) if isinstance(required, Mapping) else None
    if terms is None:
        return False
    name = _metadata(node, "name")
    labels, name = _labels(node), name if isinstance(name, str) else ""
    return any(
        isinstance(term, Mapping)
        and bool(term.get("matchExpressions") or term.get("matchFields"))  # else selects nothing
        and _term_matches(term, labels, name)
        for term in terms
    )


def _taint_text(taint: object) -> str:
    found = _strings(taint, "key", "value", "effect")
    if found is None:
        return "(unreadable)"
    key, value, effect = found
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


def refusal(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> str:
    """'' when kube-scheduler's node filters let the pod (its `spec`) onto `node` (a Node object),
    else why not, in kube-scheduler's order of these filters."""
    spec = node.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    tolerations = pod_spec.get("tolerations")
    if spec.get("unschedulable") is True and not any(
        tolerates(t, UNSCHEDULABLE_TAINT) for t in _list(tolerations) or []
    ):
        return (
            "the node is unschedulable (cordoned) and the pod does not tolerate "
            f"{_taint_text(UNSCHEDULABLE_TAINT)}"
        )
    taint = untolerated_taint(tolerations, spec.get("taints"))
    if taint is not None:
        return f"the node has the taint {_taint_text(taint)}, which the pod does not tolerate"
    if not matches_node_selector(pod_spec.get("nodeSelector"), _labels(node)):
        return "the node's labels do not match the pod's nodeSelector"
    if not matches_required_affinity(pod_spec.get("affinity"), node):
        return "the node does not match the pod's required node affinity"
    return ""
