"""Accelerators of other vendors end to end on the command line: `numatopo inspect` reads
a real sysfs tree with grafted Gaudi2 / Ascend functions (tests/fixtures/sysfs/
accelerators), and `numatopo assign` places pods asking for them NUMA-aligned."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from numatopo_cli.main import main
from sysfs_grafting import grafted_tree
from sysfs_trees import extract_shared, shared_trees

from .conftest import Run


@pytest.fixture
def grafted(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Callable[[str], Path]:
    shared = shared_trees(tmp_path_factory)
    return lambda name: grafted_tree(name, lambda tree: extract_shared(tree, shared), tmp_path)


def pod(resource: str, count: int, cpus: int = 4) -> dict[str, Any]:
    limits = {"cpu": str(cpus), "memory": "1Gi", resource: str(count)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "ml",
                     "annotations": {"numatopo.io/policy": "single-numa-node"}},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }  # fmt: skip


def inspect_json(run: Run, root: Path, *flags: str) -> dict[str, Any]:
    code, out, err = run(
        ["inspect", "--sysfs-root", root, "--no-nvml", "--node-name", "npu-01", "-o", "json",
        *flags]
    )  # fmt: skip
    assert code == 0, err
    document: dict[str, Any] = json.loads(out)
    return document


def test_inspect_shows_accelerators_of_every_vendor(
    run: Run, grafted: Callable[[str], Path]
) -> None:
    code, out, err = run(["inspect", "--sysfs-root", grafted("mixed"), "--no-nvml"])
    assert code == 0, err
    section = out.split("Accelerators", 1)[1].split("\n\n", 1)[0]
    rows = [line.split() for line in section.strip().splitlines()]
    assert ["ID", "RESOURCE", "VENDOR", "MODEL", "PCI", "NUMA", "MIG"] == rows[0]
    assert ["2", "habana.ai/gaudi", "habana", "1da3:1020", "04:00.0", "0", "-"] in rows
    assert ["3", "huawei.com/Ascend910", "huawei", "19e5:d802", "05:00.0", "1", "-"] in rows
    assert ["5", "gpu.intel.com/i915", "intel", "8086:0bd5", "44:00.0", "2", "-"] in rows
    assert len(rows) == 7


def test_gaudi_pod_is_placed_on_the_numa_node_of_its_accelerators(
    run: Run, grafted: Callable[[str], Path], tmp_path: Path
) -> None:
    node = tmp_path / "node.json"
    node.write_text(json.dumps(inspect_json(run, grafted("gaudi2"))))
    spec = json.loads(node.read_text())["spec"]
    assert {g["resource"] for g in spec["gpus"]} == {"habana.ai/gaudi"}
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(pod("habana.ai/gaudi", 1)))
    code, out, err = run(["assign", "--topology", node, "--pod", manifest])
    assert code == 0, err
    answer = json.loads(out)["assignment"]
    container = answer["containers"]["main"]
    (gpu,) = container["gpuIndices"]
    numa = spec["gpus"][gpu]["numa"]
    assert [numa] == answer["numaNodes"]
    cpus_of_numa = {n["id"]: n["cpus"] for n in spec["numaNodes"]}[numa]
    assert container["mems"] == str(numa)
    assert set(_ids(container["cpus"])) <= set(_ids(cpus_of_numa))
    assert container["gpus"] == [spec["gpus"][gpu]["pciBusId"]]


def test_a_configured_accelerator_is_placed_under_its_configured_resource(
    run: Run, grafted: Callable[[str], Path], tmp_path: Path
) -> None:
    rule = "vendor=0x19e5,class=0x1200,devices=0xd802,name=ascend,resource=example.com/npu"
    node = tmp_path / "node.json"
    document = inspect_json(run, grafted("mixed"), "--accelerator", rule)
    node.write_text(json.dumps(document))
    (npu,) = [g for g in document["spec"]["gpus"] if g["resource"] == "example.com/npu"]
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(pod("example.com/npu", 1)))
    # The engine counts the resource only when told it is an accelerator.
    code, out, _ = run(["assign", "--topology", node, "--pod", manifest])
    assert json.loads(out)["assignment"]["containers"]["main"].get("gpuIndices", []) == []
    code, out, err = run(
        ["assign", "--topology", node, "--pod", manifest, "--gpu-resource", "example.com/*"]
    )
    assert code == 0, err
    answer = json.loads(out)["assignment"]
    assert [npu["index"]] == answer["containers"]["main"]["gpuIndices"]
    assert [npu["numa"]] == answer["numaNodes"]


def test_a_bad_accelerator_rule_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["inspect", "--sysfs-root", str(tmp_path), "--accelerator", "vendor=0x19e5"])
    assert exit_info.value.code == 2
    assert "lacks class=, name=, resource=" in capsys.readouterr().err


def _ids(cpulist: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, cpulist.split(",")):
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out
