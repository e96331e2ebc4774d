"""Synthetic leaf/spine clusters of real node shapes, and the cluster file that holds one.

The tree has the shape of AWS's EC2 instance topology (three network layers named by node labels
`topology.k8s.aws/network-node-layer-1..3`, widest first): `blocks` network blocks, each of `spines`
spines, each of `leaves` leaf switches, each of `nodes` nodes. Every leaf holds nodes of one
hardware shape (a rack is bought whole); shapes are drawn per leaf in proportion to their weights
(`shapes_from_rows`: how many nodes of that model and GPU count a node list has). Node names are
`ip-10-A-B-C` in a shuffled order, as EC2 names them: a scheduler that walks nodes by name does not
walk them in network order by accident.

The cluster file (`ClusterFile`; `numatopo domains --cluster`, written by `numatopo simulate
--multi-node --write-cluster`): docs/DESIGN.md, "Offline: `numatopo domains`, `numatopo simulate
--multi-node`".
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import Field, model_validator

from numatopo_engine.annotations import Assignment
from numatopo_engine.domains import DomainTree, NodeCandidate
from numatopo_engine.model import NumatopologySpec, WireModel
from numatopo_engine.simulation.fleet import identify
from numatopo_engine.simulation.layouts import TopologyMap, build_node_spec
from numatopo_engine.simulation.trace import NodeRow
from numatopo_engine.state import NodeState

LEVELS = (
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
)


class ClusterNode(WireModel):
    name: str = Field(min_length=1)
    shape: str
    labels: dict[str, str] = Field(default_factory=dict)
    assignments: dict[str, Assignment] = Field(default_factory=dict)


class ClusterFile(WireModel):
    """Nodes with their labels, hardware shape and what their pods hold."""

    shapes: dict[str, NumatopologySpec]
    nodes: list[ClusterNode]

    @model_validator(mode="after")
    def _consistent(self) -> ClusterFile:
        seen: set[str] = set()
        for node in self.nodes:
            if node.shape not in self.shapes:
                raise ValueError(f"node {node.name!r}: unknown shape {node.shape!r}")
            if node.name in seen:
                raise ValueError(f"node {node.name!r} is listed twice")
            seen.add(node.name)
        return self

    def candidates(
        self, progress: Callable[[int, int], None] | None = None, *, named: bool = False
    ) -> dict[str, NodeCandidate]:
        """Each node's hardware and state; raises ValueError naming a node whose assignments
        double-book. `progress(done, total)`: nodes read. `named`: each node its own names
        (`fleet.identify`), as on a real cluster (a file's shapes name nothing per node)."""
        out: dict[str, NodeCandidate] = {}
        total = len(self.nodes)
        for done, node in enumerate(self.nodes):
            if progress is not None and done % 64 == 0:
                progress(done, total)
            topology = self.shapes[node.shape]
            if named:
                topology = identify(topology, node.name)
            state, rejected = NodeState.rebuild(topology, sorted(node.assignments.items()))
            if rejected:
                raise ValueError(f"node {node.name!r}: {rejected[0]}")
            out[node.name] = NodeCandidate(topology, state)
        if progress is not None:
            progress(total, total)
        return out

    def tree(self, levels: Sequence[str]) -> DomainTree:
        return DomainTree.build(levels, {node.name: node.labels for node in self.nodes})


@dataclass(frozen=True)
class LeafSpine:
    blocks: int
    spines: int  # per block
    leaves: int  # per spine
    nodes: int  # per leaf

    @classmethod
    def parse(cls, text: str) -> LeafSpine:
        """`BLOCKSxSPINESxLEAVESxNODES`, e.g. `2x2x4x8` (128 nodes)."""
        parts = text.lower().split("x")
        if len(parts) != 4 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
            raise ValueError(
                f"{text!r}: expected BLOCKSxSPINESxLEAVESxNODES, four positive whole numbers"
            )
        return cls(*(int(p) for p in parts))


@dataclass(frozen=True)
class NodeShapeWeight:
    name: str
    topology: NumatopologySpec
    weight: float


def shapes_from_rows(
    rows: Sequence[NodeRow], topology_map: TopologyMap, *, gpus: int
) -> list[NodeShapeWeight]:
    """Node shapes of the rows with `gpus` GPUs: per GPU model, its most common CPU and memory size
    laid out by the topology map, weighed by how many rows have the model."""
    by_model: dict[str, Counter[tuple[int, int]]] = {}
    for row in rows:
        if row.gpus == gpus:
            by_model.setdefault(row.model, Counter())[(row.cpu_milli, row.memory_mib)] += 1
    shapes = []
    for model, sizes in sorted(by_model.items()):
        (cpu_milli, memory_mib), _ = sizes.most_common(1)[0]
        row = NodeRow(f"{model}-{gpus}", cpu_milli, memory_mib, gpus, model)
        spec = build_node_spec(row, topology_map.layout_for(model, gpus))
        shapes.append(NodeShapeWeight(f"{model}x{gpus}", spec, float(sum(sizes.values()))))
    if not shapes:
        raise ValueError(f"the node list has no node with {gpus} GPUs")
    return shapes


def generate(layout: LeafSpine, shapes: Sequence[NodeShapeWeight], *, seed: int) -> ClusterFile:
    """An empty cluster of `layout`'s tree, one shape per leaf (module docstring)."""
    if not shapes:
        raise ValueError("generate: no node shapes")
    rng = random.Random(seed)
    size = layout.blocks * layout.spines * layout.leaves * layout.nodes
    names = [f"ip-10-{i >> 16 & 255}-{i >> 8 & 255}-{i & 255}" for i in range(1, size + 1)]
    rng.shuffle(names)
    weights = [s.weight for s in shapes]
    nodes: list[ClusterNode] = []
    fresh = iter(names)
    for block in range(layout.blocks):
        for spine in range(layout.spines):
            for leaf in range(layout.leaves):
                shape = rng.choices(shapes, weights)[0]
                labels = {
                    LEVELS[0]: f"nn-b{block}",
                    LEVELS[1]: f"nn-b{block}-s{spine}",
                    LEVELS[2]: f"nn-b{block}-s{spine}-l{leaf}",
                }
                for _ in range(layout.nodes):
                    nodes.append(ClusterNode(name=next(fresh), shape=shape.name, labels=labels))
    used = {node.shape for node in nodes}
    return ClusterFile(shapes={s.name: s.topology for s in shapes if s.name in used}, nodes=nodes)
