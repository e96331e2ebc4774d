"""The examples are valid Kubernetes objects that numatopo can place on a real 8-GPU node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from numatopo_cli import main as cli
from numatopo_engine.groups import group_of
from numatopo_engine.model import GROUP
from numatopo_engine.network_topology import NetworkTopology
from numatopo_operator.groups.members import GATE

kubernetes_validate = pytest.importorskip("kubernetes_validate")

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
DGX1 = REPO / "tests" / "fixtures" / "pods" / "nodes" / "dgx1v-v100.json"
DGX_A100_MIG = REPO / "tests" / "fixtures" / "pods" / "nodes" / "dgx-a100-mig.json"
NEWEST = sorted(
    kubernetes_validate.utils.all_versions(), key=lambda v: tuple(map(int, v.split(".")))
)


def as_pod(manifest: dict[str, Any]) -> dict[str, Any]:
    """The pod a manifest runs: itself, or a Job's pod template."""
    if manifest["kind"] == "Pod":
        return manifest
    template = manifest["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": manifest["metadata"]["name"], **template["metadata"]},
        "spec": template["spec"],
    }


WORKLOADS = [
    p for p in EXAMPLES if not yaml.safe_load(p.read_text())["apiVersion"].startswith(GROUP)
]


@pytest.mark.parametrize("example", [pytest.param(p, id=p.stem) for p in WORKLOADS])
def test_example_is_valid_for_kubernetes(example: Path) -> None:
    manifest = yaml.safe_load(example.read_text())

    assert NEWEST[-1].rsplit(".", 1)[0] == kubernetes_validate.validate(
        manifest, NEWEST[-1], strict=True
    )


def test_the_network_topology_example_is_a_valid_object() -> None:
    """numatopo's own kinds are checked against their model (the CRD's source)."""
    manifest = yaml.safe_load((REPO / "examples" / "network-topology.yaml").read_text())

    topology = NetworkTopology.model_validate(manifest)

    assert "default" == topology.metadata.name


def test_the_group_example_declares_a_group_the_topology_can_place() -> None:
    """Every pod of the Job is a gated member of one group of `parallelism` members, at a
    level of the example NetworkTopology, ranked by its completion index."""
    job = yaml.safe_load((REPO / "examples" / "multi-node-training-group.yaml").read_text())
    topology = NetworkTopology.model_validate(
        yaml.safe_load((REPO / "examples" / "network-topology.yaml").read_text())
    )
    pod = as_pod(job)
    spec = group_of(pod["metadata"])

    assert spec is not None
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (spec.size, spec.size)
    assert spec.required in topology.spec.labels
    assert "Indexed" == job["spec"]["completionMode"]
    assert [{"name": GATE}] == pod["spec"]["schedulingGates"]


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        pytest.param("single-gpu-notebook", ({"jupyter"}, 1), id="single-gpu-notebook"),
        pytest.param("nvlink-4gpu-training-job", ({"train"}, 1), id="nvlink-4gpu-training-job"),
        pytest.param("cpu-pinned-service", ({"matcher"}, 1), id="cpu-pinned-service"),
        pytest.param(
            "multi-container-pod-scope", ({"server", "metrics"}, 1), id="multi-container-pod-scope"
        ),
        pytest.param("multi-node-training-group", ({"train"}, 2), id="multi-node-training-group"),
    ],
)
def test_example_fits_a_dgx1_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], example: str, expected: Any
) -> None:
    """`numatopo assign` places it: every container assigned, on one NUMA node."""
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        yaml.safe_dump(as_pod(yaml.safe_load((REPO / "examples" / f"{example}.yaml").read_text())))
    )

    code = cli.main(["assign", "--topology", str(DGX1), "--pod", str(pod), "-o", "json"])
    answer = json.loads(capsys.readouterr().out)

    assert (0, expected) == (
        code,
        (set(answer["assignment"]["containers"]), len(answer["assignment"]["numaNodes"])),
    )


def test_mig_example_fits_a_dgx_a100_with_mig_devices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The MIG example gets two 3g.40gb MIG devices on one NUMA node of the DGX A100 whose
    GPUs 0 and 4 are split into 3g.40gb devices (and none of a DGX-1, which has no MIG)."""
    pod = tmp_path / "pod.yaml"
    pod.write_text((REPO / "examples" / "mig-inference.yaml").read_text())

    code = cli.main(["assign", "--topology", str(DGX_A100_MIG), "--pod", str(pod)])
    answer = json.loads(capsys.readouterr().out)
    assert 0 == code
    assert 2 == len(answer["assignment"]["containers"]["server"]["migIndices"])
    assert 1 == len(answer["assignment"]["numaNodes"])
    assert 1 == cli.main(["assign", "--topology", str(DGX1), "--pod", str(pod)])
    assert "nvidia.com/mig-3g.40gb" in json.loads(capsys.readouterr().out)["reason"]


def test_every_example_is_covered() -> None:
    assert {p.stem for p in EXAMPLES} == {
        "single-gpu-notebook",
        "nvlink-4gpu-training-job",
        "cpu-pinned-service",
        "multi-container-pod-scope",
        "mig-inference",
        "network-topology",
        "multi-node-training-group",
    }
