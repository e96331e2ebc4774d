"""The kubelet Topology Manager's merge, one hint list per provider (a test oracle).

Production merges every candidate mask of a shape at once (`numatopo_engine.decision`);
this states the same rules for one pod's hint lists (see the rules in
`numatopo_engine.topology_manager`), reaching the kubelet's winner without its cross
product, and takes `best_non_preferred` from the engine so that the differential tests
against the permutation walk (`reference.merge`) cover it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from numatopo_engine.annotations import PolicyName
from numatopo_engine.numamask import LOCAL_DISTANCE, bits, make_mask
from numatopo_engine.topology_manager import best_non_preferred


@dataclass(frozen=True, slots=True)
class Hint:
    """A kubelet TopologyHint; `mask` None is "any NUMA node"."""

    mask: int | None
    preferred: bool


class Merged(NamedTuple):
    """The Topology Manager's answer: the merged hint and whether the policy admits it."""

    mask: int | None  # None: no affinity (policy `none`, or `single-numa-node`'s default)
    preferred: bool
    admit: bool


def mask_order(
    distances: Mapping[tuple[int, int], int] | None, *, closest: bool
) -> Callable[[int], tuple[float, ...]]:
    """The kubelet's "better mask" order as a sort key (lower is better): fewer NUMA
    nodes, then (with `closest`) the lower mean distance over every ordered pair of
    nodes, the diagonal included (`NUMADistances.CalculateAverageFor`), then the lower
    mask value (`bitmask.IsLessThan`)."""
    if not closest or distances is None:
        return lambda mask: (mask.bit_count(), mask)

    def key(mask: int) -> tuple[float, ...]:
        ids = bits(mask)
        total = sum(distances.get((a, b), LOCAL_DISTANCE) for a in ids for b in ids)
        return (len(ids), total / len(ids) ** 2, mask)

    return key


def merge(
    providers: Sequence[Sequence[Hint] | None],
    numa_ids: Iterable[int],
    policy: PolicyName,
    *,
    distances: Mapping[tuple[int, int], int] | None = None,
    prefer_closest: bool = False,
) -> Merged:
    """The merged hint for `providers` (one hint list per resource) under `policy`."""
    if policy is PolicyName.NONE:
        return Merged(None, False, True)
    everything = make_mask(numa_ids)
    single = policy is PolicyName.SINGLE_NUMA_NODE
    lists: list[list[Hint]] = []
    for hints in providers:
        if hints is None:
            listed = [Hint(None, True)]
        elif not hints:
            listed = [Hint(None, False)]
        else:
            listed = list(hints)
        if single:
            listed = [
                h for h in listed if h.preferred and (h.mask is None or h.mask.bit_count() == 1)
            ]
        lists.append(listed)
    # The option is ignored under single-numa-node, where every candidate is one node.
    key = mask_order(distances, closest=prefer_closest and not single)
    merged = _merge(lists, everything, key)
    if merged is None:
        merged = Hint(everything, False)
    admit = merged.preferred or policy is PolicyName.BEST_EFFORT
    mask = merged.mask
    if single and mask == everything:
        mask = None
    return Merged(mask, merged.preferred, admit)


def _merge(
    lists: Sequence[Sequence[Hint]], everything: int, key: Callable[[int], tuple[float, ...]]
) -> Hint | None:
    if any(not hints for hints in lists):
        return None  # some resource has no hint at all: no permutation exists
    preferred = _preferred_candidates(lists, everything)
    if preferred:
        return Hint(min(preferred, key=key), True)
    produced = {everything}
    narrowest: list[int] = []
    for hints in lists:
        masks = {everything if h.mask is None else h.mask & everything for h in hints}
        widths = [h.mask.bit_count() for h in hints if h.mask is not None]
        if widths:
            narrowest.append(min(widths))
        produced = _ands(produced, masks)
    chosen = best_non_preferred(produced, max(narrowest, default=0), key)
    return None if chosen is None else Hint(chosen, False)


def _preferred_candidates(lists: Sequence[Sequence[Hint]], everything: int) -> set[int]:
    """The masks a preferred permutation can merge to (the 1.24+ rule): one mask `M` that
    every resource lists as preferred, or skips with a preferred nil hint; the default
    mask when every resource can take its nil hint."""
    masks: list[set[int]] = []
    nil: list[bool] = []
    for hints in lists:
        masks.append({h.mask & everything for h in hints if h.preferred and h.mask is not None})
        nil.append(any(h.preferred and h.mask is None for h in hints))
    found = {
        m
        for m in set().union(*masks)
        if m and all(m in own or skips for own, skips in zip(masks, nil, strict=True))
    }
    if all(nil):
        found.add(everything)
    return found


def _ands(left: set[int], right: set[int]) -> set[int]:
    """Every `a & b`: as numpy outer AND when the sets are large."""
    if len(left) * len(right) <= 256:
        return {a & b for a in left for b in right}
    if max(*left, *right) >= 1 << 63:
        return {a & b for a in left for b in right}
    a = np.fromiter(left, dtype=np.int64, count=len(left))
    b = np.fromiter(right, dtype=np.int64, count=len(right))
    return set(np.unique(np.bitwise_and.outer(a, b)).tolist())
