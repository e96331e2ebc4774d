"""Accelerators of every vendor read from real sysfs trees with grafted PCI functions
(tests/fixtures/sysfs/accelerators/README.md: which tree, which ids, from where)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from numatopo_engine.accelerators import DEFAULT_ACCELERATORS, parse_rule
from numatopo_exporter.discovery.hostroot import HostRoot
from numatopo_exporter.discovery.hwloc_xml import parse_hwloc_xml
from numatopo_exporter.discovery.sysfs import read_sysfs
from sysfs_grafting import grafted_tree

Tree = Callable[[str], Path]


@pytest.fixture
def grafted(sysfs_tree: Tree, tmp_path: Path) -> Tree:
    return lambda name: grafted_tree(name, sysfs_tree, tmp_path)


def _rows(root: Path, rules: tuple = DEFAULT_ACCELERATORS) -> list[tuple[object, ...]]:
    spec = read_sysfs(HostRoot(root), rules)
    return [(g.index, g.pci_bus_id, g.numa, g.vendor, g.resource, g.model) for g in spec.gpus]


def test_every_vendor_is_found_with_its_numa_node_and_resource(grafted: Tree) -> None:
    # Vendors in rule order, bus-id order within one; the Huawei NVMe SSD is no accelerator.
    assert [
        (0, "0000:45:00.0", 3, "nvidia", "nvidia.com/gpu", "10de:20b2"),
        (1, "0000:07:00.0", 0, "amd", "amd.com/gpu", "1002:74a1"),
        (2, "0000:04:00.0", 0, "habana", "habana.ai/gaudi", "1da3:1020"),
        (3, "0000:05:00.0", 1, "huawei", "huawei.com/Ascend910", "19e5:d802"),
        (4, "0000:06:00.0", 1, "huawei", "huawei.com/Ascend310P", "19e5:d500"),
        (5, "0000:44:00.0", 2, "intel", "gpu.intel.com/i915", "8086:0bd5"),
    ] == _rows(grafted("mixed"))


def test_pcie_paths_between_accelerators_follow_the_real_bridges(grafted: Tree) -> None:
    spec = read_sysfs(HostRoot(grafted("gaudi2")))
    paths = {(p.a, p.b): p.path.value for p in spec.gpu_paths}
    # Two root ports of one host bridge: PHB; across the two host bridges: SYS.
    assert {(0, 1): "PHB", (2, 3): "PHB", (0, 2): "SYS", (1, 3): "SYS"}.items() <= paths.items()


def test_a_configured_rule_overrides_the_default_and_adds_a_vendor(grafted: Tree) -> None:
    rules = (
        parse_rule("vendor=0x1da3,class=0x1200,name=gaudi,resource=example.com/gaudi2"),
        # The Huawei NVMe function, declared an accelerator by configuration.
        parse_rule("vendor=19e5,class=0108,devices=0x0123,name=storage,resource=example.com/ssd"),
        *DEFAULT_ACCELERATORS,
    )
    rows = _rows(grafted("mixed"), rules)
    assert (0, "0000:04:00.0", 0, "gaudi", "example.com/gaudi2", "1da3:1020") == rows[0]
    assert (1, "0000:46:00.0", 3, "storage", "example.com/ssd", "19e5:0123") == rows[1]
    assert "habana.ai/gaudi" not in {row[4] for row in rows}
    assert len(rows) == 7


def test_a_function_without_a_device_file_matches_only_rules_without_device_ids(
    grafted: Tree,
) -> None:
    root = grafted("mixed")
    for bus in ("0000:05:00.0", "0000:04:00.0"):
        (root / "sys" / "bus" / "pci" / "devices" / bus / "device").unlink()
    rows = _rows(root)
    assert "huawei.com/Ascend910" not in {row[4] for row in rows}  # needs device d802
    assert (2, "0000:04:00.0", 0, "habana", "habana.ai/gaudi", "") in rows


@pytest.mark.lstopo
@pytest.mark.skipif(shutil.which("lstopo-no-graphics") is None, reason="needs hwloc's lstopo")
@pytest.mark.parametrize("name", ["gaudi2", "mixed"])
def test_lstopo_sees_the_same_accelerators(grafted: Tree, name: str) -> None:
    root = grafted(name)
    env = {"HWLOC_FSROOT": str(root), "HWLOC_THISSYSTEM": "0", "PATH": "/usr/bin:/bin"}
    xml = subprocess.run(
        ["lstopo-no-graphics", "--of", "xml", "--whole-io", "-"],
        env=env, capture_output=True, check=True,
    ).stdout  # fmt: skip
    # lstopo lists every PCI function with its class and ids; no version-exact output.
    found = re.findall(rb'pci_busid="([0-9a-f:.]+)" pci_type="(?:03|12).. \[([0-9a-f]{4}):', xml)
    vendors = {rule.vendor_id for rule in DEFAULT_ACCELERATORS}
    listed = {bus.decode() for bus, vendor in found if int(vendor, 16) in vendors}
    ours = read_sysfs(HostRoot(root))
    assert {g.pci_bus_id for g in ours.gpus} == listed  # the Matrox BMC VGA is in neither
    # And numatopo's hwloc reader, given lstopo's view, finds the same accelerators.
    from_lstopo = parse_hwloc_xml(xml)
    assert sorted((g.pci_bus_id, g.vendor, g.resource) for g in from_lstopo.gpus) == sorted(
        (g.pci_bus_id, g.vendor, g.resource) for g in ours.gpus
    )
