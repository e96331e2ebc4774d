"""The kubelet Topology Manager's merge of hints, exactly (Kubernetes 1.24+ semantics; the rules:
docs/DESIGN.md, "The allocation engine", step 2).

A provider's list may be None (no preference: the kubelet's `{nil, preferred}`) or empty (no mask
can hold it: `{nil, not preferred}`). The kubelet walks the cross product of the lists, exponential
in the number of providers; the same winner comes without it. A preferred merge needs one mask every
provider lists as preferred, so the preferred winner is the best mask of that intersection. Without
one, every merged hint is non-preferred and the winner depends only on the set of masks the ANDs can
produce, built pairwise (at most 2^N values): `best_non_preferred`, which `decision` takes.

Policies (`policy_*.go`) admit as DESIGN says; `single-numa-node` first drops every hint that is not
a preferred single NUMA node; `none` merges nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


def best_non_preferred(
    produced: Iterable[int], target: int, key: Callable[[int], tuple[float, ...]]
) -> int | None:
    """The winner among non-preferred merged masks (`HintMerger.compare`), where the kubelet's walk
    always ends: a mask exactly `target` wide (the widest of the providers' narrowest hints), else
    the widest below it, else the narrowest above; ties by `key`; empty masks never win."""
    masks = [m for m in produced if m]
    if not masks:
        return None
    widths = {m.bit_count() for m in masks}
    width = max((w for w in widths if w <= target), default=min(widths))
    return min((m for m in masks if m.bit_count() == width), key=key)
