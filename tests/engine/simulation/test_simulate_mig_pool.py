"""`numatopo simulate --mig-pool`: a share of the A100 (G3) nodes split into MIG devices,
the trace's small fractional pods asking for one, everything else kept off the pool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from numatopo_cli.main import main
from numatopo_engine.simulation.cluster import build_cluster
from numatopo_engine.simulation.layouts import TopologyMap
from numatopo_engine.simulation.mig_pool import (
    MigPool,
    MigPoolError,
    apply_mig_pool,
    parse_mig_pool,
)
from numatopo_engine.simulation.trace import NodeRow, PodRow

NODES = [NodeRow(f"g3-{i}", 96_000, 786_432, 8, "G3") for i in range(4)] + [
    NodeRow(f"t4-{i}", 32_000, 131_072, 2, "T4") for i in range(2)
]
PODS = [
    PodRow("small", 4000, 8192, 1, 300),  # fits a 3g.40gb device (428 milli): MIG
    PodRow("half", 4000, 8192, 1, 500),  # too big for one: stays on whole GPUs
    PodRow("whole", 8000, 8192, 2, 1000),
    PodRow("cpu", 2000, 4096, 0, 0),
    PodRow("t4-only", 4000, 8192, 1, 200, gpu_spec=("T4",)),
]


def test_parse() -> None:
    assert MigPool(0.25, "1g.10gb", ("G3",)) == parse_mig_pool("0.25:1g.10gb")
    assert ("G3", "V100M32") == parse_mig_pool("1:7g.80gb:G3,V100M32").models
    for bad, words in [
        ("0.5", "SHARE:PROFILE"), ("x:1g.10gb", "not a number"), ("0:1g.10gb", "(0, 1]"),
        ("0.5:1g.5gb", "unknown profile"),
    ]:  # fmt: skip
        with pytest.raises(MigPoolError, match=words.replace("(", r"\(").replace(")", r"\)")):
            parse_mig_pool(bad)


def test_pool_nodes_become_mig_devices_on_their_gpus_numa(topology_map: TopologyMap) -> None:
    plan = apply_mig_pool(NODES, PODS, topology_map, parse_mig_pool("0.5:3g.40gb"), seed=7)
    pool = [n for n in plan.nodes if n.model == "G3/mig-3g.40gb"]
    assert (2, 32, 2) == (len(pool), plan.mig_devices, plan.pool_nodes)
    assert {16} == {n.gpus for n in pool}  # 8 GPUs x 2 devices
    cluster = build_cluster(plan.nodes, plan.topology_map)
    node = next(n for n in cluster.nodes if n.model == "G3/mig-3g.40gb")
    spec = node.shape.spec
    # nvswitch-8gpu-2numa: GPUs 0-3 on NUMA 0, 4-7 on NUMA 1; each GPU's two devices follow it.
    assert [0] * 8 + [1] * 8 == [g.numa for g in spec.gpus]
    assert [] == spec.gpu_links  # MIG turns NVLink peer-to-peer off


def test_small_fractional_pods_go_to_the_pool_and_nothing_else_does(
    topology_map: TopologyMap,
) -> None:
    plan = apply_mig_pool(NODES, PODS, topology_map, parse_mig_pool("0.5:3g.40gb"), seed=7)
    by_name = {p.name: p for p in plan.workload}
    assert 1 == plan.mig_pods
    assert (1, 1000, ("G3/mig-3g.40gb",)) == (
        by_name["small"].num_gpu, by_name["small"].gpu_milli, by_name["small"].gpu_spec,
    )  # fmt: skip
    cluster = build_cluster(plan.nodes, plan.topology_map)
    pool = {i for i, n in enumerate(cluster.nodes) if n.model.endswith("/mig-3g.40gb")}
    assert set(cluster.candidates(by_name["small"])) == pool
    for name in ("half", "whole", "t4-only"):
        found = set(cluster.candidates(by_name[name]))
        assert found
        assert not found & pool, name
    assert pool <= set(cluster.candidates(by_name["cpu"]))


def test_no_eligible_node_is_an_error(topology_map: TopologyMap) -> None:
    with pytest.raises(MigPoolError, match="no node of model A100X"):
        apply_mig_pool(NODES, PODS, topology_map, MigPool(0.5, "1g.10gb", ("A100X",)), seed=1)


def run(argv: list[str]) -> int:
    return main(["simulate", *argv])


def test_cli_reports_the_pool_and_places_mig_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"g3-{i},96000,786432,8,G3\n" for i in range(6))
        + "".join(f"t4-{i},32000,131072,2,T4\n" for i in range(4))
    )
    argv = ["--nodes", str(nodes), "--limit", "300", "--scorer", "numatopo,best-fit"]
    code = run([*argv, "--mig-pool", "0.5:3g.40gb", "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert 0 == code
    assert {"resource": "nvidia.com/mig-3g.40gb", "nodes": 3, "devices": 48} == {
        k: out["migPool"][k] for k in ("resource", "nodes", "devices")
    }
    assert out["migPool"]["pods"] > 0
    assert all(s["placed"] > 0 for s in out["strategies"])
    code = run([*argv, "--mig-pool", "0.5:3g.40gb"])
    assert (
        "MIG pool: 3 nodes split into 48 nvidia.com/mig-3g.40gb devices" in capsys.readouterr().out
    )


def test_cli_refuses_a_bad_pool(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run(["--mig-pool", "2:1g.10gb"])
    assert "share must be in (0, 1]" in capsys.readouterr().err
