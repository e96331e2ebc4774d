"""The Grafana dashboard the chart ships: rendered into its ConfigMap, and every query
names a metric the code exports (read from the metrics' own Prometheus registries)."""

from __future__ import annotations

import json
import re
from typing import Any

from numatopo_exporter.metrics import AgentMetrics, ExporterMetrics, SteeringMetrics
from numatopo_operator.metrics import Metrics

from .conftest import RELEASE, Find, Render

DASHBOARD = f"{RELEASE}-dashboard"
# A metric name inside PromQL: what follows is a label matcher, range, `)` or operator.
METRIC = re.compile(r"\b(numatopo_[a-z0-9_]+)\b")


def exported_names() -> set[str]:
    """Every series name the components' registries expose: counters as `_total` (and
    `_created`), histograms as `_bucket`, `_sum`, `_count`."""
    registries = [
        Metrics().registry,
        ExporterMetrics().registry,
        AgentMetrics().registry,
        SteeringMetrics().registry,
    ]
    names: set[str] = set()
    for registry in registries:
        for family in registry.collect():
            names.add(family.name)
            names.update(sample.name for sample in family.samples)
            # A labelled family has no samples until a label is used: name them by type.
            suffixes = {
                "counter": ("_total", "_created"),
                "histogram": ("_bucket", "_sum", "_count"),
            }
            names.update(family.name + suffix for suffix in suffixes.get(family.type, ()))
    return names


def _dashboard(manifests: list[dict[str, Any]], find: Find) -> dict[str, Any]:
    configmap = find(manifests, "ConfigMap", DASHBOARD)
    found: dict[str, Any] = json.loads(configmap["data"]["numatopo.json"])
    return found


def test_dashboard_is_opt_in(render: Render) -> None:
    assert not [m for m in render(None) if m["metadata"]["name"] == DASHBOARD]


def test_dashboard_configmap_carries_the_sidecar_label(render: Render, find: Find) -> None:
    manifests = render(
        {
            "metrics": {
                "grafanaDashboard": {
                    "enabled": True,
                    "labels": {"dashboards": "numatopo"},
                    "namespace": "monitoring",
                }
            }
        }
    )
    configmap = find(manifests, "ConfigMap", DASHBOARD)
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert configmap["metadata"]["labels"]["dashboards"] == "numatopo"
    default = find(
        render({"metrics": {"grafanaDashboard": {"enabled": True}}}), "ConfigMap", DASHBOARD
    )
    assert default["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_every_query_names_an_exported_metric(render: Render, find: Find) -> None:
    dashboard = _dashboard(render({"metrics": {"grafanaDashboard": {"enabled": True}}}), find)
    exported = exported_names()
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    named = {name for query in queries for name in METRIC.findall(query)}
    assert queries
    assert named, "no query names a numatopo metric"
    assert sorted(named - exported) == []
    # What the issue asks the dashboard to show, each by its metric.
    for wanted in (
        "numatopo_decisions_total",
        "numatopo_unsatisfiable_total",
        "numatopo_decision_seconds_bucket",
        "numatopo_realignments_total",
        "numatopo_agent_gpu_mismatches_total",
        "numatopo_group_placement_decisions_total",
        "numatopo_retry_queue_pods",
        "numatopo_event_loop_lag_seconds",
        "numatopo_node_aligned_free_gpus",
    ):
        assert wanted in named, wanted


def test_the_check_sees_a_misspelt_metric() -> None:
    exported = exported_names()
    assert "numatopo_decision_seconds_bucket" in exported
    assert "numatopo_decisions_total" in exported
    assert "numatopo_decision_total" not in exported
    assert "numatopo_ledger_pods_total" not in exported
