"""NVLink as every GPU reader counts it: GB/s per link, and GPU pairs from link ends (NVSwitch too).

Everywhere in numatopo `bandwidthGBps` is the *unidirectional* bandwidth of the bonded links in
GB/s (10^9 bytes): links x per-link GB/s per direction. NVIDIA's figures are bidirectional (H100:
"900 GB/s" = 18 links x 25 GB/s x 2), twice ours. Per link and direction (NVIDIA whitepapers):

    NVLink 1  Pascal P100          20 GB/s
    NVLink 2  Volta V100           25 GB/s
    NVLink 3  Ampere A100, A40     25 GB/s  (A100: 12 links = 300 GB/s)
    NVLink 4  Hopper H100/H200/GH  25 GB/s  (H100: 18 links = 450 GB/s)
    NVLink 5  Blackwell B100/B200  50 GB/s  (B200: 18 links = 900 GB/s)

An unknown model (`nvidia-smi topo -m` prints none) gets 25 GB/s, right from Volta to Hopper.

On NVSwitch machines (DGX-2, HGX A100/H100) every NVLink of a GPU ends at a switch, and the switches
join every GPU to every other at full rate; NVML and hwloc report it so. The model stores the pair
view `nvidia-smi topo -m` prints (NV18 for all 28 pairs of 8 GPUs): a GPU reaching switches with `n`
links is joined to every other such GPU with `min(n_a, n_b)` links (the narrower side limits).
"""

from __future__ import annotations

from collections.abc import Mapping

from numatopo_engine.model import GpuLink, LinkType

DEFAULT_LINK_GBPS = 25.0

# The first marker found in the upper-cased model name wins (GB200 has B200 in it); every other
# model, Volta to Hopper, carries the default.
_GENERATIONS: tuple[tuple[str, float], ...] = (("B200", 50.0), ("B100", 50.0), ("P100", 20.0))


def link_gbps(model: str = "") -> float:
    """Per-link, per-direction GB/s for a GPU model name such as `NVIDIA H100 80GB HBM3`."""
    upper = model.upper()
    return next((rate for marker, rate in _GENERATIONS if marker in upper), DEFAULT_LINK_GBPS)


def nvlinks(
    direct: Mapping[tuple[int, int], int], via_switch: Mapping[int, int], models: Mapping[int, str]
) -> list[GpuLink]:
    """The NVLinks of each GPU pair `(a, b)`, a < b: direct links plus the switched share, at the
    rate of `a`'s model (`models`: GPU index -> name). `direct[(a, b)]` counts the links of GPU `a`
    that end at GPU `b`, as seen from `a`; both ends normally report the same number, and the
    larger wins when one end could not be read."""
    pairs: dict[tuple[int, int], int] = {}
    for (a, b), count in direct.items():
        if count > 0 and a != b:
            key = (min(a, b), max(a, b))
            pairs[key] = max(pairs.get(key, 0), count)
    switched = sorted(g for g, count in via_switch.items() if count > 0)
    for i, a in enumerate(switched):
        for b in switched[i + 1 :]:
            pairs[(a, b)] = pairs.get((a, b), 0) + min(via_switch[a], via_switch[b])
    return [
        GpuLink(a=a, b=b, type=LinkType.NVLINK, links=n, bandwidth_g_bps=n * link_gbps(models[a]))
        for (a, b), n in sorted(pairs.items())
    ]
