"""The examples are valid Kubernetes objects that numatopo can place on a real 8-GPU node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from numatopo_cli import main as cli

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


@pytest.mark.parametrize("example", [pytest.param(p, id=p.stem) for p in EXAMPLES])
def test_example_is_valid_for_kubernetes(example: Path) -> None:
    manifest = yaml.safe_load(example.read_text())

    assert NEWEST[-1].rsplit(".", 1)[0] == kubernetes_validate.validate(
        manifest, NEWEST[-1], strict=True
    )


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        pytest.param("single-gpu-notebook", ({"jupyter"}, 1), id="single-gpu-notebook"),
        pytest.param("nvlink-4gpu-training-job", ({"train"}, 1), id="nvlink-4gpu-training-job"),
        pytest.param("cpu-pinned-service", ({"matcher"}, 1), id="cpu-pinned-service"),
        pytest.param(
            "multi-container-pod-scope", ({"server", "metrics"}, 1), id="multi-container-pod-scope"
        ),
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
    }
