"""The table and matrix renderers on real machines: columns, units, unknowns, colour."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from numatopo_cli.render import matrix, table, text
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import (
    Cpu,
    Gpu,
    GpuLink,
    Nic,
    NumaNode,
    Numatopology,
    NumatopologySpec,
    ObjectMeta,
    PathType,
    PciPath,
    Policies,
)
from numatopo_exporter.discovery import hwloc_xml, nvidia_smi_topo

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
GIB = 1024**3


def dgx1_v100_as_a_kubelet_sees_it() -> Numatopology:
    """The DGX-1 V100 of `v100-sxm2-8gpu-hybrid-cube-mesh_dlperf.txt`, built by hand from
    what that report states: 2x Xeon Gold 5118 (12 cores, 2 threads each; CPUs 0-11,24-35
    on socket 0), 384 GB, NVLink cube mesh, mlx5_0 PIX to GPU2/GPU3; plus a static CPU
    manager with 1 GiB huge pages, as such a node is set up for training."""
    cpus = [
        Cpu(id=cpu, core=cpu % 24, socket=cpu % 24 // 12, numa=cpu % 24 // 12) for cpu in range(48)
    ]
    mesh = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2}
    mesh |= {(2, 3): 2, (2, 6): 1, (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2}
    mesh |= {(5, 6): 2, (5, 7): 1, (6, 7): 2}
    spec = NumatopologySpec(
        policies=Policies(
            cpu_manager_policy="static",
            topology_manager_policy="single-numa-node",
            topology_manager_scope="pod",
        ),
        reserved_cpus=CPUSet.parse("0,24"),
        numa_nodes=[
            NumaNode(
                id=0,
                cpus=CPUSet.parse("0-11,24-35"),
                memory_bytes=192 * GIB,
                hugepages={"1Gi": 16, "2Mi": 0},
                distances={"0": 10, "1": 21},
            ),
            NumaNode(
                id=1,
                cpus=CPUSet.parse("12-23,36-47"),
                memory_bytes=192 * GIB,
                distances={"0": 21, "1": 10},
            ),
        ],
        cpus=cpus,
        gpus=[
            Gpu(index=i, numa=i // 4, model="Tesla V100-SXM2-16GB", memory_bytes=16 * GIB)
            for i in range(8)
        ],
        gpu_links=[
            GpuLink(a=a, b=b, links=n, bandwidth_g_bps=25.0 * n) for (a, b), n in mesh.items()
        ],
        nics=[Nic(name="mlx5_0", numa=0)],
        pci_paths=[PciPath(gpu=g, nic="mlx5_0", path=PathType.PIX) for g in (2, 3)],
        sources=["sysfs", "nvml", "kubelet"],
    )
    return Numatopology(metadata=ObjectMeta(name="dgx1-v100"), spec=spec)


def lines_of(topology: Numatopology, **kwargs: bool) -> list[str]:
    return table.render_table(topology, **kwargs).splitlines()


@pytest.mark.parametrize(
    "expected",
    [
        pytest.param(
            "Capacity       2 sockets, 2 NUMA nodes, 48 CPUs, 8 GPUs, 1 NIC, 384 GiB memory",
            id="capacity-counts-sockets-from-cpu-rows",
        ),
        pytest.param(
            "Kubelet        cpuManagerPolicy static, topologyManagerPolicy single-numa-node "
            "(scope pod)",
            id="kubelet-policies",
        ),
        pytest.param("Reserved CPUs  0,24", id="reserved-cpus"),
        pytest.param(
            "0     0-11,24-35      12  192 GiB  1Gi:16     0,1,2,3  mlx5_0",
            id="numa-row-with-cores-memory-hugepages",
        ),
        pytest.param(
            "1     12-23,36-47     12  192 GiB  -          4,5,6,7  -", id="numa-row-without"
        ),
        pytest.param("0  10  21", id="distance-row"),
        pytest.param(
            "GPU2  NV1   NV2   X     NV2   SYS   SYS   NV1   SYS   PIX   0-11,24-35    0",
            id="matrix-row-links-then-derived-sys-then-nic-path",
        ),
    ],
)
def test_table_lines_of_a_dgx1(expected: str) -> None:
    actual = lines_of(dgx1_v100_as_a_kubelet_sees_it())

    assert expected in actual


def test_unknown_numa_shows_a_dash_row() -> None:
    """horovod#288's NIC is SYS to every GPU, so no NUMA node is known for it."""
    path = FIXTURES / "topo" / "v100-4gpu-nv2-odd-affinity_horovod288.txt"
    topology = Numatopology(
        metadata=ObjectMeta(name="horovod"), spec=nvidia_smi_topo.read_nvidia_smi_topo(path)
    )

    rows = [line.split() for line in lines_of(topology) if line.startswith("-  ")]

    assert [["-", "-", "-", "-", "-", "-", "mlx5_0"]] == rows


