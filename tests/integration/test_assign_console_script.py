"""`numatopo inspect` then `numatopo assign` three times, through the installed console script.

inspect -> NODE.json; assign pod 1; its assignment goes back in with `--allocated`;
assign pod 2, which must not touch what pod 1 holds; pod 3 cannot fit and exits 1
with a reason naming the NUMA nodes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from real_sources import SOURCES

from numatopo_engine.annotations import Assignment

NUMATOPO = Path(sys.executable).parent / "numatopo"


def numatopo(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(NUMATOPO), *map(str, args)], capture_output=True, text=True, check=False, timeout=60
    )


def pod_file(folder: Path, name: str, cpus: int, gpus: int) -> Path:
    limits: dict[str, Any] = {"cpu": str(cpus), "nvidia.com/gpu": gpus}
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "train",
            "annotations": {"numatopo.io/policy": "single-numa-node"},
        },
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }
    path = folder / f"{name}.json"
    path.write_text(json.dumps(manifest))
    return path


def held(assignment: Assignment) -> tuple[set[int], set[int]]:
    (container,) = assignment.containers.values()
    return set(container.cpus.ids), set(container.gpu_indices)


@pytest.mark.skipif(not NUMATOPO.exists(), reason=f"console script not installed at {NUMATOPO}")
@pytest.mark.parametrize(
    ("source_id", "pods"),
    [
        pytest.param(
            "topo:h100-sxm-8gpu-nvswitch_stas00_ht",
            [(16, 4), (16, 4), (2, 1)],
            id="h100-nvswitch-two-half-node-jobs",
        ),
        pytest.param(
            "combined:32em64t-2n8c2t-pci-normalio+v100-4gpu-nv2",
            [(8, 2), (8, 1), (2, 2)],
            id="hwloc-with-topo-3-plus-1-gpus",
        ),
    ],
)
def test_three_pods_one_after_another(
    tmp_path: Path,
    tree_root: Callable[[str | None], Path | None],
    source_id: str,
    pods: list[tuple[int, int]],
) -> None:
    """Pod 2 never overlaps pod 1; pod 3 does not fit and says where nothing was free."""
    source = SOURCES[source_id]
    inspected = numatopo(*source.cli_args(tree_root(source.tree)))
    assert 0 == inspected.returncode, inspected.stderr
    node = tmp_path / "NODE.json"
    node.write_text(inspected.stdout)
    allocated = tmp_path / "allocated.json"
    allocated.write_text("[]")
    answers = []
    for number, (cpus, gpus) in enumerate(pods):
        pod = pod_file(tmp_path, f"job{number}", cpus, gpus)
        done = numatopo("assign", "--topology", node, "--pod", pod, "--allocated", allocated)
        answer = json.loads(done.stdout)
        answers.append((done.returncode, answer))
        if answer["fits"]:
            entries = json.loads(allocated.read_text())
            entries.append({"pod": f"train/job{number}", "assignment": answer["assignment"]})
            allocated.write_text(json.dumps(entries))
    first, second = (Assignment.model_validate(a["assignment"]) for _, a in answers[:2])
    (cpus_1, gpus_1), (cpus_2, gpus_2) = held(first), held(second)

    assert [0, 0, 1] == [code for code, _ in answers]
    assert (set(), set()) == (cpus_1 & cpus_2, gpus_1 & gpus_2)
    assert first.numa_nodes != second.numa_nodes
    assert (False, True, True) == (
        answers[2][1]["fits"],
        "NUMA 0" in answers[2][1]["reason"],
        "NUMA 1" in answers[2][1]["reason"],
    )
