"""Booking memory and huge pages on the memory manager's NUMA nodes.

The request is booked in NUMA id order, each node filled before the next, as the
kubelet's static memory manager books it; `cpuset.mems` lists every node of the
placement (its memory group), so the kernel may spill there under pressure.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["book_bytes"]


def book_bytes(free: dict[int, int], numa_ids: Iterable[int], amount: int) -> dict[int, int] | None:
    """Bytes to book per NUMA node (and take them from `free`), or None if they do not fit.

    In NUMA id order, each node filled before the next, as the kubelet's static memory
    manager books a multi-node placement (`updateMachineState`)."""
    if amount <= 0:
        return {}
    order = sorted(numa_ids)
    if sum(max(free.get(n, 0), 0) for n in order) < amount:
        return None
    booked: dict[int, int] = {}
    remaining = amount
    for numa_id in order:
        take = min(remaining, max(free.get(numa_id, 0), 0))
        if take:
            booked[numa_id] = take
            free[numa_id] = free.get(numa_id, 0) - take
            remaining -= take
        if not remaining:
            break
    return booked
