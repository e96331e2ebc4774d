"""`nvidia-smi topo -m` text as people paste it -> the model."""

from __future__ import annotations

from pathlib import Path

import pytest

from numatopo_engine.model import PathType
from numatopo_exporter.discovery.errors import DiscoveryError
from numatopo_exporter.discovery.nvidia_smi_topo import parse_nvidia_smi_topo, read_nvidia_smi_topo

TOPO = Path(__file__).resolve().parents[2] / "fixtures" / "topo"


def _links(name: str) -> dict[tuple[int, int], int]:
    spec = read_nvidia_smi_topo(TOPO / name)
    return {(x.a, x.b): x.links for x in spec.gpu_links}


@pytest.mark.parametrize(
    ("name", "gpus", "numa_cpus"),
    [
        pytest.param(
            "a100-sxm-8gpu-nvswitch_stas00.txt",
            8,
            {0: "0-23", 1: "24-47"},
            id="a100-markdown-fenced",
        ),
        pytest.param(
            "aws-p4d.24xlarge_8xA100.txt",
            8,
            {0: "0-23,48-71", 1: "24-47,72-95"},
            id="aws-p4d-gpu-numa-id-column",
        ),
        pytest.param(
            "aws-p5.48xlarge_8xH100.txt", 8, {0: "0-47,96-143", 1: "48-95,144-191"}, id="aws-p5"
        ),
        pytest.param(
            "h100-sxm-8gpu-nvswitch_stas00_ht.txt",
            8,
            {0: "0-51,104-155", 1: "52-103,156-207"},
            id="h100-with-ht-siblings",
        ),
        pytest.param(
            "h100-sxm-8gpu-nvswitch_stas00_physcores.txt",
            8,
            {0: "0-51", 1: "52-103"},
            id="h100-physical-cores-only",
        ),
        pytest.param(
            "v100-sxm2-8gpu-hybrid-cube-mesh_dlperf.txt",
            8,
            {0: "0-11,24-35", 1: "12-23,36-47"},
            id="dgx1-no-numa-column-numa-from-cpu-affinity",
        ),
        pytest.param(
            "a40-8gpu-nvlink-bridge-pairs_nccl1343.txt",
            8,
            {0: "0-95", 1: "96-191"},
            id="a40-tab-separated",
        ),
        pytest.param(
            "hgx-h100-8gpu-10nic_nccl1264.txt",
            8,
            {0: "0-55,112-167", 1: "56-111,168-223"},
            id="hgx-h100-10-nics",
        ),
        pytest.param("tesla-p4-1gpu-numa-na_hami99.txt", 1, {0: "0-7"}, id="single-gpu-numa-na"),
        pytest.param(
            "h200-1gpu-firecracker_numatopo.txt", 1, {0: "0-15"}, id="h200-real-driver-580"
        ),
        pytest.param(
            "v100-4gpu-nv2-odd-affinity_horovod288.txt",
            4,
            {0: "0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32,34,36,38"},
            id="degenerate-ranges-0-0,2-2",
        ),
    ],
)
def test_gpus_and_numa_affinity(name: str, gpus: int, numa_cpus: dict[int, str]) -> None:
    spec = read_nvidia_smi_topo(TOPO / name)

    assert gpus == len(spec.gpus)
    assert numa_cpus == {n.id: str(n.cpus) for n in spec.numa_nodes}
    assert all(g.numa is not None for g in spec.gpus)
    assert ["nvidia-smi-topo"] == spec.sources


@pytest.mark.parametrize(
    ("name", "links", "bandwidth"),
    [
        pytest.param("a100-sxm-8gpu-nvswitch_stas00.txt", 12, 300.0, id="a100-nv12-all-pairs"),
        pytest.param("aws-p4d.24xlarge_8xA100.txt", 12, 300.0, id="p4d-nv12-all-pairs"),
        pytest.param("aws-p5.48xlarge_8xH100.txt", 18, 450.0, id="p5-nv18-all-pairs"),
        pytest.param("h100-sxm-8gpu-nvswitch_stas00_ht.txt", 18, 450.0, id="h100-nv18-all-pairs"),
    ],
)
def test_nvswitch_machines_are_fully_connected(name: str, links: int, bandwidth: float) -> None:
    spec = read_nvidia_smi_topo(TOPO / name)

    assert 28 == len(spec.gpu_links)
    assert {(links, bandwidth)} == {(x.links, x.bandwidth_g_bps) for x in spec.gpu_links}
    assert [] == spec.gpu_paths


def test_dgx1_hybrid_cube_mesh() -> None:
    """Each V100 has NVLinks to exactly 4 others, one or two links each (6 in all)."""
    links = _links("v100-sxm2-8gpu-hybrid-cube-mesh_dlperf.txt")

    for gpu in range(8):
        peers = {pair: n for pair, n in links.items() if gpu in pair}
        assert 4 == len(peers)
        assert 6 == sum(peers.values())
    assert 2 == links[(0, 4)]
    assert 1 == links[(0, 1)]
    assert (0, 5) not in links


