"""`numatopo inspect -o json` on every real source: what it prints is what `assign` reads."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from real_sources import AMD_TEXTS, SOURCE_IDS, SOURCES, TOPO, through_json

from numatopo_cli import main as cli
from numatopo_engine.model import Numatopology


def inspect(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str, str]:
    code = cli.main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("source_id", SOURCE_IDS)
def test_json_round_trip_keeps_the_whole_node(
    discovered_topology: Callable[[str], Numatopology], source_id: str
) -> None:
    """Printing a discovered node as JSON and reading it back loses nothing."""
    discovered = discovered_topology(source_id)

    assert discovered == through_json(discovered)


@pytest.mark.parametrize(
    "source_id",
    [
        pytest.param("sysfs:16em64t-4s2c2t-offlines", id="sysfs-tree-with-offline-cpus"),
        pytest.param("sysfs:linux-amd64-accel-nvidia", id="sysfs-tree-with-a-gpu"),
        pytest.param("hwloc-xml:192em64t-24n8c2t.xml.gz", id="hwloc-xml-gzipped-24-numa"),
        pytest.param("hwloc-xml:64intel64-fakeKNL-SNC4-hybrid.xml", id="hwloc-xml-knl-mcdram"),
        pytest.param("topo:hgx-h100-8gpu-10nic_nccl1264", id="nvidia-smi-topo-10-nics"),
        pytest.param("combined:32em64t-2n8c2t-pci-normalio+v100-4gpu-nv2", id="hwloc-and-topo"),
        pytest.param("kubelet:h100-sxm-8gpu-nvswitch_stas00_ht", id="topo-and-kubelet"),
        pytest.param("kubelet:256ppc-8n8s4t", id="sysfs-and-kubelet"),
    ],
)
def test_cli_prints_what_discovery_reads(
    capsys: pytest.CaptureFixture[str],
    tree_root: Callable[[str | None], Path | None],
    real_topology: Callable[[str], Numatopology],
    source_id: str,
) -> None:
    """The console command, in-process, prints the node the engine tests run on."""
    source = SOURCES[source_id]

    code, out, _ = inspect(capsys, source.cli_args(tree_root(source.tree)))

    assert (0, real_topology(source_id)) == (code, Numatopology.model_validate(json.loads(out)))


@pytest.mark.parametrize("name", AMD_TEXTS)
def test_rocm_smi_text_is_refused_with_a_reason(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """AMD's rocm-smi output given as nvidia-smi topo: exit 2, one line, no traceback."""
    code, out, err = inspect(
        capsys, ["inspect", "-o", "json", "--nvidia-smi-topo", str(TOPO / name)]
    )

    assert (2, "", 1) == (code, out, len(err.splitlines()))
    assert err.startswith(f"numatopo inspect: error: {TOPO / name}: not nvidia-smi topo -m output")


def test_a_named_kubelet_config_that_is_missing_is_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A typo in --kubelet-config must not read as "no kubelet, default policies"."""
    missing = tmp_path / "kubelet" / "config.yaml"
    topo = TOPO / "h100-sxm-8gpu-nvswitch_stas00_ht.txt"

    code, out, err = inspect(
        capsys,
        ["inspect", "-o", "json", "--nvidia-smi-topo", str(topo), "--kubelet-config", str(missing)],
    )

    assert (2, "", f"numatopo inspect: error: {missing}: no such kubelet config file\n") == (
        code,
        out,
        err,
    )


def test_a_relative_kubelet_config_is_read_from_the_working_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--kubelet-config config.yaml` beside a saved topology names that file, not /config.yaml."""
    (tmp_path / "config.yaml").write_text(
        "kind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: 0,104\n"
    )
    (tmp_path / "cpu_manager_state").write_text('{"policyName": "static"}')
    monkeypatch.chdir(tmp_path)
    topo = TOPO / "h100-sxm-8gpu-nvswitch_stas00_ht.txt"

    code, out, _ = inspect(
        capsys,
        [
            *["inspect", "-o", "json", "--nvidia-smi-topo", str(topo)],
            *["--kubelet-config", "config.yaml", "--kubelet-state", "cpu_manager_state"],
        ],
    )
    spec = json.loads(out)["spec"]

    assert (0, "0,104", "static") == (
        code,
        spec["reservedCPUs"],
        spec["policies"]["cpuManagerPolicy"],
    )
