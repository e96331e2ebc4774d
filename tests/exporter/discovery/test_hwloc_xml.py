"""hwloc XML exports of real machines (hwloc's test corpus) -> the model."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from numatopo_engine.model import PathType
from numatopo_exporter.discovery.errors import DiscoveryError
from numatopo_exporter.discovery.hwloc_xml import parse_hwloc_xml, read_hwloc_xml

XML = Path(__file__).resolve().parents[2] / "fixtures" / "hwloc-xml"


@pytest.mark.parametrize(
    ("name", "numa", "cpus", "gpus", "nics"),
    [
        pytest.param("16amd64-4distances.xml", 8, 16, 0, 0, id="amd-opteron-8-numa"),
        pytest.param("192em64t-24n8c2t.xml.gz", 24, 384, 0, 1, id="sgi-uv2000-24-numa-gzipped"),
        pytest.param("24em64t-2n6c2t-pci.xml", 2, 24, 3, 1, id="proliant-sl390s-3-tesla"),
        pytest.param("32em64t-2n8c2t-pci-normalio.xml", 2, 32, 4, 1, id="supermicro-cuda-opencl"),
        pytest.param(
            "64intel64-fakeKNL-SNC4-hybrid.xml", 8, 64, 0, 0, id="knl-snc4-ddr-plus-mcdram"
        ),
        pytest.param("8intel64-4n2t-memattrs.xml", 4, 8, 0, 0, id="memattrs"),
        pytest.param("96em64t-4n4d3ca2co-pci.xml", 4, 96, 0, 0, id="x3950-m2-4-numa"),
        pytest.param("cxlmem+dax.v2.xml", 1, 4, 0, 0, id="cxl-memory-dax"),
        pytest.param("memorysidecaches.xml", 4, 80, 0, 0, id="optane-memory-side-caches"),
        pytest.param("nvidiaDGX2.xml", 2, 4, 16, 0, id="dgx2-16-v100"),
        pytest.param("power8gpudistances.xml", 2, 16, 4, 0, id="power8-minsky-p100"),
    ],
)
def test_counts(name: str, numa: int, cpus: int, gpus: int, nics: int) -> None:
    spec = read_hwloc_xml(XML / name)

    assert (numa, cpus, gpus, nics) == (
        len(spec.numa_nodes),
        len(spec.cpus),
        len(spec.gpus),
        len(spec.nics),
    )
    assert ["hwloc-xml"] == spec.sources


def test_knl_mcdram_nodes_are_memory_only() -> None:
    """MCDRAM nodes share their cluster's cpuset in hwloc; CPUs go to the DDR node, as in sysfs."""
    spec = read_hwloc_xml(XML / "64intel64-fakeKNL-SNC4-hybrid.xml")

    assert [16, 16, 16, 16, 0, 0, 0, 0] == [len(n.cpus) for n in spec.numa_nodes]
    assert "0-3,16-19,32-35,48-51" == str(spec.numa_node(0).cpus)


def test_distances_use_os_indexing_order() -> None:
    """The Opteron matrix lists nodes as 1 0 2 5 4 3 6 7; values follow that order."""
    spec = read_hwloc_xml(XML / "16amd64-4distances.xml")

    assert 10 == spec.numa_node(1).distances["1"]
    assert 20 == spec.numa_node(1).distances["0"]
    assert all(n.distances[str(n.id)] == 10 for n in spec.numa_nodes)


def test_hugepages_and_memory() -> None:
    spec = read_hwloc_xml(XML / "nvidiaDGX2.xml")

    assert {"2Mi": 0, "1Gi": 0} == spec.numa_node(0).hugepages
    assert 810234351616 == spec.numa_node(0).memory_bytes
    assert {"0": 10, "1": 21} == spec.numa_node(0).distances


def test_cpu_rows_core_and_socket() -> None:
    """POWER8 SMT: a Core's PUs share the lowest PU id as core id; socket = Package os_index."""
    spec = read_hwloc_xml(XML / "power8gpudistances.xml")

    assert [(0, 0, 0), (1, 0, 0), (8, 8, 0), (80, 80, 1)] == [
        (c.id, c.core, c.socket) for c in spec.cpus if c.id in (0, 1, 8, 80)
    ]


def test_dgx2_gpus_links_and_pcie_paths() -> None:
    """16 V100 behind 12 NVSwitches: every pair NV6 (150 GB/s), as nvidia-smi prints it."""
    spec = read_hwloc_xml(XML / "nvidiaDGX2.xml")

    assert 120 == len(spec.gpu_links)
    assert {(6, 150.0)} == {(x.links, x.bandwidth_g_bps) for x in spec.gpu_links}
    assert (
        "0000:34:00.0",
        "GPU-d3977428-7a30-086b-2e20-5c1eeed647c6",
        "Tesla V100-SXM3-32GB-H",
    ) == (
        spec.gpus[0].pci_bus_id,
        spec.gpus[0].uuid,
        spec.gpus[0].model,
    )
    assert [0] * 8 + [1] * 8 == [g.numa for g in spec.gpus]


