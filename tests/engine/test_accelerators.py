"""The accelerator table: matching by vendor/class/device and the configuration syntax."""

from __future__ import annotations

import fnmatch

import pytest

from numatopo_engine.accelerators import (
    DEFAULT_ACCELERATORS,
    AcceleratorRuleError,
    match_accelerator,
    parse_rule,
)
from numatopo_engine.resources import DEFAULT_RESOURCES, ResourceNames


@pytest.mark.parametrize(
    ("vendor", "class_code", "device", "resource"),
    [
        (0x10DE, 0x030200, 0x20B2, "nvidia.com/gpu"),
        (0x10DE, 0x030000, 0x15F8, "nvidia.com/gpu"),
        (0x1002, 0x120000, 0x74A1, "amd.com/gpu"),
        (0x1DA3, 0x120000, 0x1060, "habana.ai/gaudi"),
        (0x19E5, 0x120000, 0xD801, "huawei.com/Ascend910"),
        (0x19E5, 0x120000, 0xD500, "huawei.com/Ascend310P"),
        (0x19E5, 0x120000, 0xD100, "huawei.com/Ascend310"),
        (0x8086, 0x038000, 0x0BD5, "gpu.intel.com/i915"),
        (0x8086, 0x030000, 0x56C0, None),  # an Intel display GPU, not a Max part
        (0x8086, 0x038000, 0x9A49, None),  # an Intel iGPU in the display-controller class
        (0x19E5, 0x010802, 0x0123, None),  # Huawei NVMe
        (0x19E5, 0x120000, 0xA250, None),  # a HiSilicon ZIP engine: same class, not Ascend
        (0x102B, 0x030000, 0x0532, None),  # Matrox BMC VGA
        (0x10DE, 0x068000, 0x1AF1, None),  # NVSwitch (bridge class)
    ],
)
def test_default_table(vendor: int, class_code: int, device: int, resource: str | None) -> None:
    rule = match_accelerator(DEFAULT_ACCELERATORS, vendor, class_code, device)
    assert resource == (rule.resource if rule else None)


def test_engine_patterns_come_from_the_same_table() -> None:
    for rule in DEFAULT_ACCELERATORS:
        assert DEFAULT_RESOURCES.is_gpu(rule.resource)
    assert DEFAULT_RESOURCES.is_gpu("nvidia.com/mig-3g.40gb")
    assert not DEFAULT_RESOURCES.is_gpu("rdma/ib")


def test_parse_rule() -> None:
    rule = parse_rule(
        " vendor=0x1d17, class=1200:0b40 ,name=zx,resource=example.com/npu,devices=3d00:0x3D01"
    )
    assert (0x1D17, frozenset({0x1200, 0x0B40}), "zx", "example.com/npu") == (
        rule.vendor_id, rule.classes, rule.vendor, rule.resource,
    )  # fmt: skip
    assert frozenset({0x3D00, 0x3D01}) == rule.devices
    assert rule.matches(0x1D17, 0x0B4000, 0x3D01)
    assert not rule.matches(0x1D17, 0x0B4000, 0x3D02)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("vendor=0x1d17,class=1200,name=zx", "lacks resource="),
        ("vendor=0x1d17,class=1200,name=zx,resource=npu", "not an extended resource name"),
        ("vendor=0x1d17,class=12000,name=zx,resource=a.io/b", "16-bit hex id"),
        ("vendor=zz,class=1200,name=zx,resource=a.io/b", "vendor='zz'"),
        ("vendor=1,vendor=2,class=1200,name=zx,resource=a.io/b", "given twice"),
        ("vendor=1,class=1200,name=Zx,resource=a.io/b", "name='Zx'"),
        ("vendor=1,class=1200,name=zx,resource=a.io/b,colour=red", "expected vendor="),
        ("x" * 2000, "at most 1024"),
    ],
)
def test_bad_rules_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(AcceleratorRuleError, match=message):
        parse_rule(text)


@pytest.mark.parametrize(
    "name",
    ["nvidia.com/gpu", "nvidia.com/gpux", "xnvidia.com/gpu", "nvidia.com/mig-3g.40gb",
     "nvidia.com/mig-", "nvidia.com/gpu\n", "rdma/ib", "rdma/", "rdma", "cpu", "memory",
     "vendor/[x]", "vendor/x"],
)  # fmt: skip
@pytest.mark.parametrize(
    "names",
    [DEFAULT_RESOURCES, ResourceNames(gpu=("vendor/[x]", "a?c/*"), nic=("vendor/*",)),
     ResourceNames(gpu=(), nic=())],
)  # fmt: skip
def test_resource_names_match_as_fnmatch_says(names, name):
    """The patterns are matched in one compiled expression: the same answers as
    `fnmatch.fnmatchcase`, pattern by pattern (GPU patterns win over NIC ones)."""
    gpu = any(fnmatch.fnmatchcase(name, pattern) for pattern in names.gpu)
    assert names.is_gpu(name) == gpu
    assert names.is_nic(name) == (not gpu and any(fnmatch.fnmatchcase(name, p) for p in names.nic))
