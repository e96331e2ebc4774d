"""`discover`: which sources are read for which options, and what the user is told."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from numatopo_engine.model import Gpu, GpuLink, NumatopologySpec, Policies
from numatopo_exporter.discovery import discover, hwloc_xml, nvidia_smi_topo
from numatopo_exporter.discovery.errors import DiscoveryError, SourceUnavailableError
from numatopo_exporter.discovery.hostroot import HostRoot
from numatopo_exporter.discovery.kubelet import KubeletReading
from numatopo_exporter.discovery.nvml import GpuReading

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
POWER8_XML = FIXTURES / "hwloc-xml" / "power8gpudistances.xml"
Run = Callable[[list[str]], Any]
HOROVOD_TOPO = FIXTURES / "topo" / "v100-4gpu-nv2-odd-affinity_horovod288.txt"


class Recorder:
    """Fake readers that log each call; any reader not expected raises."""

    def __init__(self, *, nvml_available: bool = True) -> None:
        self.calls: list[str] = []
        self.nvml_available = nvml_available

    def readers(self) -> discover.Readers:
        return discover.Readers(
            sysfs=self.sysfs,
            nvml=self.nvml,
            hwloc_xml=lambda path: self.log(f"hwloc:{path.name}", source="hwloc-xml"),
            nvidia_smi_topo=lambda path: self.log(f"topo:{path.name}", source="nvidia-smi-topo"),
            kubelet=self.kubelet,
            merge_gpu_reading=lambda spec, _: spec.model_copy(
                update={"sources": [*spec.sources, "nvml"]}
            ),
            merge_kubelet=lambda spec, _: spec.model_copy(
                update={"sources": [*spec.sources, "kubelet"]}
            ),
        )

    def log(self, call: str, *, source: str) -> NumatopologySpec:
        self.calls.append(call)
        return NumatopologySpec(sources=[source])

    def sysfs(self, root: HostRoot, _accelerators: object) -> NumatopologySpec:
        return self.log(f"sysfs:{root.path}", source="sysfs")

    def nvml(self) -> GpuReading:
        self.calls.append("nvml")
        if not self.nvml_available:
            raise SourceUnavailableError("no NVIDIA driver (libnvidia-ml.so not loadable)")
        return GpuReading(notices=["GPU 3 has NVLink errors"])

    def kubelet(self, root: HostRoot, config: Path | None, state: Path | None) -> KubeletReading:
        self.calls.append(f"kubelet:{root.path}:{config}:{state}")
        return KubeletReading(policies=Policies(), notices=["no CPU manager checkpoint"])


@pytest.mark.parametrize(
    ("options", "nvml_available", "calls", "sources", "notices"),
    [
        pytest.param(
            discover.DiscoverOptions(sysfs_root=Path("/")),
            True,
            ["sysfs:/", "nvml", "kubelet:/:None:None"],
            ["sysfs", "nvml", "kubelet"],
            ["GPU 3 has NVLink errors", "no CPU manager checkpoint"],
            id="live-node-reads-sysfs-nvml-kubelet",
        ),
        pytest.param(
            discover.DiscoverOptions(sysfs_root=Path("/")),
            False,
            ["sysfs:/", "nvml", "kubelet:/:None:None"],
            ["sysfs", "kubelet"],
            ["no NVIDIA driver (libnvidia-ml.so not loadable)", "no CPU manager checkpoint"],
            id="no-driver-is-a-notice-cpu-topology-still-returned",
        ),
        pytest.param(
            discover.DiscoverOptions(sysfs_root=Path("/"), use_nvml=False),
            True,
            ["sysfs:/", "kubelet:/:None:None"],
            ["sysfs", "kubelet"],
            ["no CPU manager checkpoint"],
            id="no-nvml-never-asks-the-driver",
        ),
        pytest.param(
            discover.DiscoverOptions(hwloc_xml=POWER8_XML),
            True,
            ["hwloc:power8gpudistances.xml"],
            ["hwloc-xml"],
            [],
            id="offline-hwloc-reads-nothing-live",
        ),
        pytest.param(
            discover.DiscoverOptions(nvidia_smi_topo=HOROVOD_TOPO, kubelet_config=Path("/k.yaml")),
            True,
            ["topo:v100-4gpu-nv2-odd-affinity_horovod288.txt", "kubelet:/:/k.yaml:None"],
            ["nvidia-smi-topo", "kubelet"],
            ["no CPU manager checkpoint"],
            id="offline-with-an-explicit-kubelet-config-reads-it",
        ),
    ],
)
def test_sources_read_per_option(
    options: discover.DiscoverOptions,
    nvml_available: bool,
    calls: list[str],
    sources: list[str],
    notices: list[str],
) -> None:
    recorder = Recorder(nvml_available=nvml_available)

    found = discover.discover(options, readers=recorder.readers())

    assert (calls, sources, notices) == (recorder.calls, found.spec.sources, found.notices)


def test_both_files_merge_hwloc_cpus_with_topo_links() -> None:
    """POWER8 (hwloc: CPUs, NUMA, 4 GPUs) with a 4-GPU all-NV2 nvidia-smi topo."""
    options = discover.DiscoverOptions(hwloc_xml=POWER8_XML, nvidia_smi_topo=HOROVOD_TOPO)
    hwloc = hwloc_xml.read_hwloc_xml(POWER8_XML)
    topo = nvidia_smi_topo.read_nvidia_smi_topo(HOROVOD_TOPO)

    found = discover.discover(options)

    spec = found.spec
    assert ["hwloc-xml", "nvidia-smi-topo"] == spec.sources
    assert (hwloc.numa_nodes, hwloc.cpus) == (spec.numa_nodes, spec.cpus)
    assert [g.numa for g in hwloc.gpus] == [g.numa for g in spec.gpus]
    assert (topo.gpu_links, topo.pci_paths) == (spec.gpu_links, spec.pci_paths)
    assert ["mlx5_0"] == [nic.name for nic in spec.nics]
    assert 1 == len(found.notices)
    assert found.notices[0].startswith("offline analysis: CPUs, NUMA nodes and PCI devices")


def test_merge_reports_gpus_only_one_file_knows() -> None:
    hwloc = NumatopologySpec(gpus=[Gpu(index=0), Gpu(index=1)], sources=["hwloc-xml"])
    topo = NumatopologySpec(
        gpus=[Gpu(index=i, numa=0) for i in range(3)],
        gpu_links=[GpuLink(a=0, b=2, links=4)],
        sources=["nvidia-smi-topo"],
    )

    merged, notices = discover.merge_offline(hwloc, topo)

    assert [0, 1, 2] == [gpu.index for gpu in merged.gpus]
    assert [0, 0, 0] == [gpu.numa for gpu in merged.gpus]
    assert 1 == len(merged.gpu_links)
    assert [
        "the hwloc XML lists 2 GPUs and nvidia-smi topo 3; "
        "GPUs only one of them knows are kept as they are"
    ] == notices


def test_inconsistent_reader_output_is_a_discovery_error() -> None:
    """A link naming an unknown GPU (a reader bug or a damaged file) never escapes raw."""
    recorder = Recorder()

    def broken(path: Path) -> NumatopologySpec:
        return NumatopologySpec.model_validate(
            {"gpus": [{"index": 0}], "gpuLinks": [{"a": 0, "b": 5}]}
        )

    with pytest.raises(DiscoveryError, match=r"inconsistent topology: .*GPU link 0-5"):
        discover.discover(
            discover.DiscoverOptions(nvidia_smi_topo=HOROVOD_TOPO),
            readers=discover.Readers(**{**vars(recorder.readers()), "nvidia_smi_topo": broken}),
        )


def test_a_real_sysfs_tree_end_to_end(run: Run, tmp_path: Path) -> None:
    """hwloc's 8-socket Opteron tree through the real sysfs and kubelet readers: eight
    NUMA rows, the SLIT matrix, and notices that no kubelet lives there."""
    archive = FIXTURES / "sysfs" / "hwloc" / "16amd64-8n2c.tar.bz2"
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    root = tmp_path / "16amd64-8n2c"

    result = run(["inspect", "--sysfs-root", str(root), "--no-nvml", "--node-name", "opteron"])

    lines = result.out.splitlines()
    assert 0 == result.code
    assert "Node opteron   sources: sysfs,kubelet" == lines[0]
    assert (
        "Capacity       8 sockets, 8 NUMA nodes, 16 CPUs, 0 GPUs, 0 NICs, 64 GiB memory" == lines[1]
    )
    assert "7     14-15      2  8 GiB   -          -     -" in lines
    assert "0  10  20  20  20  20  20  20  20" in lines
    assert 2 == sum(line.startswith("notice: ") and "kubelet" in line for line in lines)


def test_inspect_on_this_machine_succeeds(run: Run) -> None:
    """`numatopo inspect` on the build machine: real sysfs, NVML (a notice if no GPU)."""
    result = run(["inspect", "--node-name", "this-machine"])

    assert 0 == result.code
    assert result.out.startswith("Node this-machine   sources: sysfs")


def test_console_script_runs_the_readme_command() -> None:
    """The installed `numatopo` entry point, as a newcomer types it."""
    script = Path(sys.executable).parent / "numatopo"
    if not script.exists():
        pytest.skip(f"{script} is not installed (pip install -e .)")

    completed = subprocess.run(
        [str(script), "inspect", "--sample", "h100-sxm-8gpu-nvswitch"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )

    assert (0, "") == (completed.returncode, completed.stderr)
    assert completed.stdout.startswith("Node h100-sxm-8gpu-nvswitch   sources: nvidia-smi-topo\n")
