"""Validation against the published CRDs of the formats numatopo exports
(tests/fixtures/schemas): NFD's NodeResourceTopology and Volcano's Numatopology.

The API server prunes fields a structural schema does not declare, silently; so an
object is checked as the server would store it *and* for fields it would drop: every
object schema with `properties` is closed (except `metadata`, which the server checks
on its own). `x-kubernetes-int-or-string` comes as `anyOf: [integer, string]` with a
`pattern` that JSON Schema applies to strings only, as the server does.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SCHEMAS = Path(__file__).resolve().parent / "fixtures" / "schemas"
NRT_CRD = SCHEMAS / "noderesourcetopologies.yaml"
VOLCANO_CRD = SCHEMAS / "nodeinfo.volcano.sh_numatopologies.yaml"


def _closed(schema: dict[str, Any], *, top: bool = True) -> dict[str, Any]:
    preserves = schema.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in schema and "additionalProperties" not in schema and not preserves:
        schema["additionalProperties"] = False
    for name, child in schema.get("properties", {}).items():
        if not (top and name == "metadata"):
            _closed(child, top=False)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            _closed(schema[key], top=False)
    return schema


def crd_schema(path: Path, version: str) -> dict[str, Any]:
    """The `openAPIV3Schema` of `version` in the CRD at `path`, closed (see above)."""
    crd = yaml.safe_load(path.read_text())
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            return _closed(copy.deepcopy(served["schema"]["openAPIV3Schema"]))
    raise KeyError(f"{path.name} has no version {version}")


def schema_errors(path: Path, version: str, obj: dict[str, Any]) -> list[str]:
    """Every way `obj` breaks the published schema, as `path: message` lines."""
    validator = jsonschema.Draft7Validator(crd_schema(path, version))
    return sorted(
        f"{'/'.join(str(p) for p in error.absolute_path)}: {error.message}"
        for error in validator.iter_errors(obj)
    )


def nrt_errors(obj: dict[str, Any]) -> list[str]:
    return schema_errors(NRT_CRD, "v1alpha2", obj)


def volcano_errors(obj: dict[str, Any]) -> list[str]:
    return schema_errors(VOLCANO_CRD, "v1alpha1", obj)
