"""Rendering the chart with the real Helm engine (helm-python-sdk's bundled Helm v4).

`render(values)` returns every manifest of a `helm install` as parsed YAML documents;
no cluster and no helm binary are involved. `tests/chart/values/*.yaml` are the value
sets the tests render besides the defaults (usable with `helm install -f` as well).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "helm" / "numatopo"
RELEASE = "numatopo"
NAMESPACE = "numatopo-system"

Manifest = dict[str, Any]
Render = Callable[[dict[str, Any] | None], list[Manifest]]
Find = Callable[[list[Manifest], str, str], Manifest]


@pytest.fixture(scope="session")
def chart() -> Iterator[Any]:
    with helm.Chart.load(str(CHART_DIR)) as loaded:
        yield loaded


def parse_manifests(rendered: dict[str, str]) -> list[Manifest]:
    """Every non-empty YAML document of a render, in template-name order."""
    documents: list[Manifest] = []
    for name in sorted(rendered):
        documents.extend(d for d in yaml.safe_load_all(rendered[name]) if d)
    return documents


@pytest.fixture(scope="session")
def render(chart: Any) -> Render:
    def _render(values: dict[str, Any] | None) -> list[Manifest]:
        rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        return parse_manifests(rendered)

    return _render


@pytest.fixture(scope="session")
def find() -> Find:
    """`find(manifests, kind, name)`: the one manifest of `kind` named `name`."""

    def _find(manifests: list[Manifest], kind: str, name: str) -> Manifest:
        matches = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
        assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
        return matches[0]

    return _find