@pytest.mark.parametrize(
    ("fixture", "first_label", "last_label"),
    [
        pytest.param("hwloc-xml/nvidiaDGX2.xml", "GPU0", "GPU15", id="dgx2-16-gpus"),
        pytest.param("hwloc-xml/24em64t-2n6c2t-pci.xml", "GPU0", "NIC0", id="gpus-and-a-nic"),
    ],
)
def test_matrix_columns_stay_aligned(fixture: str, first_label: str, last_label: str) -> None:
    """Every matrix row starts its cells and its CPU Affinity at the header's offsets."""
    spec = hwloc_xml.read_hwloc_xml(FIXTURES / fixture)
    lines = matrix.render_matrix(spec)
    header = lines[0]
    rows = lines[1 : lines.index("")]
    starts = [header.index(label) for label in (first_label, last_label, "CPU Affinity")]

    actual = {all(row[start - 1] == " " and row[start] != " " for start in starts) for row in rows}

    assert {True} == actual


def test_many_numa_nodes_and_cpus_stay_aligned() -> None:
    """24 NUMA nodes, 384 CPUs: every cell starts under its header (CORES ends under it)."""
    spec = hwloc_xml.read_hwloc_xml(FIXTURES / "hwloc-xml" / "192em64t-24n8c2t.xml.gz")
    lines = lines_of(Numatopology(metadata=ObjectMeta(name="big"), spec=spec))
    header = next(line for line in lines if line.startswith("NUMA  CPUS"))
    rows = lines[lines.index(header) + 1 : lines.index(header) + 25]
    starts = [header.index(label) for label in ("MEMORY", "GPUS", "NICS")]
    cores_end = header.index("CORES") + len("CORES") - 1

    actual = {
        all(row[start - 1] == " " and row[start] != " " for start in starts)
        and row[cores_end] != " " == row[cores_end + 1]
        for row in rows
    }

    assert ["23", "184-191,376-383", "8"] == rows[-1].split()[:3]
    assert {True} == actual


def test_colour_never_moves_a_column() -> None:
    """With colour on, stripping the escape codes gives exactly the plain table."""
    topology = dgx1_v100_as_a_kubelet_sees_it()

    coloured = table.render_table(topology, notices=["example"], color=True)

    assert "\x1b[32mNV2\x1b[0m" in coloured
    assert table.render_table(topology, notices=["example"]) == ANSI.sub("", coloured)


@pytest.mark.parametrize(
    ("size_bytes", "expected"),
    [
        pytest.param(0, "-", id="not-reported"),
        pytest.param(512, "512 B", id="bytes"),
        pytest.param(5_590_000_000, "5.21 GiB", id="three-digits"),
        pytest.param(1_081_172_697_088, "1007 GiB", id="hundreds-no-decimals"),
        pytest.param(1_627_000_000_000, "1.48 TiB", id="tebibytes"),
    ],
)
def test_format_bytes(size_bytes: int, expected: str) -> None:
    actual = text.format_bytes(size_bytes)

    assert expected == actual
