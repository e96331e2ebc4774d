"""Build the `Numatopology` and `NetworkTopology` CustomResourceDefinitions from the pydantic
models.

The CRD's OpenAPI schema must be *structural* (Kubernetes rejects `$ref`, `anyOf` with types,
`const`, `title`...), so the pydantic JSON schema is rewritten here: references inlined,
`Optional[X]` turned into `nullable: true`, literals into one-value enums.
"""

from __future__ import annotations

from typing import Any

from numatopo_engine.model import GROUP, KIND, VERSION, Numatopology, WireModel
from numatopo_engine.network_topology import (
    NETWORK_TOPOLOGY_KIND,
    NETWORK_TOPOLOGY_PLURAL,
    NetworkTopology,
)

# Keys of the JSON Schema dialect that a structural OpenAPI v3 schema keeps; not `default`: the
# model owns defaults (not the API server), so stored objects are what the exporter wrote.
_KEPT = {
    "type",
    "description",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "enum",
    "minimum",
    "maximum",
    "pattern",
    "format",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "nullable",
    # Kubernetes' own extensions: how server-side apply merges lists and maps.
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
}


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_resolve(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolve(merged, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        nullable = len(options) != len(node["anyOf"])
        if len(options) != 1:
            raise ValueError(f"cannot express anyOf {node['anyOf']} structurally")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        inner: dict[str, Any] = _resolve({**options[0], **rest}, defs)
        if nullable:
            inner["nullable"] = True
        return inner
    if "allOf" in node and len(node["allOf"]) == 1:
        rest = {k: v for k, v in node.items() if k != "allOf"}
        return _resolve({**node["allOf"][0], **rest}, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "const":
            out["enum"] = [value]
            out.setdefault("type", "string")
        elif key == "properties":
            out[key] = {name: _resolve(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            # `additionalProperties: false` is not allowed next to `properties`; the API server
            # prunes unknown fields of a structural schema anyway.
            if isinstance(value, dict):
                out[key] = _resolve(value, defs)
        elif key in _KEPT:
            out[key] = value
    return out


NUMATOPOLOGY_DESCRIPTION = (
    "Hardware topology of one node (spec, written by the numatopo exporter) and "
    "what is free on it (status, written by the numatopo operator)."
)
NETWORK_TOPOLOGY_DESCRIPTION = (
    "How nodes group into network domains, widest level first, each level a node "
    "label (spec, written by the cluster admin), and what is free per domain (status, "
    "written by the numatopo operator)."
)


def structural_schema(model: type[WireModel], description: str) -> dict[str, Any]:
    """The openAPIV3Schema of the CRD: spec and status from the model, metadata left to the API."""
    raw = model.model_json_schema(by_alias=True, mode="serialization")
    schema = _resolve(raw, raw.get("$defs", {}))
    schema["properties"]["metadata"] = {"type": "object"}
    schema["description"] = description
    schema["required"] = ["spec"]
    return dict(schema)


def _manifest(
    kind: str, plural: str, short_names: list[str], columns: list[dict[str, Any]], schema: object
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/name": "numatopo"}},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["numatopo"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def crd_manifest() -> dict[str, Any]:
    """The Numatopology CustomResourceDefinition object, ready to be dumped as YAML."""
    columns: list[dict[str, Any]] = [
        {"name": "NUMA", "type": "integer", "jsonPath": ".spec.capacity.numaNodes"},
        {"name": "CPUS", "type": "integer", "jsonPath": ".spec.capacity.cpus"},
        {"name": "GPUS", "type": "integer", "jsonPath": ".spec.capacity.gpus"},
        {"name": "FREE-CPUS", "type": "integer", "jsonPath": ".status.freeCPUs"},
        {"name": "FREE-GPUS", "type": "integer", "jsonPath": ".status.freeGPUs"},
        {"name": "GPU-MODE", "type": "string", "jsonPath": ".status.gpuMode"},
        {"name": "DRA", "type": "string", "jsonPath": ".status.dra.summary", "priority": 1},
        {"name": "POLICY", "type": "string", "jsonPath": ".spec.policies.topologyManagerPolicy"},
        {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    schema = structural_schema(Numatopology, NUMATOPOLOGY_DESCRIPTION)
    return _manifest(KIND, Numatopology.plural, ["numatopo", "ntp"], columns, schema)


def network_topology_crd_manifest() -> dict[str, Any]:
    """The NetworkTopology CRD object (DOMAINS: those of the narrowest level)."""
    columns = [
        {"name": "LEVELS", "type": "string", "jsonPath": ".spec.levels[*].nodeLabel"},
        {"name": "DOMAINS", "type": "integer", "jsonPath": ".status.domains[-1:].count"},
        {"name": "FREE-GPUS", "type": "integer", "jsonPath": ".status.freeGPUs"},
        {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    schema = structural_schema(NetworkTopology, NETWORK_TOPOLOGY_DESCRIPTION)
    return _manifest(NETWORK_TOPOLOGY_KIND, NETWORK_TOPOLOGY_PLURAL, ["nettopo"], columns, schema)


CRDS = {"numatopology": crd_manifest, "networktopology": network_topology_crd_manifest}
"""`numatopo crd <name>` -> its manifest; `crds/<name>.yaml` holds each."""
