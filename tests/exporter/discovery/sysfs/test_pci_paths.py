"""GPU, NIC and PCIe path discovery on a hand-built tree laid out like a DGX A100.

Socket 0 (NUMA 0) has two host bridges. Under the first, a two-level PCIe switch
holds GPU 0, GPU 1 and mlx5_0 on one lower switch, mlx5_1 on the upper switch, and
mlx5_2 sits on its own root port. Under the second host bridge, one switch holds
GPU 2 and mlx5_3. Socket 1 (NUMA 1) has one switch with GPU 3 and mlx5_4, plus the
BMC's ASPEED VGA, which is no GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from numatopo_engine.model import NumatopologySpec, PathType
from numatopo_exporter.discovery.hostroot import HostRoot
from numatopo_exporter.discovery.sysfs import read_sysfs

MakeTree = Callable[[Mapping[str, str], Mapping[str, str]], Path]

BRIDGE = ("0x8086", "0x060400")
NVIDIA_3D = ("0x10de", "0x030200")
MELLANOX_IB = ("0x15b3", "0x020700")
ASPEED_VGA = ("0x1a03", "0x030000")

# (device path below sys/devices, (vendor, class), numa_node, local_cpulist or None)
DGX_DEVICES: list[tuple[str, tuple[str, str], int, str | None]] = [
    ("pci0000:00/0000:00:01.0", BRIDGE, 0, "0-3"),
    ("pci0000:00/0000:00:01.0/0000:01:00.0", BRIDGE, 0, "0-3"),
    ("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0", BRIDGE, 0, "0-3"),
    ("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0", BRIDGE, 0, "0-3"),
    (
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/0000:04:00.0",
        BRIDGE,
        0,
        None,
    ),
    (
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/0000:04:01.0",
        BRIDGE,
        0,
        None,
    ),
    (
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/0000:04:02.0",
        BRIDGE,
        0,
        None,
    ),
    (
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/0000:04:00.0/0000:05:00.0",
        NVIDIA_3D,
        0,
        "0-3",
    ),
    (
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/0000:04:01.0/0000:06:00.0",
        NVIDIA_3D,
        0,
        "0-3",
    ),
    (
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/0000:04:02.0/0000:07:00.0",
        MELLANOX_IB,
        0,
        "0-3",
    ),
    ("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0", BRIDGE, 0, None),
    ("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:08:00.0", MELLANOX_IB, 0, "0-3"),
    ("pci0000:00/0000:00:02.0", BRIDGE, 0, None),
    ("pci0000:00/0000:00:02.0/0000:09:00.0", MELLANOX_IB, 0, None),
    ("pci0000:40/0000:40:01.0", BRIDGE, 0, None),
    ("pci0000:40/0000:40:01.0/0000:41:00.0", BRIDGE, 0, None),
    ("pci0000:40/0000:40:01.0/0000:41:00.0/0000:42:00.0", BRIDGE, 0, None),
    ("pci0000:40/0000:40:01.0/0000:41:00.0/0000:42:00.0/0000:43:00.0", NVIDIA_3D, 0, None),
    ("pci0000:40/0000:40:01.0/0000:41:00.0/0000:42:01.0", BRIDGE, 0, None),
    ("pci0000:40/0000:40:01.0/0000:41:00.0/0000:42:01.0/0000:44:00.0", MELLANOX_IB, 0, None),
    # Socket 1: firmware left numa_node at -1 below the switch's upstream port, so
    # GPU 3 is placed by its local_cpulist and mlx5_4 by walking up to 0000:81:00.0.
    ("pci0000:80/0000:80:01.0", BRIDGE, -1, None),
    ("pci0000:80/0000:80:01.0/0000:81:00.0", BRIDGE, 1, None),
    ("pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:00.0", BRIDGE, -1, None),
    ("pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:00.0/0000:83:00.0", NVIDIA_3D, -1, "4-7"),
    ("pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:01.0", BRIDGE, -1, None),
    ("pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:01.0/0000:84:00.0", MELLANOX_IB, -1, None),
    ("pci0000:80/0000:80:02.0", BRIDGE, 1, None),
    ("pci0000:80/0000:80:02.0/0000:85:00.0", ASPEED_VGA, 1, None),
]

DGX_NICS = {
    "mlx5_0": "0000:07:00.0",
    "mlx5_1": "0000:08:00.0",
    "mlx5_2": "0000:09:00.0",
    "mlx5_3": "0000:44:00.0",
    "mlx5_4": "0000:84:00.0",
}


def two_socket_host(files: dict[str, str]) -> None:
    """CPUs 0-3 on package/NUMA node 0, 4-7 on package/NUMA node 1, no SMT."""
    files["sys/devices/system/cpu/online"] = "0-7\n"
    for cpu in range(8):
        topology = f"sys/devices/system/cpu/cpu{cpu}/topology"
        files[f"{topology}/physical_package_id"] = f"{cpu // 4}\n"
        files[f"{topology}/thread_siblings_list"] = f"{cpu}\n"
    for numa, distance in ((0, "10 21"), (1, "21 10")):
        node = f"sys/devices/system/node/node{numa}"
        files[f"{node}/cpulist"] = f"{numa * 4}-{numa * 4 + 3}\n"
        files[f"{node}/distance"] = f"{distance}\n"
        files[f"{node}/meminfo"] = f"Node {numa} MemTotal:       1048576 kB\n"


def dgx_tree(make_tree: MakeTree) -> Path:
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    two_socket_host(files)
    for path, (vendor, class_code), numa, local_cpulist in DGX_DEVICES:
        bus_id = path.rsplit("/", 1)[1]
        files[f"sys/devices/{path}/vendor"] = f"{vendor}\n"
        files[f"sys/devices/{path}/class"] = f"{class_code}\n"
        files[f"sys/devices/{path}/numa_node"] = f"{numa}\n"
        if local_cpulist is not None:
            files[f"sys/devices/{path}/local_cpulist"] = f"{local_cpulist}\n"
        links[f"sys/bus/pci/devices/{bus_id}"] = f"../../../devices/{path}"
    for name, bus_id in DGX_NICS.items():
        (path,) = (p for p, *_ in DGX_DEVICES if p.endswith(bus_id))
        ib = f"sys/devices/{path}/infiniband/{name}"
        files[f"{ib}/ports/1/link_layer"] = "InfiniBand\n"
        files[f"sys/devices/{path}/net/ib{name[-1]}/type"] = "32\n"
        links[f"{ib}/device"] = f"../../../{bus_id}"
        links[f"sys/class/infiniband/{name}"] = f"../../devices/{path}/infiniband/{name}"
    return make_tree(files, links)


@pytest.fixture
def dgx(make_tree: MakeTree) -> NumatopologySpec:
    return read_sysfs(HostRoot(dgx_tree(make_tree)))


def test_gpus_in_bus_id_order_without_the_bmc_vga(dgx: NumatopologySpec) -> None:
    expected = [
        (0, "0000:05:00.0", 0, "nvidia", "nvidia.com/gpu"),
        (1, "0000:06:00.0", 0, "nvidia", "nvidia.com/gpu"),
        (2, "0000:43:00.0", 0, "nvidia", "nvidia.com/gpu"),
        (3, "0000:83:00.0", 1, "nvidia", "nvidia.com/gpu"),
    ]

    assert expected == [(g.index, g.pci_bus_id, g.numa, g.vendor, g.resource) for g in dgx.gpus]


def test_nics_with_locality_link_layer_and_netdevs(dgx: NumatopologySpec) -> None:
    expected = [
        ("mlx5_0", "0000:07:00.0", 0, "InfiniBand", ["ib0"]),
        ("mlx5_1", "0000:08:00.0", 0, "InfiniBand", ["ib1"]),
        ("mlx5_2", "0000:09:00.0", 0, "InfiniBand", ["ib2"]),
        ("mlx5_3", "0000:44:00.0", 0, "InfiniBand", ["ib3"]),
        ("mlx5_4", "0000:84:00.0", 1, "InfiniBand", ["ib4"]),
    ]

    assert expected == [(n.name, n.pci_bus_id, n.numa, n.link_layer, n.netdevs) for n in dgx.nics]


@pytest.mark.parametrize(
    ("gpu", "nic", "path"),
    [
        pytest.param(0, "mlx5_0", PathType.PIX, id="same-lower-switch-is-PIX"),
        pytest.param(0, "mlx5_1", PathType.PXB, id="nested-switches-are-PXB"),
        pytest.param(0, "mlx5_2", PathType.PHB, id="other-root-port-same-host-bridge-is-PHB"),
        pytest.param(0, "mlx5_3", PathType.NODE, id="other-host-bridge-same-numa-is-NODE"),
        pytest.param(0, "mlx5_4", PathType.SYS, id="other-socket-is-SYS"),
        pytest.param(1, "mlx5_0", PathType.PIX, id="second-gpu-shares-the-switch"),
        pytest.param(2, "mlx5_3", PathType.PIX, id="second-host-bridge-own-switch"),
        pytest.param(2, "mlx5_0", PathType.NODE, id="second-host-bridge-to-first"),
        pytest.param(3, "mlx5_4", PathType.PIX, id="second-socket-own-switch"),
        pytest.param(3, "mlx5_0", PathType.SYS, id="second-socket-to-first"),
    ],
)
def test_gpu_to_nic_path(dgx: NumatopologySpec, gpu: int, nic: str, path: PathType) -> None:
    actual = {(p.gpu, p.nic): p.path for p in dgx.pci_paths}

    assert path == actual[(gpu, nic)]


def test_every_gpu_nic_pair_has_a_path(dgx: NumatopologySpec) -> None:
    assert 4 * 5 == len(dgx.pci_paths)


def test_gpu_to_gpu_paths(dgx: NumatopologySpec) -> None:
    expected = {
        (0, 1): PathType.PIX,
        (0, 2): PathType.NODE,
        (0, 3): PathType.SYS,
        (1, 2): PathType.NODE,
        (1, 3): PathType.SYS,
        (2, 3): PathType.SYS,
    }

    assert expected == {(p.a, p.b): p.path for p in dgx.gpu_paths}


def test_round_trips_through_the_wire_format(dgx: NumatopologySpec) -> None:
    """The spec with GPUs, NICs and paths validates when read back from its JSON."""
    assert dgx == NumatopologySpec.model_validate(dgx.to_wire())


def test_mixed_vendors_number_amd_after_nvidia(make_tree: MakeTree) -> None:
    """Indices follow bus order per vendor; AMD GPUs continue after NVIDIA's so they stay unique."""
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    two_socket_host(files)
    devices = [
        ("pci0000:00/0000:00:01.0/0000:01:00.0", ("0x1002", "0x038000"), 0),
        ("pci0000:00/0000:00:02.0/0000:02:00.0", ("0x10de", "0x030000"), 0),
        ("pci0000:80/0000:80:01.0/0000:81:00.0", ("0x10de", "0x030200"), 1),
    ]
    for path, (vendor, class_code), numa in devices:
        files[f"sys/devices/{path}/vendor"] = vendor
        files[f"sys/devices/{path}/class"] = class_code
        files[f"sys/devices/{path}/numa_node"] = str(numa)
        links[f"sys/bus/pci/devices/{path.rsplit('/', 1)[1]}"] = f"../../../devices/{path}"
    spec = read_sysfs(HostRoot(make_tree(files, links)))

    assert [
        (0, "0000:02:00.0", "nvidia", 0),
        (1, "0000:81:00.0", "nvidia", 1),
        (2, "0000:01:00.0", "amd", 0),
    ] == [(g.index, g.pci_bus_id, g.vendor, g.numa) for g in spec.gpus]
