"""PCI addresses as every source prints them, reduced to one form.

NVML prints `00000000:18:00.0` (8-digit domain, upper case hex), sysfs and hwloc
`0000:18:00.0`, NCCL `0000:18:00.0`; some tools drop the domain. The model keeps the
kernel's form: 4-digit domain, lower case.
"""

from __future__ import annotations

import re

_BUS_ID = re.compile(
    r"^(?:(?P<domain>[0-9a-f]{1,8}):)?"
    r"(?P<bus>[0-9a-f]{1,2}):(?P<dev>[0-9a-f]{1,2})\.(?P<fn>[0-7])$"
)


def normalize_bus_id(bus_id: str) -> str:
    """`00000000:1A:00.0` -> `0000:1a:00.0`; ValueError for anything that is no PCI address."""
    text = bus_id.strip().lower()
    match = _BUS_ID.match(text)
    if match is None:
        raise ValueError(f"{bus_id!r} is not a PCI address (expected DDDD:BB:DD.F)")
    domain = int(match["domain"] or "0", 16)
    if domain > 0xFFFF:
        raise ValueError(f"{bus_id!r}: PCI domain {domain:#x} is above 0xffff")
    return f"{domain:04x}:{int(match['bus'], 16):02x}:{int(match['dev'], 16):02x}.{match['fn']}"
