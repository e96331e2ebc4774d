"""Fixtures of the simulation tests: the real openb trace and the default topology map."""

from __future__ import annotations

import csv
import json
from importlib import resources
from pathlib import Path

import pytest

from numatopo_engine.simulation.layouts import TopologyMap, parse_topology_map
from numatopo_engine.simulation.trace import NodeRow, PodRow, parse_node_rows, parse_pod_rows

ALIBABA = Path(__file__).resolve().parents[2] / "fixtures" / "alibaba"


@pytest.fixture(scope="session")
def trace_nodes() -> list[NodeRow]:
    with (ALIBABA / "openb_node_list_gpu_node.csv").open() as f:
        return parse_node_rows(csv.DictReader(f))


@pytest.fixture(scope="session")
def trace_pods() -> list[PodRow]:
    with (ALIBABA / "openb_pod_list_default.csv").open() as f:
        return parse_pod_rows(csv.DictReader(f))


@pytest.fixture(scope="session")
def topology_map() -> TopologyMap:
    text = resources.files("numatopo_cli.samples.simulate").joinpath("topology-map.json")
    return parse_topology_map(json.loads(text.read_text()))
