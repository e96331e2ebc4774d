"""The kubelet Topology Manager's merge of hints, exactly (Kubernetes 1.24+ semantics).

Each hint provider (CPU manager, device manager, memory manager) gives, per resource, a
list of hints: a NUMA mask that can hold the request from what is free, *preferred*
when its width is the fewest NUMA nodes that could hold the request on the hardware.
The kubelet merges one hint per resource at a time (the cross product,
`topologymanager/policy.go`):

* the merged mask is the AND of the hints' masks;
* it is preferred only when every hint is preferred **and all their masks are equal**
  (`mergePermutation` since 1.24; earlier releases only asked for the first);
* among merged hints, a preferred one beats any non-preferred; among preferred ones the
  narrowest wins (fewer NUMA nodes, then the lower mask), or with the policy option
  `prefer-closest-numa-nodes` the one with the lower mean distance among equally wide
  ones; among non-preferred ones the winner is the one whose width is closest to, but
  not above, the widest of the providers' narrowest hints (`HintMerger.compare`).

A provider's list may be None (no preference: the kubelet's `{nil, preferred}`) or
empty (no mask can hold it: `{nil, not preferred}`).

The cross product is exponential in the number of providers; this module reaches the
same winner without it. A preferred merge needs one mask that every provider lists as
preferred, so the preferred winner is the best mask of that intersection. Without one,
every merged hint is non-preferred and the winner depends only on the set of masks
the ANDs can produce, which is built pairwise (at most 2^N distinct values).

Policies (`policy_*.go`): `best-effort` admits whatever wins; `restricted` admits only a
preferred winner; `single-numa-node` first drops every hint that is not a preferred
single NUMA node, then admits only a preferred winner; `none` merges nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from numatopo_engine.annotations import PolicyName
from numatopo_engine.numamask import LOCAL_DISTANCE, bits, make_mask

__all__ = ["Hint", "Merged", "best_non_preferred", "mask_order", "merge"]


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


def best_non_preferred(
    produced: Iterable[int], target: int, key: Callable[[int], tuple[float, ...]]
) -> int | None:
    """The winner among non-preferred merged masks (`HintMerger.compare`).

    The kubelet walks the permutations keeping a current best; the walk always ends at
    the same mask, which this computes directly: a mask exactly `target` wide (the
    widest of the providers' narrowest hints) if there is one; else the widest below
    it; else the narrowest above it; ties by `key`. Empty masks never win.
    """
    masks = [m for m in produced if m]
    if not masks:
        return None
    widths = {m.bit_count() for m in masks}
    if target in widths:
        width = target
    elif any(w < target for w in widths):
        width = max(w for w in widths if w < target)
    else:
        width = min(widths)
    return min((m for m in masks if m.bit_count() == width), key=key)
