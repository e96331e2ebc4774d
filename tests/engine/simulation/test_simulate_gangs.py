"""Multi-node jobs on a leaf/spine cluster (`simulation.gangs`, `simulation.leafspine`)
and `numatopo simulate --multi-node`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from numatopo_cli.main import main
from numatopo_engine.model import Numatopology
from numatopo_engine.simulation.gangs import HELIOS_GPU_CDF, draw_jobs, simulate_gangs
from numatopo_engine.simulation.layouts import TopologyMap
from numatopo_engine.simulation.leafspine import (
    LEVELS,
    ClusterFile,
    LeafSpine,
    NodeShapeWeight,
    generate,
    shapes_from_rows,
)
from numatopo_engine.simulation.trace import NodeRow

GB200 = Path(__file__).resolve().parents[2] / "fixtures" / "topologies" / "gb200-like.json"


@pytest.fixture(scope="module")
def shapes(trace_nodes: list[NodeRow], topology_map: TopologyMap):  # type: ignore[no-untyped-def]
    return shapes_from_rows(trace_nodes, topology_map, gpus=8)


def test_shapes_are_the_8_gpu_models_weighed_by_count(shapes, trace_nodes) -> None:  # type: ignore[no-untyped-def]
    counts = Counter(n.model for n in trace_nodes if n.gpus == 8)
    assert {s.name: s.weight for s in shapes} == {f"{m}x8": float(c) for m, c in counts.items()}
    assert all(len(s.topology.gpus) == 8 for s in shapes)


def test_generated_tree(shapes) -> None:  # type: ignore[no-untyped-def]
    cluster = generate(LeafSpine(2, 2, 3, 4), shapes, seed=3)
    assert len(cluster.nodes) == 48
    tree = cluster.tree(LEVELS)
    assert len(tree.domains(LEVELS[0])) == 2
    assert len(tree.domains(LEVELS[1])) == 4
    leaves = tree.domains(LEVELS[2])
    assert len(leaves) == 12
    shape_of = {n.name: n.shape for n in cluster.nodes}
    for inside in leaves.values():
        assert len(inside) == 4
        assert len({shape_of[n] for n in inside}) == 1  # a leaf is one shape
    # names do not follow the tree: walking by name crosses leaves
    by_name = sorted(shape_of)
    assert by_name != tree.order
    # the file round-trips
    again = ClusterFile.model_validate(json.loads(json.dumps(cluster.to_wire())))
    assert again == cluster


@pytest.mark.parametrize("text", ["2x2x4", "0x1x1x1", "ax1x1x1", ""])
def test_layout_parse_errors(text: str) -> None:
    with pytest.raises(ValueError, match="BLOCKSxSPINESxLEAVESxNODES"):
        LeafSpine.parse(text)


def test_job_sizes_follow_the_cdf() -> None:
    jobs = draw_jobs(
        20000, cdf=HELIOS_GPU_CDF["venus"], node_gpus=8, cluster_gpus=1024, load=0.9, seed=5
    )
    share = Counter(j.gpus for j in jobs)
    assert share[1] / len(jobs) == pytest.approx(0.518, abs=0.015)
    assert share[8] / len(jobs) == pytest.approx(0.252, abs=0.015)
    assert 12 not in share  # an empty bucket (90.0 -> 90.0)
    big = [j for j in jobs if j.gpus == 32]
    assert big
    assert all((j.pods, j.gpus_per_pod) == (4, 8) for j in big)
    assert all(j.pods == 1 for j in jobs if j.gpus <= 8)
    arrivals = [j.arrival for j in jobs]
    assert arrivals == sorted(arrivals)
    # offered load: rate x mean GPUs x mean run time = 0.9 x 1024
    mean_gpus = sum(j.gpus for j in jobs) / len(jobs)
    rate = len(jobs) / arrivals[-1]
    assert rate * mean_gpus == pytest.approx(0.9 * 1024, rel=0.1)


def test_cdf_must_end_at_100() -> None:
    with pytest.raises(ValueError, match="100"):
        draw_jobs(1, cdf=[(1, 50.0)], node_gpus=8, cluster_gpus=8, load=1, seed=0)


def test_numatopo_keeps_groups_in_leaves(shapes) -> None:  # type: ignore[no-untyped-def]
    cluster = generate(LeafSpine(1, 2, 4, 4), shapes, seed=1)
    jobs = draw_jobs(
        160, cdf=HELIOS_GPU_CDF["venus"], node_gpus=8, cluster_gpus=8 * 32, load=0.9, seed=1
    )
    result = simulate_gangs(cluster, LEVELS, jobs, required=LEVELS[1], seed=1)
    by = {s.strategy: s for s in result.strategies}
    assert set(by) == {"numatopo", "required-only", "blind"}
    kept = [j for j in jobs if j.pods <= 16]
    assert result.jobs == len(kept)
    assert result.too_big == len(jobs) - len(kept)
    for s in by.values():  # everything runs once the queue drains
        assert s.placed == s.jobs
        assert s.waiting == 0
    assert by["numatopo"].required_domain_share == 1.0
    assert by["required-only"].required_domain_share == 1.0
    numatopo, other = by["numatopo"], by["required-only"]
    assert numatopo.one_leaf_share is not None
    assert other.one_leaf_share is not None
    assert numatopo.one_leaf_share > other.one_leaf_share
    assert numatopo.mean_neighbour_hops is not None
    assert other.mean_neighbour_hops is not None
    assert numatopo.mean_neighbour_hops < other.mean_neighbour_hops
    assert numatopo.leaf_fragmentation < by["blind"].leaf_fragmentation


def test_unknown_required_level(shapes) -> None:  # type: ignore[no-untyped-def]
    cluster = generate(LeafSpine(1, 1, 1, 2), shapes, seed=1)
    with pytest.raises(ValueError, match="required level"):
        simulate_gangs(cluster, LEVELS, [], required="x/y")


def test_cli_multi_node(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    written = tmp_path / "cluster.json"
    plot = tmp_path / "gangs.png"
    args = ["simulate", "--multi-node", "--layout", "1x2x2x4", "--jobs", "60", "--seed", "2"]
    code = main([*args, "--write-cluster", str(written), "--plot", str(plot)])
    out = capsys.readouterr().out
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()[1:]] == [
        "STRATEGY", "numatopo", "required-only", "blind",
    ]  # fmt: skip
    assert plot.stat().st_size > 10_000
    assert len(ClusterFile.model_validate_json(written.read_text()).nodes) == 16
    code = main([*args, "-o", "json", "--scorer", "blind"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [s["strategy"] for s in data["strategies"]] == ["blind"]
    assert data["sizes"] == "helios-venus"


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--layout", "1x2"], "--layout"),
        (["--scorer", "best-fit"], "with --multi-node choose from"),
        (["--jobs", "0"], "--jobs must be positive"),
    ],
)
def test_cli_bad_input(capsys: pytest.CaptureFixture[str], extra: list[str], words: str) -> None:
    code = main(["simulate", "--multi-node", "--layout", "1x1x1x2", *extra])
    assert code == 2
    assert words in capsys.readouterr().err


def test_jobs_that_never_fit_do_not_stall_the_queue() -> None:
    """On 4-GPU nodes, 8-GPU pods fit nowhere: those jobs are left out, the rest run."""
    spec = Numatopology.model_validate(json.loads(GB200.read_text())).spec
    cluster = generate(LeafSpine(1, 1, 2, 2), [NodeShapeWeight("gb200", spec, 1.0)], seed=1)
    jobs = draw_jobs(
        60, cdf=HELIOS_GPU_CDF["venus"], node_gpus=8, cluster_gpus=16, load=0.5, seed=4
    )
    result = simulate_gangs(cluster, LEVELS, jobs, required=LEVELS[1], strategies=["numatopo"])
    never = [j for j in jobs if j.gpus_per_pod > 4 or j.pods > 4]
    assert never
    assert result.too_big == len(never)
    (only,) = result.strategies
    assert only.placed == only.jobs == len(jobs) - len(never)
    assert only.waiting == 0


def test_cli_group_options_are_kept_by_numatopo(capsys: pytest.CaptureFixture[str]) -> None:
    """A cap of 2 pods per leaf and slices of 2 ranks per leaf: numatopo keeps both in
    every multi-node job it places; the first-fit strategies, which ignore them, do not.
    With a preferred spine (and no required one) it keeps more jobs in one spine."""
    args = ["simulate", "--multi-node", "--layout", "1x2x2x4", "--jobs", "200", "--seed", "2"]
    code = main([*args, "--max-per-domain", "leaf=2", "--slice", "leaf=2", "--preferred", "spine"])
    lines = capsys.readouterr().out.splitlines()
    said = {line.split(":")[0]: line for line in lines if "kept" in line}
    preferred = {
        name: float(line.split("preferred domain ")[1].split("%")[0]) for name, line in said.items()
    }
    assert code == 0
    assert "cap and slices kept 100.0%" in said["numatopo"]
    assert "cap and slices kept 100.0%" not in said["blind"]
    assert preferred["numatopo"] > preferred["blind"]


@pytest.mark.parametrize("flag", ["--slice", "--max-per-domain"])
def test_cli_level_count_errors(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    code = main(["simulate", "--multi-node", "--layout", "1x1x1x2", flag, "rack=2"])
    assert code == 2
    assert f"{flag} 'rack=2': expected LEVEL=N" in capsys.readouterr().err
