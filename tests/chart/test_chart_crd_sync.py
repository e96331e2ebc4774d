"""The chart's CRD templates are `crds/*.yaml`, kept identical by scripts/sync_crd.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "crds" / "numatopology.yaml"
TEMPLATE = REPO / "helm" / "numatopo" / "templates" / "crd-numatopo.io_numatopologies.yaml"
CRD_NAME = "numatopologies.numatopo.io"


def load_sync_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sync_crd", REPO / "scripts" / "sync_crd.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NETWORK_SOURCE = REPO / "crds" / "networktopology.yaml"
NETWORK_TEMPLATE = (
    REPO / "helm" / "numatopo" / "templates" / "crd-numatopo.io_networktopologies.yaml"
)
PAIRS = [
    pytest.param(SOURCE, TEMPLATE, CRD_NAME, id="numatopology"),
    pytest.param(
        NETWORK_SOURCE, NETWORK_TEMPLATE, "networktopologies.numatopo.io", id="networktopology"
    ),
]


@pytest.mark.parametrize(("source", "template", "name"), PAIRS)
def test_template_is_what_the_sync_script_writes(source: Path, template: Path, name: str) -> None:
    """Fails when crds/ changed and `python scripts/sync_crd.py` was not run."""
    sync_crd = load_sync_script()

    assert sync_crd.build_template(source.read_text(), source.name) == template.read_text()


def test_every_crd_source_is_synced() -> None:
    """A CRD added to crds/ is copied into the chart too."""
    sync_crd = load_sync_script()

    assert sorted((REPO / "crds").glob("*.yaml")) == sorted(s for s, _ in sync_crd.PAIRS)


@pytest.mark.parametrize(("source", "template", "name"), PAIRS)
def test_rendered_crd_equals_the_source(
    render: Any, find: Any, source: Path, template: Path, name: str
) -> None:
    """Helm's output carries the source's spec unchanged, under the same name."""
    rendered = find(render(None), "CustomResourceDefinition", name)

    assert yaml.safe_load(source.read_text())["spec"] == rendered["spec"]


@pytest.mark.parametrize(
    ("crds", "expected"),
    [
        pytest.param({"enabled": True, "keep": True}, {"keep"}, id="kept-on-uninstall"),
        pytest.param({"enabled": True, "keep": False}, set(), id="deleted-on-uninstall"),
        pytest.param({"enabled": False, "keep": True}, None, id="not-installed"),
    ],
)
def test_crd_gating_and_resource_policy(
    render: Any, crds: dict[str, bool], expected: set[str] | None
) -> None:
    manifests = render({"crds": crds})
    names = (CRD_NAME, "networktopologies.numatopo.io")
    found = [m for m in manifests if m["metadata"]["name"] in names]
    actual = [
        {m["metadata"].get("annotations", {}).get("helm.sh/resource-policy")} - {None}
        for m in found
    ]

    assert ([expected] * 2 if expected is not None else []) == actual


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("kind: X\nmetadata:\n  name: a\n", "no top-level `spec:`", id="no-spec"),
        pytest.param("metadata:\n  x: 1\nspec:\n  a: 1\n", "one `metadata.name`", id="no-name"),
        pytest.param(
            "metadata:\n  name: a\nspec:\n  d: '{{ x }}'\n", "contains `{{`", id="template-braces"
        ),
    ],
)
def test_sync_script_refuses_sources_it_cannot_copy(text: str, expected: str) -> None:
    sync_crd = load_sync_script()

    with pytest.raises(sync_crd.SyncError) as caught:
        sync_crd.build_template(text)

    assert expected in str(caught.value)