def test_power8_nvlinks_between_gpu_pairs() -> None:
    """P100 pairs joined by 2 NVLink-1 links (40 GB/s); the GPU-to-CPU NVLinks are no GPU pair."""
    spec = read_hwloc_xml(XML / "power8gpudistances.xml")

    assert [(0, 1, 2, 40.0), (2, 3, 2, 40.0)] == [
        (x.a, x.b, x.links, x.bandwidth_g_bps) for x in spec.gpu_links
    ]
    assert [(0, 1, PathType.NODE), (0, 2, PathType.SYS)] == [
        (p.a, p.b, p.path) for p in spec.gpu_paths if p.a == 0 and p.b < 3
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param(
            "32em64t-2n8c2t-pci-normalio.xml",
            {0: PathType.SYS, 1: PathType.PHB, 2: PathType.PIX, 3: PathType.PIX},
            id="same-root-port-pix-same-host-bridge-phb-other-socket-sys",
        ),
        pytest.param(
            "24em64t-2n6c2t-pci.xml",
            {0: PathType.PHB, 1: PathType.SYS, 2: PathType.SYS},
            id="proliant",
        ),
    ],
)
def test_gpu_to_nic_paths(name: str, expected: dict[int, PathType]) -> None:
    spec = read_hwloc_xml(XML / name)

    assert expected == {p.gpu: p.path for p in spec.pci_paths}


def test_pcie_switch_levels_on_dgx2() -> None:
    """Same PLX switch: PIX; two switch levels: PXB; other host bridge, same socket: NODE."""
    spec = read_hwloc_xml(XML / "nvidiaDGX2.xml")
    paths = {(p.a, p.b): p.path for p in spec.gpu_paths}

    assert [PathType.PIX, PathType.PXB, PathType.NODE, PathType.SYS] == [
        paths[(0, k)] for k in (1, 2, 4, 8)
    ]
    assert 120 == len(paths)


def test_nics_and_their_netdevs() -> None:
    spec = read_hwloc_xml(XML / "24em64t-2n6c2t-pci.xml")

    assert [("mlx4_0", "0000:05:00.0", 0, ["eth2", "ib0"])] == [
        (n.name, n.pci_bus_id, n.numa, n.netdevs) for n in spec.nics
    ]


def test_bmc_vga_is_no_gpu_but_a_compute_capable_radeon_is() -> None:
    spec = read_hwloc_xml(XML / "32em64t-2n8c2t-pci-normalio.xml")

    assert ["nvidia", "nvidia", "nvidia", "amd"] == [g.vendor for g in spec.gpus]
    assert "amd.com/gpu" == spec.gpus[3].resource


def test_gzip_is_read_transparently(tmp_path: Path) -> None:
    packed = tmp_path / "dgx2.xml.gz"
    packed.write_bytes(gzip.compress((XML / "nvidiaDGX2.xml").read_bytes()))

    assert read_hwloc_xml(XML / "nvidiaDGX2.xml") == read_hwloc_xml(packed)


OLD_DISTANCES = b"""<?xml version="1.0"?>
<topology>
  <object type="Machine" os_index="0" cpuset="0x3" nodeset="0x3">
    <object type="NUMANode" os_index="0" cpuset="0x1" nodeset="0x1" local_memory="1024">
      <object type="Socket" os_index="0" cpuset="0x1">
        <object type="PU" os_index="0" cpuset="0x1"/>
      </object>
    </object>
    <object type="NUMANode" os_index="1" cpuset="0x2" nodeset="0x2" local_memory="1024">
      <object type="Socket" os_index="1" cpuset="0x2">
        <object type="PU" os_index="1" cpuset="0x2"/>
      </object>
    </object>
  </object>
  <distances nbobjs="2" relative_depth="1" latency_base="10.000000">
    <latency value="1.000000"/><latency value="2.100000"/>
    <latency value="2.100000"/><latency value="1.000000"/>
  </distances>
</topology>
"""


def test_hwloc_1x_distances_and_sockets() -> None:
    spec = parse_hwloc_xml(OLD_DISTANCES)

    assert {"0": 10, "1": 21} == spec.numa_node(0).distances
    assert [0, 1] == [c.socket for c in spec.cpus]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(b"", "not well-formed", id="empty"),
        pytest.param(b"<topology><object type='Machine'", "not well-formed", id="truncated"),
        pytest.param(b"<html><body/></html>", "not an hwloc topology", id="other-xml"),
        pytest.param(b"<topology/>", "no <object>", id="no-objects"),
        pytest.param(b"\x1f\x8b\x08\x00garbage", "corrupt gzip", id="bad-gzip"),
        pytest.param(
            b'<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "aaaa">]><topology>&a;</topology>',
            "entity",
            id="entity-declarations-refused",
        ),
    ],
)
def test_bad_input(data: bytes, message: str) -> None:
    with pytest.raises(DiscoveryError, match=message):
        parse_hwloc_xml(data)


def test_error_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "node.xml"
    bad.write_bytes(b"<topology")

    with pytest.raises(DiscoveryError, match="not well-formed") as caught:
        read_hwloc_xml(bad)

    assert bad == caught.value.path
