"""Which PCI functions are accelerators numatopo places, and under which resource name (pure).

The one rule table (`DEFAULT_ACCELERATORS`), how configured rules override it, and their syntax:
docs/DESIGN.md, "Accelerators of any vendor and MIG devices". Each default id is checked against a
public source (tests/fixtures/sysfs/accelerators/README.md); Intel and Huawei rules list device ids
because those vendors ship other functions in the same classes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_RESOURCE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_NAME = re.compile(r"^[a-z0-9][-a-z0-9]*$")
_MAX_RULE_CHARS = 1024


class AcceleratorRuleError(ValueError):
    """A configured accelerator rule cannot be used; the message names the part."""


@dataclass(frozen=True, slots=True)
class AcceleratorRule:
    """PCI ids of one kind of accelerator and what the model calls it."""

    vendor_id: int
    classes: frozenset[int]
    """16-bit class codes: base class << 8 | subclass (`0x1200` processing accelerator)."""
    vendor: str
    """The `vendor` written into the spec's `gpus[]` entries."""
    resource: str
    """The extended resource its device plugin advertises."""
    devices: frozenset[int] = field(default_factory=frozenset)
    """Device ids this rule covers; empty: every device of the vendor in `classes`."""

    def matches(self, vendor_id: int, class_code: int, device_id: int | None) -> bool:
        """Whether a function with these ids (24-bit `class_code`) is this accelerator."""
        if vendor_id != self.vendor_id or class_code >> 8 not in self.classes:
            return False
        return not self.devices or device_id in self.devices


_ASCEND = 0x19E5
_INTEL = 0x8086
# Ponte Vecchio functions listed in pci.ids as "[Data Center GPU Max ...]" and the XL part.
_INTEL_MAX = frozenset({0x0B69, 0x0B6E, 0x0BD0, 0x0BD4, 0x0BD5, 0x0BD6, 0x0BD7, 0x0BD8,
                        0x0BD9, 0x0BDA, 0x0BDB})  # fmt: skip

DEFAULT_ACCELERATORS: tuple[AcceleratorRule, ...] = (
    AcceleratorRule(0x10DE, frozenset({0x0300, 0x0302}), "nvidia", "nvidia.com/gpu"),
    AcceleratorRule(0x1002, frozenset({0x0300, 0x0380, 0x1200}), "amd", "amd.com/gpu"),
    AcceleratorRule(0x1DA3, frozenset({0x1200}), "habana", "habana.ai/gaudi"),
    AcceleratorRule(
        _ASCEND, frozenset({0x1200}), "huawei", "huawei.com/Ascend910",
        frozenset({0xD801, 0xD802, 0xD803}),
    ),
    AcceleratorRule(
        _ASCEND, frozenset({0x1200}), "huawei", "huawei.com/Ascend310P", frozenset({0xD500})
    ),
    AcceleratorRule(
        _ASCEND, frozenset({0x1200}), "huawei", "huawei.com/Ascend310", frozenset({0xD100})
    ),
    AcceleratorRule(_INTEL, frozenset({0x0380}), "intel", "gpu.intel.com/i915", _INTEL_MAX),
)  # fmt: skip


def match_accelerator(
    rules: Iterable[AcceleratorRule], vendor_id: int, class_code: int, device_id: int | None
) -> AcceleratorRule | None:
    """The first rule that matches, or None when the function is no accelerator."""
    return next((r for r in rules if r.matches(vendor_id, class_code, device_id)), None)


def resource_patterns(rules: Iterable[AcceleratorRule]) -> tuple[str, ...]:
    """The distinct resource names of `rules`, in order (the engine's GPU patterns)."""
    return tuple(dict.fromkeys(r.resource for r in rules))


def parse_rule(text: str) -> AcceleratorRule:
    """One rule from its configuration string (syntax in the module docstring)."""
    if len(text) > _MAX_RULE_CHARS:
        raise AcceleratorRuleError(f"an accelerator rule is at most {_MAX_RULE_CHARS} characters")
    fields: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in {"vendor", "class", "name", "resource", "devices"}:
            raise AcceleratorRuleError(
                f"{part!r}: expected vendor=, class=, name=, resource= or devices="
            )
        if key in fields:
            raise AcceleratorRuleError(f"{key}= is given twice")
        fields[key] = value.strip()
    missing = [k for k in ("vendor", "class", "name", "resource") if k not in fields]
    if missing:
        raise AcceleratorRuleError(f"{text!r} lacks {', '.join(k + '=' for k in missing)}")
    name, resource = fields["name"], fields["resource"]
    if not _NAME.match(name):
        raise AcceleratorRuleError(f"name={name!r}: lower-case letters, digits and '-' only")
    if not _RESOURCE.match(resource):
        raise AcceleratorRuleError(
            f"resource={resource!r} is not an extended resource name such as example.com/npu"
        )
    classes = frozenset(_hex(c, "class") for c in fields["class"].split(":"))
    devices = frozenset(_hex(d, "devices") for d in fields.get("devices", "").split(":") if d)
    return AcceleratorRule(_hex(fields["vendor"], "vendor"), classes, name, resource, devices)


def _hex(text: str, key: str) -> int:
    digits = text.strip().lower().removeprefix("0x")
    if not re.fullmatch(r"[0-9a-f]{1,4}", digits):
        raise AcceleratorRuleError(f"{key}={text!r}: expected a 16-bit hex id such as 0x1200")
    return int(digits, 16)
