"""`numatopo inspect --sample`: the embedded real machines, in every output format."""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from numatopo_cli import main as cli
from numatopo_engine.model import Numatopology

INSPECT = Path(__file__).resolve().parents[2] / "fixtures" / "inspect"
Run = Callable[[list[str]], Any]

SAMPLES = [
    "a100-sxm-8gpu-nvswitch",
    "h100-sxm-8gpu-nvswitch",
    "v100-dgx1-hybrid-cube-mesh",
]


def matrix_section(out: str) -> dict[str, list[str]]:
    """The `GPU/NIC topology` block of the table: row label -> cells, by column label."""
    lines = out.splitlines()
    start = lines.index("GPU/NIC topology") + 1
    header = lines[start].split()
    devices = header[: header.index("CPU")]
    rows = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        tokens = line.split()
        rows[tokens[0]] = tokens[1 : len(devices) + 1]
    return rows


def input_matrix(path: Path) -> dict[str, list[str]]:
    """The matrix as `nvidia-smi topo -m` printed it in the fixture file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"])
    devices = lines[start].split()[: lines[start].split().index("CPU")]
    rows = {}
    for line in lines[start + 1 :]:
        tokens = line.split()
        if not tokens or tokens[0] not in devices:
            break
        rows[tokens[0]] = tokens[1 : len(devices) + 1]
    return rows


def test_the_readme_command_prints_the_h100_summary(run: Run) -> None:
    """The README's "try it" command: node, capacity, NUMA rows and the NV18 matrix."""
    result = run(["inspect", "--sample", "h100-sxm-8gpu-nvswitch"])

    lines = result.out.splitlines()
    assert 0 == result.code
    assert "" == result.err
    assert "Node h100-sxm-8gpu-nvswitch   sources: nvidia-smi-topo" == lines[0]
    assert "Capacity       2 NUMA nodes, 208 CPUs, 8 GPUs, 0 NICs" == lines[1]
    assert "Kubelet        not read (no kubelet config among the sources)" == lines[2]
    assert "NUMA  CPUS            CORES  MEMORY  HUGEPAGES  GPUS     NICS" in lines
    assert "0     0-51,104-155        -  -       -          0,1,2,3  -" in lines
    assert "1     52-103,156-207      -  -       -          4,5,6,7  -" in lines
    assert "GPU0  X     NV18  NV18  NV18  NV18  NV18  NV18  NV18  0-51,104-155    0" in lines
    assert "\x1b[" not in result.out


@pytest.mark.parametrize(
    ("sample", "source_file"),
    [
        pytest.param(
            "v100-dgx1-hybrid-cube-mesh",
            "v100-sxm2-8gpu-hybrid-cube-mesh_dlperf.txt",
            id="dgx1-cube-mesh-with-nic",
        ),
        pytest.param(
            "h100-sxm-8gpu-nvswitch", "h100-sxm-8gpu-nvswitch_stas00_ht.txt", id="h100-nvswitch"
        ),
    ],
)
def test_matrix_cells_match_the_input_file(run: Run, sample: str, source_file: str) -> None:
    """Every GPU/NIC cell printed is the cell nvidia-smi printed (NICs renamed NIC0..)."""
    expected = input_matrix(INSPECT / source_file)
    renamed = {"mlx5_0": "NIC0"}

    actual = matrix_section(run(["inspect", "--sample", sample]).out)

    assert {renamed.get(label, label): cells for label, cells in expected.items()} == actual


def test_the_dgx1_nic_is_named_in_the_legend(run: Run) -> None:
    result = run(["inspect", "--sample", "v100-dgx1-hybrid-cube-mesh"])

    assert "  NIC0: mlx5_0" in result.out.splitlines()


@pytest.mark.parametrize("sample", [pytest.param(name, id=name) for name in SAMPLES])
def test_json_is_the_crd_object_and_round_trips(run: Run, sample: str) -> None:
    """`-o json` is the NODE.json `numatopo assign` reads: it validates back unchanged."""
    result = run(["inspect", "--sample", sample, "-o", "json"])
    wire = json.loads(result.out)

    parsed = Numatopology.model_validate(wire)

    assert 0 == result.code
    assert wire == parsed.to_wire()
    assert ("numatopo.io/v1alpha1", "Numatopology", sample) == (
        wire["apiVersion"],
        wire["kind"],
        wire["metadata"]["name"],
    )
    assert 8 == parsed.spec.capacity.gpus


def test_yaml_parses_to_the_same_object_as_json(run: Run) -> None:
    as_json = json.loads(run(["inspect", "--sample", "a100-sxm-8gpu-nvswitch", "-o", "json"]).out)
    as_yaml = yaml.safe_load(
        run(["inspect", "--sample", "a100-sxm-8gpu-nvswitch", "-o", "yaml"]).out
    )

    assert as_json == as_yaml


def test_node_name_overrides_the_sample_name(run: Run) -> None:
    result = run(
        ["inspect", "--sample", "a100-sxm-8gpu-nvswitch", "--node-name", "gpu-7", "-o", "json"]
    )

    assert "gpu-7" == json.loads(result.out)["metadata"]["name"]


def test_sample_list_names_every_sample_with_its_system(run: Run) -> None:
    result = run(["inspect", "--sample", "list"])

    listed = [line.split()[0] for line in result.out.splitlines()[1:]]
    assert 0 == result.code
    assert SAMPLES == listed
    assert re.search(r"h100-sxm-8gpu-nvswitch\s+8x H100 SXM NVSwitch", result.out)


@pytest.mark.parametrize("sample", [pytest.param(name, id=name) for name in SAMPLES])
def test_samples_keep_their_source_attribution(sample: str) -> None:
    """The shipped files are others' published output: their source line must stay."""
    from importlib import resources

    shipped = resources.files("numatopo_cli").joinpath("samples", f"{sample}.txt")

    first = shipped.read_text(encoding="utf-8").splitlines()[0]

    assert first.startswith("# source: https://github.com/")
    assert "license=" in first


class TerminalOut(io.StringIO):
    """stdout as a terminal would be: it says it is a tty."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("tty", "no_color", "expected"),
    [
        pytest.param(True, None, True, id="terminal-gets-colour"),
        pytest.param(True, "1", False, id="no-color-set-turns-it-off"),
        pytest.param(False, None, False, id="pipe-or-file-stays-plain"),
    ],
)
def test_colour_only_on_a_terminal_without_no_color(
    monkeypatch: pytest.MonkeyPatch, tty: bool, no_color: str | None, expected: bool
) -> None:
    """The table has ANSI colour codes only when stdout is a terminal and NO_COLOR unset."""
    if no_color is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", no_color)
    out = TerminalOut() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)

    code = cli.main(["inspect", "--sample", "h100-sxm-8gpu-nvswitch"])

    assert 0 == code
    assert "GPU/NIC topology" in out.getvalue()
    assert expected == ("\x1b[" in out.getvalue())
