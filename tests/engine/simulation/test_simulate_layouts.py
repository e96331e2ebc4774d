"""Trace nodes -> real node layouts."""

from __future__ import annotations

import pytest

from numatopo_engine.simulation.layouts import (
    LinkTable,
    TopologyMapError,
    build_node_spec,
    parse_topology_map,
)
from numatopo_engine.simulation.trace import NodeRow


def spec_of(topology_map, model: str, gpus: int, cpu_milli: int = 96000):
    row = NodeRow("n0", cpu_milli, 393216, gpus, model)
    return build_node_spec(row, topology_map.layout_for(model, gpus))


@pytest.mark.parametrize(
    ("model", "gpus", "expected"),
    [
        pytest.param(
            "V100M32",
            8,
            ((0, 0, 0, 0, 1, 1, 1, 1), 50.0, 225.0),
            id="v100-8gpu-is-a-hybrid-cube-mesh",
        ),
        pytest.param("G3", 8, ((0, 0, 0, 0, 1, 1, 1, 1), 300.0, 1800.0), id="g3-8gpu-is-nvswitch"),
        pytest.param("T4", 2, ((0, 1), 0.0, 0.0), id="t4-2gpu-pcie-one-per-socket"),
        pytest.param("V100M16", 4, ((0, 0, 1, 1), 0.0, 0.0), id="v100-4gpu-pcie-split"),
        pytest.param("unknown", 1, ((0,), 0.0, 0.0), id="unknown-model-gets-the-default"),
    ],
)
def test_layout_per_model(topology_map, model, gpus, expected):
    links = LinkTable(spec_of(topology_map, model, gpus))

    assert expected == (links.gpu_numa, links.best_aggregate(2), links.best_aggregate(4))


@pytest.mark.parametrize(
    ("cpu_milli", "expected"),
    [
        pytest.param(96000, (2, 96, 48), id="96-cpus-two-sockets-ht"),
        pytest.param(82000, (2, 82, 82), id="odd-cores-per-socket-no-ht"),
        pytest.param(8000, (2, 8, 4), id="small-box"),
    ],
)
def test_cpus_scale_to_the_node(topology_map, cpu_milli, expected):
    spec = spec_of(topology_map, "G2", 8, cpu_milli)

    assert expected == (len(spec.numa_nodes), len(spec.cpus), len({c.core for c in spec.cpus}))


def test_memory_is_split_over_the_numa_nodes(topology_map):
    spec = spec_of(topology_map, "G2", 8)

    assert [196608 << 20, 196608 << 20] == [n.memory_bytes for n in spec.numa_nodes]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param({}, "'layouts' must be a non-empty object", id="no-layouts"),
        pytest.param(
            {"layouts": {"a": {}}, "default": "b"}, "unknown layout 'b'", id="bad-default"
        ),
        pytest.param(
            {"layouts": {"a": {"nvlinks": [[0, 0, 1]]}}, "default": "a"},
            "is not a link",
            id="self-link",
        ),
        pytest.param(
            {"layouts": {"a": {}}, "models": {"X": {"8": "zz"}}, "default": "a"},
            "model 'X' (8 GPUs) names unknown layout 'zz'",
            id="model-names-unknown-layout",
        ),
    ],
)
def test_bad_topology_maps_are_explained(data, message):
    with pytest.raises(TopologyMapError) as caught:
        parse_topology_map(data)

    assert message in str(caught.value)
