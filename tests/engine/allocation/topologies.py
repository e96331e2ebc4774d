"""Named node topologies for the engine's tests, built from real machines' dumps.

Each builder reads the dump it cites from `tests/fixtures/topologies/sources/` and
writes nothing; `python tests/engine/allocation/topologies.py` regenerates the
checked-in `tests/fixtures/topologies/NAME.json` (`Numatopology` objects, as
`numatopo inspect -o json` prints them), and a test checks they are in sync.

Link bandwidths per NVLink generation (per link, one direction): V100 NVLink2 25 GB/s,
A100 NVLink3 25 GB/s, H100 NVLink4 25 GB/s, B200 NVLink5 50 GB/s. Where a dump does not
show memory sizes, the value is an assumption stated next to it.
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import (
    Cpu,
    Gpu,
    GpuLink,
    GpuPath,
    Nic,
    NumaNode,
    Numatopology,
    NumatopologySpec,
    PathType,
    PciPath,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "topologies"
SOURCES = FIXTURES / "sources"
GiB = 2**30


def load(name: str) -> NumatopologySpec:
    """The checked-in `NAME.json` fixture's spec."""
    return Numatopology.model_validate_json((FIXTURES / f"{name}.json").read_text()).spec


def _smi_matrix(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """Header names and rows of an `nvidia-smi topo -m` table (only GPU/NIC columns)."""
    header: list[str] = []
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        cells = line.split()
        if cells[:2] == ["GPU0", "GPU1"]:
            header = [c for c in cells if re.fullmatch(r"GPU\d+|mlx5_\d+|NIC\d+", c)]
        elif header and cells and cells[0] in header:
            rows[cells[0]] = cells[1 : 1 + len(header)]
    return header, rows


def _nvlinks(header: list[str], rows: dict[str, list[str]], per_link_gbps: float) -> list[GpuLink]:
    links: list[GpuLink] = []
    gpus = [h for h in header if h.startswith("GPU")]
    for a_name in gpus:
        for b_name, code in zip(header, rows[a_name], strict=True):
            a, b = int(a_name[3:]), b_name[3:]
            if b_name.startswith("GPU") and a < int(b) and code.startswith("NV"):
                count = int(code[2:])
                links.append(
                    GpuLink(a=a, b=int(b), links=count, bandwidth_g_bps=count * per_link_gbps)
                )
    return links


def _cpus(numa_cpus: dict[int, str], core_of: Callable[[int], int]) -> list[Cpu]:
    return [
        Cpu(id=c, core=core_of(c), socket=n, numa=n)
        for n, text in numa_cpus.items()
        for c in CPUSet.parse(text)
    ]


def _two_numa(numa_cpus: dict[int, str], memory: int, remote: int = 21) -> list[NumaNode]:
    return [
        NumaNode(
            id=n,
            cpus=CPUSet.parse(text),
            memory_bytes=memory,
            hugepages={"2Mi": 1024, "1Gi": 0},
            distances={str(m): 10 if m == n else remote for m in numa_cpus},
        )
        for n, text in numa_cpus.items()
    ]


def dgx1_v100() -> NumatopologySpec:
    """DGX-1-style 8x V100 SXM2 hybrid cube-mesh (NV1/NV2), 2x Xeon Gold 5118 (HT), 1 mlx5."""
    text = (SOURCES / "v100-sxm2-8gpu-hybrid-cube-mesh_dlperf.txt").read_text()
    header, rows = _smi_matrix(text)
    numa_cpus = {0: "0-11,24-35", 1: "12-23,36-47"}  # the CPU Affinity column
    return NumatopologySpec(
        numa_nodes=_two_numa(numa_cpus, 192 * GiB),  # "Memory 384G" in the report
        cpus=_cpus(numa_cpus, lambda c: c % 24),
        gpus=[Gpu(index=i, numa=0 if i < 4 else 1, model="Tesla V100-SXM2-16GB") for i in range(8)],
        gpu_links=_nvlinks(header, rows, 25.0),
        nics=[Nic(name="mlx5_0", numa=0, resource="rdma/ib")],
        pci_paths=[
            PciPath(gpu=int(g[3:]), nic="mlx5_0", path=PathType(rows[g][header.index("mlx5_0")]))
            for g in header
            if g.startswith("GPU")
        ],
    )


def h100_nvswitch() -> NumatopologySpec:
    """8x H100 SXM on NVSwitch (NV18 all pairs), 2 NUMA, 104 cores / 208 threads."""
    text = (SOURCES / "h100-sxm-8gpu-nvswitch_stas00_ht.txt").read_text()
    header, rows = _smi_matrix(text)
    numa_cpus = {0: "0-51,104-155", 1: "52-103,156-207"}
    return NumatopologySpec(
        numa_nodes=_two_numa(numa_cpus, 1024 * GiB),  # not in the dump: assumed 1 TiB per socket
        cpus=_cpus(numa_cpus, lambda c: c % 104),
        gpus=[Gpu(index=i, numa=i // 4, model="NVIDIA H100 80GB HBM3") for i in range(8)],
        gpu_links=_nvlinks(header, rows, 25.0),
    )


def aws_p4d() -> NumatopologySpec:
    """AWS p4d.24xlarge: 8x A100 (NV12 all pairs), 96 vCPUs, 4 EFA NICs, one per PCIe switch."""
    header, rows = _smi_matrix((SOURCES / "aws-p4d.24xlarge_8xA100.txt").read_text())
    numa_cpus = {0: "0-23,48-71", 1: "24-47,72-95"}
    root = ET.parse(SOURCES / "aws-p4d-24xl-topo.xml").getroot()
    gpus: list[Gpu] = []
    nics: list[Nic] = []
    switch_of: dict[str, tuple[int, int]] = {}  # device -> (numa, switch number)
    for cpu in root.iter("cpu"):
        numa = int(cpu.attrib["numaid"])
        for switch_number, switch in enumerate(cpu.findall("pci")):
            for device in switch.findall("pci"):
                busid = device.attrib["busid"]
                bus, slot = int(busid[5:7], 16), int(busid[8:10], 16)
                if device.attrib["class"] == "0x030200":
                    index = len(gpus)
                    gpus.append(
                        Gpu(index=index, pci_bus_id=busid, numa=numa, model="A100-SXM4-40GB")
                    )
                    switch_of[f"GPU{index}"] = (numa, switch_number)
                else:
                    name = f"rdmap{bus}s{slot}"  # how the EFA driver names these devices
                    nics.append(
                        Nic(
                            name=name, pci_bus_id=busid, numa=numa, resource="vpc.amazonaws.com/efa"
                        )
                    )
                    switch_of[name] = (numa, switch_number)

    def path(gpu: int, nic: str) -> PathType:
        (gpu_numa, gpu_switch), (nic_numa, nic_switch) = switch_of[f"GPU{gpu}"], switch_of[nic]
        if gpu_numa != nic_numa:
            return PathType.SYS
        return PathType.PIX if gpu_switch == nic_switch else PathType.NODE

    return NumatopologySpec(
        numa_nodes=_two_numa(numa_cpus, 576 * GiB),  # 1152 GiB per instance
        cpus=_cpus(numa_cpus, lambda c: c % 48),
        gpus=gpus,
        gpu_links=_nvlinks(header, rows, 25.0),
        nics=nics,
        pci_paths=[
            PciPath(gpu=g.index, nic=n.name, path=path(g.index, n.name)) for g in gpus for n in nics
        ],
    )


def pcie_8gpu() -> NumatopologySpec:
    """8x L40S on PCIe only (NODE inside a socket, SYS across), 2 sockets, 180 CPUs, no SMT."""
    entry = json.loads((SOURCES / "l40s-8gpu-pcie_nccl-tests273.json").read_text())
    numa_cpus = {0: entry["cpu_affinity"][0], 1: entry["cpu_affinity"][4]}
    matrix = entry["gpu_gpu"]
    return NumatopologySpec(
        numa_nodes=_two_numa(numa_cpus, 512 * GiB),  # not in the dump: assumed 512 GiB per socket
        cpus=_cpus(numa_cpus, lambda c: c),
        gpus=[Gpu(index=i, numa=entry["numa_affinity"][i], model="NVIDIA L40S") for i in range(8)],
        gpu_paths=[
            GpuPath(a=a, b=b, path=PathType(matrix[a][b]))
            for a in range(8)
            for b in range(a + 1, 8)
        ],
        nics=[Nic(name="mlx5_0", numa=None, resource="rdma/ib")],
        pci_paths=[PciPath(gpu=g, nic="mlx5_0", path=PathType.SYS) for g in range(8)],
    )


def cpu_2socket_ht() -> NumatopologySpec:
    """2x 6-core Xeon, Hyper-Threading, CPUs interleaved across sockets (hwloc 24em64t-2n6c2t)."""
    root = ET.parse(SOURCES / "24em64t-2n6c2t-pci.xml").getroot()
    cpus: list[Cpu] = []
    nodes: list[NumaNode] = []
    for package in root.iter("object"):
        if package.attrib.get("type") != "Package":
            continue
        socket = int(package.attrib["os_index"])
        numa = next(o for o in package.iter("object") if o.attrib.get("type") == "NUMANode")
        ids: list[int] = []
        for core in package.iter("object"):
            if core.attrib.get("type") != "Core":
                continue
            threads = sorted(
                int(pu.attrib["os_index"])
                for pu in core.iter("object")
                if pu.attrib.get("type") == "PU"
            )
            ids += threads
            cpus += [Cpu(id=t, core=threads[0], socket=socket, numa=socket) for t in threads]
        nodes.append(
            NumaNode(
                id=int(numa.attrib["os_index"]),
                cpus=CPUSet(ids),
                memory_bytes=int(numa.attrib["local_memory"]),
                distances={"0": 10 if socket == 0 else 20, "1": 20 if socket == 0 else 10},
            )
        )
    return NumatopologySpec(numa_nodes=nodes, cpus=sorted(cpus, key=lambda c: c.id))


def numa64_synthetic() -> NumatopologySpec:
    """64 NUMA nodes (8 sockets x 8 sub-NUMA nodes), 4 cores x 2 threads each: a 2^64 trap."""
    nodes: list[NumaNode] = []
    cpus: list[Cpu] = []
    for n in range(64):
        ids = [n * 4 + k for k in range(4)] + [256 + n * 4 + k for k in range(4)]
        cpus += [Cpu(id=c, core=c % 256, socket=n // 8, numa=n) for c in ids]
        nodes.append(
            NumaNode(
                id=n,
                cpus=CPUSet(ids),
                memory_bytes=16 * GiB,
                distances={
                    str(m): 10 if m == n else 12 if m // 8 == n // 8 else 32 for m in range(64)
                },
            )
        )
    return NumatopologySpec(numa_nodes=nodes, cpus=sorted(cpus, key=lambda c: c.id))


def gb200_like() -> NumatopologySpec:
    """GB200-style tray: 2 Grace CPUs (72 cores, no SMT), 4 B200 GPUs on NVLink5 (NV18),
    34 NUMA nodes: 0-1 Grace, 2-33 GPU memory (8 memory-only nodes per GPU, no CPUs).

    Synthetic in shape (the data corpus has no GB200 dump): what makes it matter is the
    NUMA count, which the kubelet's Topology Manager refuses outright (> 8).
    """
    grace = {0: "0-71", 1: "72-143"}
    nodes = [
        NumaNode(
            id=n,
            cpus=CPUSet.parse(text),
            memory_bytes=480 * GiB,
            distances={str(m): 10 if m == n else 40 if m < 2 else 80 for m in range(34)},
        )
        for n, text in grace.items()
    ]
    nodes += [
        NumaNode(
            id=n,
            memory_bytes=23 * GiB,
            distances={str(m): 10 if m == n else 80 for m in range(34)},
        )
        for n in range(2, 34)
    ]
    return NumatopologySpec(
        numa_nodes=nodes,
        cpus=_cpus(grace, lambda c: c),
        gpus=[Gpu(index=i, numa=i // 2, model="NVIDIA B200") for i in range(4)],
        gpu_links=[
            GpuLink(a=a, b=b, links=18, bandwidth_g_bps=900.0)
            for a in range(4)
            for b in range(a + 1, 4)
        ],
    )


BUILDERS: dict[str, Callable[[], NumatopologySpec]] = {
    "dgx1-v100": dgx1_v100,
    "h100-nvswitch": h100_nvswitch,
    "aws-p4d": aws_p4d,
    "pcie-8gpu": pcie_8gpu,
    "cpu-2socket-ht": cpu_2socket_ht,
    "numa64-synthetic": numa64_synthetic,
    "gb200-like": gb200_like,
}


def write_all() -> None:
    for name, build in BUILDERS.items():
        obj = Numatopology(metadata={"name": name}, spec=build())  # type: ignore[arg-type]
        (FIXTURES / f"{name}.json").write_text(json.dumps(obj.to_wire(), indent=1) + "\n")


if __name__ == "__main__":
    sys.path[:0] = [str(Path(__file__).resolve().parents[3] / "engine")]
    write_all()
