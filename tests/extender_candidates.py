"""`extender.Candidates` built by hand from (node, topology, state) triples, as a test
lays out a fleet: grouped by hardware shape the way `Ledger.judged_candidates` groups
them for the extender."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from numatopo_engine.model import NumatopologySpec
from numatopo_engine.packing import WorkloadMix
from numatopo_engine.state import NodeState
from numatopo_engine.topology_tables import shape_key
from numatopo_operator.extender import Candidates
from numatopo_operator.ledger import ShapeCandidates
from numatopo_operator.translate import NO_NUMATOPOLOGY


def candidates_of(
    nodes: Iterable[tuple[str, NumatopologySpec | None, NodeState | None]],
    stale: Mapping[str, str],
    mix: WorkloadMix | None = None,
) -> Candidates:
    """Candidates from (node, topology, state) triples and the stale ones' reasons."""
    groups: dict[str, ShapeCandidates] = {}
    unresolvable: dict[str, str] = {}
    for node, topology, state in nodes:
        if topology is None or state is None:
            unresolvable[node] = NO_NUMATOPOLOGY
        elif node in stale:
            unresolvable[node] = stale[node]
        else:
            key = state.shape_key if state.topology is topology else shape_key(topology)
            group = groups.setdefault(key, (topology, [], []))
            group[1].append(node)
            group[2].append(state)
    return Candidates(groups, unresolvable, mix or WorkloadMix())
