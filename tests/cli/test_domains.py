"""`numatopo domains`: reading a cluster file and levels, the tree, a what-if group, SVG."""

from __future__ import annotations

import json
import xml.dom.minidom
from pathlib import Path

import pytest
import yaml

from numatopo_engine.annotations import Assignment, ContainerAssignment
from numatopo_engine.model import Numatopology
from numatopo_engine.simulation.leafspine import ClusterFile, ClusterNode

from .conftest import Run

REPO = Path(__file__).resolve().parents[2]
H100 = REPO / "tests" / "fixtures" / "topologies" / "h100-nvswitch.json"
RACK, HOST = "example.com/rack", "kubernetes.io/hostname"


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    """Two racks of two H100 nodes; r1-a has GPUs 0-5 taken; one node without labels."""
    spec = Numatopology.model_validate(json.loads(H100.read_text())).spec
    busy = Assignment(
        node="r1-a", containers={"c": ContainerAssignment(gpu_indices=[0, 1, 2, 3, 4, 5])}
    )
    nodes = [
        ClusterNode(name="r0-a", shape="h100", labels={RACK: "r0"}),
        ClusterNode(name="r0-b", shape="h100", labels={RACK: "r0"}),
        ClusterNode(name="r1-a", shape="h100", labels={RACK: "r1"}, assignments={"ns/busy": busy}),
        ClusterNode(name="r1-b", shape="h100", labels={RACK: "r1"}),
        ClusterNode(name="loose", shape="h100"),
    ]
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(ClusterFile(shapes={"h100": spec}, nodes=nodes).to_wire()))
    return path


def test_table_counts_free_gpus_per_domain(run: Run, cluster: Path) -> None:
    code, out, _ = run(["domains", "--cluster", cluster, "--levels", RACK, "--nodes"])
    assert code == 0
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert lines["r0"][1:6] == [RACK, "2", "16", "16", "0%"]
    assert lines["r1"][1:6] == [RACK, "2", "16", "10", "38%"]
    assert lines["r1-a"][1:6] == ["node", "1", "8", "2", "75%"]
    assert lines["-"][3:6] == ["1", "8", "8"]
    # r1: 10 free GPUs in a domain 5/8 free; r0: 16 in a free one
    assert f"fragmentation {RACK}: {10 / 26 * (6 / 16):.3f}" in out


def test_network_topology_yaml_and_group(run: Run, cluster: Path, tmp_path: Path) -> None:
    topology = tmp_path / "topology.yaml"
    topology.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "numatopo.io/v1alpha1",
                "kind": "NetworkTopology",
                "metadata": {"name": "default"},
                "spec": {"levels": [{"nodeLabel": RACK}]},
            }
        )
    )
    svg = tmp_path / "tree.svg"
    code, out, _ = run(
        ["domains", "--cluster", cluster, "--network-topology", topology, "--place", "2",
        "--required", RACK, "--nodes", "--svg", svg]
    )  # fmt: skip
    assert code == 0
    assert f"group placed in {RACK}=r0: 2 members on 2 nodes" in out
    ranks = {line.split()[0]: line.split()[-1] for line in out.splitlines() if "node " in line}
    assert ranks["r0-a"] == "0"
    assert ranks["r0-b"] == "1"
    document = xml.dom.minidom.parse(str(svg))
    texts = [t.firstChild.data for t in document.getElementsByTagName("text") if t.firstChild]
    assert {"r0", "r1", "0", "1"} <= set(texts)


def test_group_that_does_not_fit(run: Run, cluster: Path) -> None:
    code, _, err = run(
        ["domains", "--cluster", cluster, "--levels", RACK, "--place", "3", "--required", RACK]
    )
    assert code == 1
    assert "does not fit" in err
    assert "2 domains of example.com/rack" in err


def test_json_output(run: Run, cluster: Path) -> None:
    code, out, _ = run(
        ["domains", "--cluster", cluster, "--levels", f"{RACK},{HOST}", "-o", "json"]
    )
    assert code == 0
    report = json.loads(out)
    assert (report["apiVersion"], report["kind"]) == ("cli.numatopo.io/v1", "DomainsReport")
    assert report["levels"] == [RACK, HOST]
    assert report["placement"] is None
    assert report["domains"][0] == {
        "depth": 0,
        "level": RACK,
        "name": "r0",
        "nodes": 2,
        "gpus": 16,
        "free": 16,
        "ranks": [],
    }


def test_generate(run: Run) -> None:
    code, out, _ = run(["domains", "--generate", "1x2x2x4", "--place", "4", "--gpus", "8"])
    assert code == 0
    assert "topology.k8s.aws/network-node-layer-3" in out
    assert "4 members on 4 nodes, mean hops between neighbouring ranks 1.00" in out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--levels", RACK], "give --cluster"),
        (["--generate", "1x2"], "BLOCKSxSPINESxLEAVESxNODES"),
        (["--generate", "1x1x1x1", "--levels", "bad level"], "--levels"),
        (["--generate", "1x1x1x2", "--place", "1", "--required", "x/y"], "not one of the levels"),
        (["--cluster", "/nonexistent.json", "--levels", RACK], "--cluster /nonexistent.json"),
    ],
)
def test_bad_input(run: Run, args: list[str], words: str) -> None:
    code, _, err = run(["domains", *args])
    assert code == 2
    assert words in err


def test_bad_cluster_file(run: Run, tmp_path: Path, cluster: Path) -> None:
    data = json.loads(cluster.read_text())
    data["nodes"][0]["shape"] = "missing"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    code, _, err = run(["domains", "--cluster", bad, "--levels", RACK])
    assert code == 2
    assert "unknown shape 'missing'" in err
    data = json.loads(cluster.read_text())
    twice = data["nodes"][2]["assignments"]["ns/busy"]
    data["nodes"][2]["assignments"]["ns/again"] = twice
    bad.write_text(json.dumps(data))
    code, _, err = run(["domains", "--cluster", bad, "--levels", RACK])
    assert code == 2
    assert "r1-a" in err


@pytest.mark.parametrize("flag", ["--cluster", "--network-topology"])
def test_files_that_are_not_text(run: Run, tmp_path: Path, cluster: Path, flag: str) -> None:
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    args = {"--cluster": ["--cluster", binary, "--levels", RACK],
            "--network-topology": ["--cluster", cluster, "--network-topology", binary]}  # fmt: skip
    code, _, err = run(["domains", *args[flag]])
    assert code == 2
    assert f"{flag}" in err
    assert "Traceback" not in err
