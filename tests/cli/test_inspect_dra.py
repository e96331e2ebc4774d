"""`numatopo inspect --resource-slices`: which GPUs and NICs DRA drivers publish for the
node, by driver and pool (the table's DRA section, `status.dra` in -o json), from
slices shaped like NVIDIA's GPU driver's and dranet's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dra_objects import gpu_slice, nic_slice
from numatopo_cli.main import main
from numatopo_engine.model import Numatopology

SAMPLE = "a100-sxm-8gpu-nvswitch"


def sample_spec(capsys: pytest.CaptureFixture[str]) -> Numatopology:
    assert main(["inspect", "--sample", SAMPLE, "--node-name", "a100", "-o", "json"]) == 0
    return Numatopology.model_validate_json(capsys.readouterr().out)


def write_slices(path: Path, spec: Numatopology, node: str) -> Path:
    items = [gpu_slice(node, spec.spec), nic_slice(node, spec.spec), gpu_slice("other", spec.spec)]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def test_the_table_says_which_gpus_dra_hands_out(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    slices = write_slices(tmp_path / "slices.json", sample_spec(capsys), "a100")
    args = ["inspect", "--sample", SAMPLE, "--node-name", "a100"]
    assert main([*args, "--resource-slices", str(slices)]) == 0
    out = capsys.readouterr().out
    section = out[out.index("DRA devices") :].splitlines()
    assert section[0].split(None, 2)[2] == "gpu.nvidia.com/a100: 8 GPUs"
    assert section[1].split() == ["JOINED", "DRIVER", "POOL", "DEVICE"]
    assert [row.split() for row in section[2:]] == [
        ["GPU", str(i), "gpu.nvidia.com", "a100", f"gpu-{i}"] for i in range(8)
    ]
    # Without slices there is no DRA section.
    assert main(args) == 0
    assert "DRA devices" not in capsys.readouterr().out


def test_json_carries_status_dra(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    slices = write_slices(tmp_path / "slices.json", sample_spec(capsys), "a100")
    argv = ["inspect", "--sample", SAMPLE, "--node-name", "a100", "-o", "json"]
    assert main([*argv, "--resource-slices", str(slices)]) == 0
    status = json.loads(capsys.readouterr().out)["status"]
    assert [d["gpu"] for d in status["dra"]["devices"]] == list(range(8))


def test_unreadable_slices_are_an_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"items": [{"kind": "ResourceSlice", "spec": {}}]}))
    assert main(["inspect", "--sample", SAMPLE, "--resource-slices", str(bad)]) == 2
    assert "not ResourceSlices" in capsys.readouterr().err
