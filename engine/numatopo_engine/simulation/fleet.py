"""Realistic fleets: many nodes of a few hardware shapes, each node with its own names.

On a real cluster every node publishes its own name, GPU and MIG UUIDs (as NVML reports them) and
PCI bus ids, while a few hardware shapes are shared by hundreds of nodes. Benchmarks, `numatopo
simulate` and tests build their nodes here, so none measures a fleet whose nodes share names (which
hides anything keyed by a node's identity).

Names are deterministic from (seed, node name). Bus ids keep the shape's PCI addresses where it
lists them (nodes of one model share a board layout) and otherwise count up from bus 0x07 in GPU
index order, as NVML lists GPUs.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Any, NamedTuple

from numatopo_engine.model import NumatopologySpec


class FleetNode(NamedTuple):
    name: str
    spec: NumatopologySpec  # the node's own: its shape with its names


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def _rng(seed: int, name: str) -> random.Random:
    digest = hashlib.blake2b(f"{seed}/{name}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def gpu_uuid(rng: random.Random, prefix: str = "GPU") -> str:
    """A UUID as NVML prints it (`GPU-8-4-4-4-12` hex digits), drawn from `rng`."""
    digits = f"{rng.getrandbits(128):032x}"
    return f"{prefix}-{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def identify(
    spec: NumatopologySpec, name: str, *, seed: int = 0, nic_names: bool = False
) -> NumatopologySpec:
    """`spec` (a hardware shape) as node `name` would publish it, with its own GPU and MIG UUIDs and
    bus ids, and with `nic_names` its own NIC names (in the same order: rare, but names survive)."""
    rng = _rng(seed, name)
    wire: dict[str, Any] = spec.to_wire()
    for number, gpu in enumerate(wire.get("gpus", ())):
        gpu["uuid"] = gpu_uuid(rng)
        gpu.setdefault("pciBusId", f"00000000:{0x07 + 0x10 * number:02X}:00.0")
        for device in gpu.get("migDevices") or ():
            device["uuid"] = gpu_uuid(rng, "MIG")
    if nic_names and wire.get("nics"):
        tag = f"{rng.getrandbits(24):06x}"
        ordered = sorted(n["name"] for n in wire["nics"])
        renamed = {old: f"n{tag}_{i:03d}" for i, old in enumerate(ordered)}
        for nic in wire["nics"]:
            nic["name"] = renamed[nic["name"]]
        for path in wire.get("pciPaths", ()):
            path["nic"] = renamed[path["nic"]]
    return NumatopologySpec.model_validate(wire)


def build_fleet(
    shapes: Sequence[NumatopologySpec],
    count: int,
    *,
    seed: int = 0,
    weights: Sequence[float] | None = None,
) -> list[FleetNode]:
    """`count` nodes over `shapes` (in turn, or by `weights`), each `identify`d by its name."""
    pick = random.Random(seed)
    nodes: list[FleetNode] = []
    for index in range(count):
        if weights is None:
            shape = shapes[index % len(shapes)]
        else:
            shape = pick.choices(shapes, weights=weights)[0]
        name = node_name(index)
        nodes.append(FleetNode(name, identify(shape, name, seed=seed)))
    return nodes
