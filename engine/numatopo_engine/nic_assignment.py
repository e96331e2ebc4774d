"""Choosing NICs: those on the placement's NUMA nodes (or on none) first, then the closest PCIe path
to the container's GPUs, then NUMA match, then name (NICs are positions in the node's name order,
`topology_tables`).

A NIC's distance to a GPU set is its best (lowest-ranked) path to any GPU of the set, PIX < PXB <
PHB < NODE < SYS, as `spec.pciPaths` lists them; a pair without a listed path ranks after SYS.
Without GPUs every NIC is equally far and NUMA match decides.
"""

from __future__ import annotations

from collections.abc import Iterable

from numatopo_engine.topology_tables import NO_PATH_RANK, Tables


def choose_nics(
    tables: Tables,
    candidates: Iterable[int],
    count: int,
    *,
    gpus: Iterable[int],
    numa_ids: set[int],
) -> list[int] | None:
    """The `count` closest NICs among `candidates`, ascending, or None if there are too few."""
    chosen_gpus = list(gpus)
    gpu_numa = {tables.gpu_numa[g] for g in chosen_gpus} - {None}
    local = gpu_numa or numa_ids

    def distance(nic: int) -> tuple[bool, int, bool, int]:
        numa = tables.nic_numa[nic]
        rank = min((tables.pci_rank.get((g, nic), NO_PATH_RANK) for g in chosen_gpus), default=0)
        return (numa is not None and numa not in numa_ids, rank, numa not in local, nic)

    ranked = sorted(candidates, key=distance)
    if len(ranked) < count:
        return None
    return sorted(ranked[:count])
