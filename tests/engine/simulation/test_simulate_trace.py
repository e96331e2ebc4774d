"""Trace rows and the replayed workload."""

from __future__ import annotations

import pytest

from numatopo_engine.simulation.trace import (
    Arrival,
    PodRow,
    TraceError,
    build_workload,
    parse_node_rows,
    parse_pod_rows,
)

POD_HEADER = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "creation_time",
)


def pod_row(*values: str) -> dict[str, str]:
    return dict(zip(POD_HEADER, values, strict=True))


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        pytest.param(
            pod_row("a", "12000", "16384", "1", "1000", "", "0"), (1, False), id="one-whole-gpu"
        ),
        pytest.param(
            pod_row("b", "6000", "12288", "1", "460", "", "5"), (0, True), id="fractional-gpu"
        ),
        pytest.param(
            pod_row("c", "88000", "327680", "8", "1000", "", "9"), (8, False), id="eight-gpus"
        ),
        pytest.param(pod_row("d", "4000", "100", "0", "0", "", "9"), (0, False), id="cpu-only"),
    ],
)
def test_pod_gpu_kind(row, expected):
    pod = parse_pod_rows([row])[0]

    assert expected == (pod.whole_gpus, pod.fractional)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        pytest.param(
            pod_row("a", "lots", "1", "1", "1000", "", "0"),
            "line 2: column 'cpu_milli' is 'lots'",
            id="not-a-number",
        ),
        pytest.param(
            pod_row("a", "1", "1", "1", "1500", "", "0"),
            "more than one GPU",
            id="gpu-milli-over-one",
        ),
        pytest.param({"name": "a"}, "missing column(s) cpu_milli", id="missing-columns"),
    ],
)
def test_bad_pod_rows_are_named(row, message):
    with pytest.raises(TraceError) as caught:
        parse_pod_rows([row])

    assert message in str(caught.value)


def test_gpu_spec_lists_the_allowed_models():
    pod = parse_pod_rows([pod_row("a", "1000", "1", "1", "1000", "V100M16|V100M32", "0")])[0]

    assert ("V100M16", "V100M32") == pod.gpu_spec


def test_node_rows_keep_the_model():
    rows = [{"sn": "n0", "cpu_milli": "96000", "memory_mib": "393216", "gpu": "8", "model": "G2"}]

    assert "G2" == parse_node_rows(rows)[0].model


PODS = [PodRow(f"p{i}", 1000, 1, 1, 1000, creation_time=100 - i) for i in range(10)]


@pytest.mark.parametrize(
    ("tune", "expected_gpus"),
    [
        pytest.param(1.3, 13, id="tuned-up-with-copies"),
        pytest.param(0.5, 5, id="tuned-down-by-dropping"),
        pytest.param(0, 10, id="untuned"),
    ],
)
def test_workload_scales_to_tune_times_capacity(tune, expected_gpus):
    workload = build_workload(PODS, capacity_gpu_milli=10_000, tune=tune, seed=1)

    assert expected_gpus == sum(p.num_gpu for p in workload)


def test_workload_is_the_same_for_the_same_seed():
    first = build_workload(PODS, capacity_gpu_milli=10_000, tune=1.3, seed=7)
    again = build_workload(PODS, capacity_gpu_milli=10_000, tune=1.3, seed=7)

    assert [p.name for p in first] == [p.name for p in again]


def test_creation_arrival_follows_creation_time():
    workload = build_workload(
        PODS, capacity_gpu_milli=10_000, tune=0, seed=7, arrival=Arrival.CREATION
    )

    assert [f"p{i}" for i in range(9, -1, -1)] == [p.name for p in workload]