def test_dgx1_nic_paths_and_pcie_pairs() -> None:
    spec = read_nvidia_smi_topo(TOPO / "v100-sxm2-8gpu-hybrid-cube-mesh_dlperf.txt")

    assert ["mlx5_0"] == [n.name for n in spec.nics]
    assert 0 == spec.nics[0].numa
    assert ["NODE", "NODE", "PIX", "PIX", "SYS", "SYS", "SYS", "SYS"] == [
        p.path.value for p in sorted(spec.pci_paths, key=lambda p: p.gpu)
    ]
    assert {PathType.SYS} == {p.path for p in spec.gpu_paths}
    assert 12 == len(spec.gpu_paths)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param(
            "hgx-h100-8gpu-10nic_nccl1264.txt",
            {
                0: "NIC0",
                1: "NIC1",
                2: "NIC2",
                3: "NIC5",
                4: "NIC6",
                5: "NIC7",
                6: "NIC8",
                7: "NIC9",
            },
            id="hgx-one-pix-nic-per-gpu",
        ),
        pytest.param(
            "a40-8gpu-nvlink-bridge-pairs_nccl1343.txt",
            {2: "NIC0", 3: "NIC0", 6: "NIC1", 7: "NIC1"},
            id="a40-two-connectx7",
        ),
        pytest.param(
            "rtx4090-8gpu-pix-bond_nccl-tests307.txt",
            {0: "mlx5_bond_0", 1: "mlx5_bond_0", 2: "mlx5_bond_0", 3: "mlx5_bond_0"},
            id="nic-legend-names-the-bond",
        ),
    ],
)
def test_pix_nics(name: str, expected: dict[int, str]) -> None:
    spec = read_nvidia_smi_topo(TOPO / name)

    assert expected == {p.gpu: p.nic for p in spec.pci_paths if p.path is PathType.PIX}


def test_nic_numa_from_non_sys_paths() -> None:
    """A NIC that is SYS to every GPU has no derivable NUMA node; the others take their GPUs'."""
    spec = read_nvidia_smi_topo(TOPO / "hgx-h100-8gpu-10nic_nccl1264.txt")

    assert {"NIC3": None, "NIC4": None, "NIC0": 0, "NIC9": 1} == {
        n.name: n.numa for n in spec.nics if n.name in ("NIC0", "NIC3", "NIC4", "NIC9")
    }


def test_nvlink_bridge_pairs() -> None:
    links = _links("a40-8gpu-nvlink-bridge-pairs_nccl1343.txt")

    assert {(0, 1): 4, (2, 3): 4, (4, 5): 4, (6, 7): 4} == links


def test_old_soc_name_reads_as_sys() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSOC\t0-7\nGPU1\tSOC\t X \t8-15\n"

    spec = parse_nvidia_smi_topo(text)

    assert [PathType.SYS] == [p.path for p in spec.gpu_paths]
    assert [0, 1] == [g.numa for g in spec.gpus]


def test_header_underlined_by_the_driver() -> None:
    """Driver 580 underlines the header with terminal escape codes even into a file (the
    real H200 capture): the matrix under them is read, not refused."""
    raw = (TOPO / "h200-1gpu-firecracker_numatopo.txt").read_text()
    assert "\tGPU0" not in raw  # the fixture holds the codes: `\t\x1b[4mGPU0...\x1b[0m`
    assert "\x1b[4mGPU0" in raw

    underlined = parse_nvidia_smi_topo(raw)
    plain = parse_nvidia_smi_topo(raw.replace("\x1b[4m", "").replace("\x1b[0m", ""))

    assert plain == underlined
    assert [(0, 0)] == [(g.index, g.numa) for g in underlined.gpus]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param(
            "amd-mi300-series-8gpu_rocm-smi-showtopo.txt", "rocm-smi", id="rocm-smi-showtopo"
        ),
        pytest.param("amd-mi300a-4apu_gpu_topology.txt", "rocm-smi", id="rocm-smi-mi300a"),
        pytest.param(
            "amd-mi300a-4apu_numa_info.txt", "not nvidia-smi topo -m output", id="numactl-hardware"
        ),
    ],
)
def test_other_tools_output_is_refused(name: str, message: str) -> None:
    with pytest.raises(DiscoveryError, match=message) as caught:
        read_nvidia_smi_topo(TOPO / name)

    assert name in str(caught.value)


def _a100_text() -> str:
    return (TOPO / "a100-sxm-8gpu-nvswitch_stas00.txt").read_text()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "not nvidia-smi topo -m output", id="empty"),
        pytest.param(
            "\x00\xff garbage \n GPU0 GPU1", "not nvidia-smi topo -m output", id="binary-garbage"
        ),
        pytest.param(
            _a100_text().split("GPU5  NV12")[0], "no row for GPU5, GPU6, GPU7", id="rows-cut-off"
        ),
        pytest.param(
            _a100_text().replace(
                "GPU3  NV12  NV12  NV12   X    NV12  NV12  NV12  NV12", "GPU3  NV12  NV12"
            ),
            "row GPU3 is truncated",
            id="row-cut-off",
        ),
        pytest.param(
            _a100_text().replace("GPU2  NV12  NV12   X ", "GPU2  NV12  NV12  NV12"),
            "should say X",
            id="misaligned-diagonal",
        ),
        pytest.param(
            _a100_text().replace("GPU1  NV12   X    NV12", "GPU1  NV12   X    QPI "),
            "'QPI'",
            id="unknown-cell",
        ),
        pytest.param(_a100_text().replace("0-23 ", "0-2x "), "CPU Affinity", id="bad-cpu-affinity"),
    ],
)
def test_garbage_and_truncated_text(text: str, message: str) -> None:
    with pytest.raises(DiscoveryError, match=message):
        parse_nvidia_smi_topo(text)


def test_unreadable_file_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "topo.txt"

    with pytest.raises(DiscoveryError, match="cannot read") as caught:
        read_nvidia_smi_topo(missing)

    assert missing == caught.value.path
