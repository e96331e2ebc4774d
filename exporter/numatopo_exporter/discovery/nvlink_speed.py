"""How many GB/s one NVLink carries, by GPU generation.

Convention used everywhere in numatopo: `bandwidthGBps` is the *unidirectional* bandwidth of the
bonded links, in GB/s (10^9 bytes): `links x per-link GB/s per direction`. NVIDIA's marketing
figures are bidirectional (H100: "900 GB/s" = 18 links x 25 GB/s x 2 directions), twice ours.

Per-link, per-direction rates (NVIDIA architecture whitepapers):

    NVLink 1  Pascal P100          20 GB/s
    NVLink 2  Volta V100           25 GB/s
    NVLink 3  Ampere A100, A40     25 GB/s  (A100: 12 links = 300 GB/s)
    NVLink 4  Hopper H100/H200/GH  25 GB/s  (H100: 18 links = 450 GB/s)
    NVLink 5  Blackwell B100/B200  50 GB/s  (B200: 18 links = 900 GB/s)

An unknown model (`nvidia-smi topo -m` prints no model names) gets 25 GB/s, right for every
generation from Volta to Hopper.
"""

from __future__ import annotations

DEFAULT_LINK_GBPS = 25.0

# The first marker found in the upper-cased model name wins (GB200 has B200 in it); every other
# model, Volta to Hopper, carries the default.
_GENERATIONS: tuple[tuple[str, float], ...] = (("B200", 50.0), ("B100", 50.0), ("P100", 20.0))


def link_gbps(model: str = "") -> float:
    """Per-link, per-direction GB/s for a GPU model name such as `NVIDIA H100 80GB HBM3`."""
    upper = model.upper()
    return next((rate for marker, rate in _GENERATIONS if marker in upper), DEFAULT_LINK_GBPS)
