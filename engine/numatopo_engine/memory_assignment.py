"""Booking memory and huge pages on the NUMA nodes of the chosen mask.

The request is booked on the mask's node with the most free bytes first (ties: lower
id), spilling to the next only when that node cannot hold the rest. A pod whose memory
fits one node so stays on one node even when its CPUs or GPUs span two; `cpuset.mems`
still lists every node of the mask, as the kubelet's memory manager does, so the kernel
may spill there under pressure.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["book_bytes"]


def book_bytes(free: dict[int, int], numa_ids: Iterable[int], amount: int) -> dict[int, int] | None:
    """Bytes to book per NUMA node (and take them from `free`), or None if they do not fit."""
    if amount <= 0:
        return {}
    order = sorted(numa_ids, key=lambda n: (-free.get(n, 0), n))
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
