"""GPU pairs from NVLink endpoints, NVSwitch fabrics included.

On NVSwitch machines (DGX-2, HGX A100/H100) no NVLink of a GPU ends at another GPU: every link ends
at a switch, and the switches connect every GPU to every other at full rate. NVML and hwloc both
report it that way. `nvidia-smi topo -m` prints the pair view (NV12 / NV18 for all 28 pairs of 8
GPUs), and that is what the model stores, so a GPU that reaches switches with `n` links is joined to
every other such GPU with `min(n_a, n_b)` links: the narrower side limits the pair.
"""

from __future__ import annotations

from collections.abc import Mapping


def pair_links(
    direct: Mapping[tuple[int, int], int], via_switch: Mapping[int, int]
) -> dict[tuple[int, int], int]:
    """Links per GPU pair `(a, b)`, a < b: direct links plus the switched share. `direct[(a, b)]`
    counts the links of GPU `a` that end at GPU `b`, as seen from `a`; both ends normally report
    the same number, and the larger wins when one end could not be read."""
    pairs: dict[tuple[int, int], int] = {}
    for (a, b), count in direct.items():
        if count > 0 and a != b:
            key = (min(a, b), max(a, b))
            pairs[key] = max(pairs.get(key, 0), count)
    switched = sorted(g for g, count in via_switch.items() if count > 0)
    for i, a in enumerate(switched):
        for b in switched[i + 1 :]:
            pairs[(a, b)] = pairs.get((a, b), 0) + min(via_switch[a], via_switch[b])
    return dict(sorted(pairs.items()))
