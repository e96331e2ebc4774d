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

The cross product is exponential in the number of providers; the merge reaches the
same winner without it. A preferred merge needs one mask that every provider lists as
preferred, so the preferred winner is the best mask of that intersection. Without one,
every merged hint is non-preferred and the winner depends only on the set of masks
the ANDs can produce, which is built pairwise (at most 2^N distinct values).

`decision` applies these rules to every candidate mask of a shape at once and takes
`best_non_preferred` from here; the scalar merge that states them one hint list at a
time is a test oracle (`tests/engine/kubelet/merge_oracle.py`), compared with the
kubelet's own permutation walk (`tests/engine/kubelet/reference.py`).

Policies (`policy_*.go`): `best-effort` admits whatever wins; `restricted` admits only a
preferred winner; `single-numa-node` first drops every hint that is not a preferred
single NUMA node, then admits only a preferred winner; `none` merges nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["best_non_preferred"]


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
