"""The checked-in CRD is exactly what the model generates, and it is structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from numatopo_cli.commands.crd import render

REPO = Path(__file__).resolve().parents[2]


def test_checked_in_crd_matches_generator() -> None:
    """Regenerate with `numatopo crd > crds/numatopology.yaml` when the model changes."""
    assert render() == (REPO / "crds" / "numatopology.yaml").read_text()


def _walk(schema: dict[str, Any], path: str = "") -> list[str]:
    problems = []
    for banned in ("$ref", "anyOf", "oneOf", "allOf", "const", "$defs", "title"):
        if banned in schema:
            problems.append(f"{path}: {banned}")
    if "properties" in schema and "additionalProperties" in schema:
        problems.append(f"{path}: properties and additionalProperties together")
    if "type" not in schema and path:
        problems.append(f"{path}: no type")
    for name, sub in schema.get("properties", {}).items():
        problems += _walk(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            problems += _walk(schema[key], f"{path}[{key}]")
    return problems


def test_crd_contract() -> None:
    crd = yaml.safe_load(render())
    version = crd["spec"]["versions"][0]
    columns = [c["name"] for c in version["additionalPrinterColumns"]]

    assert [] == _walk(version["schema"]["openAPIV3Schema"])
    assert [
        "NUMA",
        "CPUS",
        "GPUS",
        "FREE-CPUS",
        "FREE-GPUS",
        "GPU-MODE",
        "DRA",
        "POLICY",
        "AGE",
    ] == columns
    # Which devices DRA drivers publish, by driver and pool: `kubectl get ntp -o wide`.
    (dra,) = [c for c in version["additionalPrinterColumns"] if c["name"] == "DRA"]
    assert (dra["jsonPath"], dra["priority"]) == (".status.dra.summary", 1)
    assert {"status": {}} == version["subresources"]
    assert ["numatopo", "ntp"] == crd["spec"]["names"]["shortNames"]
    assert "numatopology" == crd["spec"]["names"]["singular"]
    assert "Cluster" == crd["spec"]["scope"]


def test_conditions_merge_by_type_under_server_side_apply() -> None:
    """The exporter and the agent each apply only their own conditions; the API server
    keeps both only when the list is a map keyed by `type` (an atomic list is replaced
    whole by each apply, so the last writer would drop the other's conditions)."""
    crd = yaml.safe_load(render())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    conditions = status["properties"]["conditions"]

    assert ("map", ["type"]) == (
        conditions.get("x-kubernetes-list-type"),
        conditions.get("x-kubernetes-list-map-keys"),
    )
    # A map key must be required, or the API server refuses the CRD.
    assert "type" in conditions["items"]["required"]
    assert "string" == status["properties"]["heartbeat"]["type"]


def test_checked_in_network_topology_crd_matches_generator() -> None:
    """Regenerate with `numatopo crd networktopology > crds/networktopology.yaml`."""
    assert render("networktopology") == (REPO / "crds" / "networktopology.yaml").read_text()


def test_network_topology_crd_contract() -> None:
    crd = yaml.safe_load(render("networktopology"))
    version = crd["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    levels = schema["properties"]["spec"]["properties"]["levels"]

    assert [] == _walk(schema)
    assert ["LEVELS", "DOMAINS", "FREE-GPUS", "AGE"] == [
        c["name"] for c in version["additionalPrinterColumns"]
    ]
    assert {"status": {}} == version["subresources"]
    assert (["nettopo"], "Cluster", "networktopologies.numatopo.io") == (
        crd["spec"]["names"]["shortNames"],
        crd["spec"]["scope"],
        crd["metadata"]["name"],
    )
    # The API server refuses a topology without levels, as the model does.
    assert (1, 16) == (levels["minItems"], levels["maxItems"])
    assert {"domains", "freeGPUs", "largestFreeDomain", "conditions"} == set(
        schema["properties"]["status"]["properties"]
    )
