"""`numatopo assign` with MIG devices: a DGX A100 whose GPUs 0 and 4 are split into
2x 3g.40gb and GPU 1 into 7x 1g.10gb (tests/fixtures/pods/nodes/dgx-a100-mig.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from numatopo_cli.main import main

NODE = Path(__file__).resolve().parents[1] / "fixtures" / "pods" / "nodes" / "dgx-a100-mig.json"


def pod(resource: str, count: int, name: str = "infer") -> dict[str, Any]:
    limits = {"cpu": "4", "memory": "8Gi", resource: str(count)}
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml",
                     "annotations": {"numatopo.io/policy": "single-numa-node"}},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }  # fmt: skip


def assign(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, manifest: dict[str, Any], *extra: str
) -> tuple[int, dict[str, Any]]:
    path = tmp_path / f"{manifest['metadata']['name']}.json"
    path.write_text(json.dumps(manifest))
    code = main(["assign", "--topology", str(NODE), "--pod", str(path), *extra])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    answer: dict[str, Any] = json.loads(out)
    return code, answer


def held(pod_name: str, containers: dict[str, Any]) -> dict[str, Any]:
    return {"pod": f"ml/{pod_name}", "assignment": {"v": 1, "node": "dgx-a100-mig",
                                                     "containers": containers}}  # fmt: skip


def test_mig_request_gets_mig_devices_of_one_numa_node(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, answer = assign(capsys, tmp_path, pod("nvidia.com/mig-1g.10gb", 3))
    assert code == 0
    container = answer["assignment"]["containers"]["main"]
    # GPU 1 (NUMA 0) holds the only 1g.10gb devices: indices 10..16.
    assert [10, 11, 12] == container["migIndices"]
    assert [f"MIG-a1000001-{i:04d}-4000-8000-000000000000" for i in range(3)] == container["mig"]
    assert container.get("gpuIndices", []) == []
    assert container.get("gpus", []) == []
    assert [0] == answer["assignment"]["numaNodes"]
    assert "0" == container["mems"]


def test_mig_devices_of_several_parents_on_one_numa_node(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    allocated = tmp_path / "allocated.json"
    # GPU 0's first 3g.40gb (index 8) is taken: two more must come from NUMA 1 (GPU 4),
    # since NUMA 0 has one left.
    allocated.write_text(json.dumps([held("other", {"c": {"migIndices": [8]}})]))
    code, answer = assign(
        capsys, tmp_path, pod("nvidia.com/mig-3g.40gb", 2), "--allocated", str(allocated)
    )
    assert code == 0
    assert [17, 18] == answer["assignment"]["containers"]["main"]["migIndices"]
    assert [1] == answer["assignment"]["numaNodes"]


def test_whole_gpus_never_include_a_gpu_in_mig_mode(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # NUMA 0 has GPUs 2 and 3 whole (0 and 1 are in MIG mode): 3 whole GPUs do not fit there.
    code, answer = assign(capsys, tmp_path, pod("nvidia.com/gpu", 3))
    assert code == 0
    assert [5, 6, 7] == answer["assignment"]["containers"]["main"]["gpuIndices"]
    code, answer = assign(capsys, tmp_path, pod("nvidia.com/gpu", 4))
    assert code == 1
    assert "single-numa-node" in answer["reason"]


def test_an_allocation_naming_a_mig_mode_gpu_whole_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    allocated = tmp_path / "allocated.json"
    allocated.write_text(json.dumps([held("other", {"c": {"gpuIndices": [0]}})]))
    path = tmp_path / "pod.json"
    path.write_text(json.dumps(pod("nvidia.com/mig-3g.40gb", 1)))
    code = main(
        ["assign", "--topology", str(NODE), "--pod", str(path), "--allocated", str(allocated)]
    )
    assert code == 2
    assert "GPU 0 is in MIG mode" in capsys.readouterr().err


def test_text_output_lists_mig_devices(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "pod.json"
    path.write_text(json.dumps(pod("nvidia.com/mig-3g.40gb", 2)))
    assert 0 == main(["assign", "--topology", str(NODE), "--pod", str(path), "-o", "text"])
    assert "gpus -, mig 8,9," in capsys.readouterr().out


def test_a_profile_the_node_lacks_is_refused_naming_the_resource(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, answer = assign(capsys, tmp_path, pod("nvidia.com/mig-2g.20gb", 1))
    assert code == 1
    assert "1 nvidia.com/mig-2g.20gb requested, more than the node has free" in answer["reason"]
    code, answer = assign(capsys, tmp_path, pod("nvidia.com/mig-3g.40gb", 3))
    assert code == 1
    assert "2 nvidia.com/mig-3g.40gb free" in answer["reason"]
