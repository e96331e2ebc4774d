"""Every real topology source in tests/fixtures, read by the real readers, as one catalogue.

A `Source` names the files one node is read from and the `DiscoverOptions` that
`numatopo inspect` would be given for them. `read_source` goes through
`discovery.discover` (the same path as the CLI), then through the `Numatopology` JSON
that `inspect -o json` prints and `assign` reads back, so the engine tests run on
exactly what a user would hand to `numatopo assign`.

Kinds:
  sysfs        a gathered /sys + /proc tree (hwloc's and ghw's corpora)
  hwloc-xml    an `lstopo --of xml` file
  topo         an `nvidia-smi topo -m` text (rocm-smi texts are refused, see AMD_TEXTS)
  nvml         an NVML recording replayed onto a two-socket sysfs tree (no GPU there,
               so every GPU's NUMA node is unknown: the case of an x86 driver that
               does not report it)
  node         a machine numatopo ran on: its sysfs tree with its own NVML recording
  combined     hwloc XML + nvidia-smi topo of one node, merged offline
  kubelet      a source plus a real kubelet config with reservedSystemCPUs
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from numatopo_engine.model import Numatopology, NumatopologySpec, ObjectMeta
from numatopo_exporter.discovery.discover import DiscoverOptions, Readers, discover
from numatopo_exporter.discovery.nvml import GpuReading, read_nvml
from nvml_replay import ReplayNvml
from sysfs_trees import ARCHIVES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HWLOC_XML = FIXTURES / "hwloc-xml"
TOPO = FIXTURES / "topo"
NVML = FIXTURES / "nvml"
KUBELET = FIXTURES / "kubelet"

# rocm-smi outputs kept beside the nvidia-smi ones; `inspect` must refuse them cleanly.
AMD_TEXTS = tuple(sorted(path.name for path in TOPO.glob("amd-*.txt")))
# Two sockets, 16 CPUs, a NIC and no GPU: where the NVML recordings are replayed.
NVML_HOST_TREE = "32em64t-2n8c+dax+nvme+mic+dimms"
# `reservedSystemCPUs: 0,104`, written for a 208-thread two-socket H100 node.
RESERVING_KUBELET = KUBELET / "static-single-numa" / "var" / "lib" / "kubelet"


@dataclass(frozen=True)
class Source:
    """One node's worth of saved topology files, and how `inspect` is told to read them."""

    id: str
    tree: str | None = None  # an ARCHIVES key (tests/sysfs_trees.py): read live from that tree
    hwloc_xml: str | None = None  # a file name under HWLOC_XML
    topo: str | None = None  # a file name under TOPO
    nvml: str | None = None  # a recording under NVML, replayed onto `tree`
    kubelet: Path | None = None  # a kubelet folder holding config.yaml + cpu_manager_state

    def kubelet_files(self) -> tuple[Path, Path] | None:
        """config.yaml and cpu_manager_state, named relative to the working directory.

        Relative, because an absolute path is a host path: under a live tree it would
        be looked for inside the tree.
        """
        if self.kubelet is None:
            return None
        folder = Path(os.path.relpath(self.kubelet, Path.cwd()))
        return folder / "config.yaml", folder / "cpu_manager_state"

    def options(self, tree_root: Path | None) -> DiscoverOptions:
        """What `numatopo inspect` is given; `tree_root` is the extracted `tree`."""
        kubelet = self.kubelet_files()
        return DiscoverOptions(
            sysfs_root=tree_root or Path("/"),
            hwloc_xml=HWLOC_XML / self.hwloc_xml if self.hwloc_xml else None,
            nvidia_smi_topo=TOPO / self.topo if self.topo else None,
            use_nvml=self.nvml is not None,
            kubelet_config=kubelet[0] if kubelet else None,
            kubelet_state=kubelet[1] if kubelet else None,
            node_name=self.id,
        )

    def cli_args(self, tree_root: Path | None) -> list[str]:
        """The same request as `numatopo inspect` arguments (sources without NVML only)."""
        assert self.nvml is None, "the CLI has no way to replay an NVML recording"
        args = ["inspect", "-o", "json", "--node-name", self.id]
        if tree_root is not None:
            args += ["--sysfs-root", str(tree_root), "--no-nvml"]
        if self.hwloc_xml:
            args += ["--hwloc-xml", str(HWLOC_XML / self.hwloc_xml)]
        if self.topo:
            args += ["--nvidia-smi-topo", str(TOPO / self.topo)]
        kubelet = self.kubelet_files()
        if kubelet:
            args += ["--kubelet-config", str(kubelet[0]), "--kubelet-state", str(kubelet[1])]
        return args


def _catalogue() -> dict[str, Source]:
    sources = [Source(id=f"sysfs:{stem}", tree=stem) for stem in ARCHIVES]
    sources += [
        Source(id=f"hwloc-xml:{path.name}", hwloc_xml=path.name)
        for path in sorted(HWLOC_XML.iterdir())
    ]
    sources += [
        Source(id=f"topo:{path.stem}", topo=path.name)
        for path in sorted(TOPO.glob("*.txt"))
        if path.name not in AMD_TEXTS
    ]
    sources += [
        Source(id=f"nvml:{path.stem}", tree=NVML_HOST_TREE, nvml=path.name)
        for path in sorted(NVML.glob("*.json"))
    ]
    sources += [
        Source(
            id="node:h200-1gpu-firecracker",
            tree="16intel64-1n16c+h200+firecracker",
            nvml="h200-1gpu-firecracker.json",
        ),
        Source(
            id="combined:32em64t-2n8c2t-pci-normalio+v100-4gpu-nv2",
            hwloc_xml="32em64t-2n8c2t-pci-normalio.xml",
            topo="v100-4gpu-nv2-odd-affinity_horovod288.txt",
        ),
        Source(
            id="kubelet:h100-sxm-8gpu-nvswitch_stas00_ht",
            topo="h100-sxm-8gpu-nvswitch_stas00_ht.txt",
            kubelet=RESERVING_KUBELET,
        ),
        Source(id="kubelet:256ppc-8n8s4t", tree="256ppc-8n8s4t", kubelet=RESERVING_KUBELET),
    ]
    return {source.id: source for source in sources}


SOURCES = _catalogue()
SOURCE_IDS = sorted(SOURCES)


def _replay(recording: Path) -> Callable[[], GpuReading]:
    return lambda: read_nvml(ReplayNvml.load(recording))


def discover_source(source: Source, tree_root: Path | None) -> Numatopology:
    """The `Numatopology` object `numatopo inspect -o json` builds for `source`."""
    readers = Readers()
    if source.nvml is not None:
        readers = replace(readers, nvml=_replay(NVML / source.nvml))
    found = discover(source.options(tree_root), readers=readers)
    return Numatopology(metadata=ObjectMeta(name=source.id), spec=found.spec)


def through_json(topology: Numatopology) -> Numatopology:
    """`topology` printed as `inspect -o json` prints it and read back as `assign` reads it."""
    text = json.dumps(topology.to_wire(), indent=2)
    return Numatopology.model_validate(json.loads(text))


def offline_cpus(spec: NumatopologySpec) -> frozenset[int]:
    return frozenset(cpu.id for cpu in spec.cpus if not cpu.online)
