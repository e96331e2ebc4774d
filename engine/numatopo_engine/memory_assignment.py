"""Booking memory and huge pages on the memory manager's NUMA nodes.

The request is booked in NUMA id order, each node filled before the next, as the kubelet's static
memory manager books it; `cpuset.mems` lists every node of the placement (its memory group), so the
kernel may spill there under pressure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import combinations
from typing import NamedTuple


def book_bytes(free: dict[int, int], numa_ids: Iterable[int], amount: int) -> dict[int, int] | None:
    """Bytes to book per NUMA node in the module's order (taken from `free`), or None."""
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


class MemoryView(NamedTuple):
    """What the static memory manager reads for one container: per kind ("memory" or a huge page
    size), the allocatable and free bytes per NUMA id, and the memory groups (NUMA id -> group mask,
    bit n = NUMA id n; -1 where two groups meet)."""

    numa_ids: tuple[int, ...]
    allocatable: Mapping[str, Mapping[int, int]]
    free: Mapping[str, Mapping[int, int]]
    groups: Mapping[int, int]


def memory_manager_mask(
    view: MemoryView,
    request: Mapping[str, int],
    tm_mask: int | None,
    tm_preferred: bool,
    reusable: Mapping[tuple[int, str], int],
) -> int | None:
    """The NUMA nodes (a mask) the kubelet's static memory manager gives a container, or None where
    its `Allocate` fails (`memorymanager/policy_static.go`):

    * a nil Topology Manager hint (policy `none`; `single-numa-node` when the winner is every
      node) is replaced by the manager's own best hint (`getDefaultHint`): an error when it has
      none, or when the Topology Manager's hint was preferred and that one is not;
    * a hint whose free memory does not hold the request (`isAffinitySatisfyRequest`, blind to
      reusable memory) is extended to the best own hint containing it
      (`extendTopologyManagerHint`), with the same errors;
    * a multi-node result sharing a node with memory of another group, or with single-node
      memory, is refused (`isAffinityViolatingNUMAAllocations`).

    "Best" is `findBestHint`: preferred first, then the narrowest (fewer nodes, then the lower
    mask). `reusable`: per (mask, kind) the bytes of init containers on exactly that mask this
    container may reuse (`getPodReusableMemory`), free to the manager's own hints."""
    kinds = {k: v for k, v in request.items() if v > 0}
    if not kinds:
        return tm_mask
    own = _own_hints(view, kinds, reusable)
    mask = tm_mask
    # A nil hint takes the best own hint (as if every one contained it), which then needs no
    # extension: it is the best own hint containing itself.
    if mask is None or not _holds(view.free, kinds, mask):
        containing = [(m, p) for m, p in own if mask is None or m & mask == mask]
        if not containing:
            return None
        mask, preferred = _best(containing)
        if tm_preferred and not preferred:
            return None
    if mask.bit_count() > 1 and not _may_join(view.groups, mask, single=False):
        return None
    return mask


def _own_hints(
    view: MemoryView, kinds: Mapping[str, int], reusable: Mapping[tuple[int, str], int]
) -> list[tuple[int, bool]]:
    """`calculateHints`: (mask, preferred) for every mask whose nodes may serve the request together
    and whose free bytes, with those reusable on exactly that mask, hold it; preferred when as
    narrow as the narrowest mask whose allocatable bytes hold it."""
    ids = view.numa_ids
    found: list[int] = []
    narrowest = len(ids)
    for width in range(1, len(ids) + 1):
        for combo in combinations(ids, width):
            mask = sum(1 << n for n in combo)
            if not _holds(view.allocatable, kinds, mask):
                continue
            narrowest = min(narrowest, width)
            if not _may_join(view.groups, mask, single=width == 1):
                continue
            less = {k: v - reusable.get((mask, k), 0) for k, v in kinds.items()}
            if _holds(view.free, less, mask):
                found.append(mask)
    return [(m, m.bit_count() == narrowest) for m in found]


def _holds(table: Mapping[str, Mapping[int, int]], kinds: Mapping[str, int], mask: int) -> bool:
    return all(
        sum(amount for n, amount in table.get(kind, {}).items() if mask >> n & 1) >= need
        for kind, need in kinds.items()
    )


def _may_join(groups: Mapping[int, int], mask: int, *, single: bool) -> bool:
    """A single node joins no multi-node group; a wider mask only nodes of it or without memory."""
    nodes = [n for n in range(mask.bit_length()) if mask >> n & 1]
    if single:
        group = groups.get(nodes[0], 0)
        return group == 0 or (group > 0 and group.bit_count() == 1)
    return all(groups.get(n, 0) in (0, mask) for n in nodes)


def _best(hints: list[tuple[int, bool]]) -> tuple[int, bool]:
    """`findBestHint`: a preferred hint beats the others, then the narrowest."""
    return min(hints, key=lambda h: (not h[1], h[0].bit_count(), h[0]))
