"""NUMA affinity masks as plain ints: bit `n` set = NUMA node `n` is in the mask.

The order is the kubelet's (`bitmask.IsNarrowerThan`): a mask is narrower than another when it has
fewer bits set, and among masks of equal width the one with the lower integer value comes first.
`sort_key` gives that total order. (With `prefer-closest-numa-nodes` the kubelet breaks ties between
equally wide masks by mean SLIT distance: `decision._mean_distances`.)
"""

from __future__ import annotations

from collections.abc import Iterable

# ACPI SLIT defines 10 as the distance of a node to itself.
LOCAL_DISTANCE = 10


def make_mask(numa_ids: Iterable[int]) -> int:
    return sum(1 << numa_id for numa_id in set(numa_ids))


def bits(mask: int) -> list[int]:
    """The NUMA ids in `mask`, ascending."""
    return [numa_id for numa_id in range(mask.bit_length()) if mask >> numa_id & 1]


def width(mask: int) -> int:
    return mask.bit_count()


def sort_key(mask: int) -> tuple[int, int]:
    """Narrower first, then lower bits (kubelet `IsNarrowerThan`)."""
    return (mask.bit_count(), mask)


def format_mask(mask: int) -> str:
    """`NUMA 0,1` style text for messages."""
    return ",".join(str(n) for n in bits(mask)) or "-"
