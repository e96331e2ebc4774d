"""The extender ranks with the same cluster-level input as the simulator: host counts of
the mix's shapes over the nodes of the call (`allocation.mix_hosts`)."""

from __future__ import annotations

import json
from importlib import resources

from extender_candidates import candidates_of
from extender_scores import extender_scores
from numatopo_engine.allocation import Engine, allocate, evaluate, mix_hosts, score_many
from numatopo_engine.annotations import PolicyName
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.simulation.cluster import build_cluster
from numatopo_engine.simulation.layouts import parse_topology_map
from numatopo_engine.simulation.strategies import engine_request, trace_mix
from numatopo_engine.simulation.trace import NodeRow, PodRow
from numatopo_operator.extender import judge_candidates

ROWS = [
    NodeRow("g2-a", 96000, 393216, 8, "G2"),
    NodeRow("g2-b", 96000, 393216, 8, "G2"),
    NodeRow("g3", 128000, 786432, 8, "G3"),  # the only node an 8x120 pod fits
]


def test_prioritize_ranks_with_the_host_counts_of_the_nodes_it_judges():
    text = resources.files("numatopo_cli.samples.simulate").joinpath("topology-map.json")
    cluster = build_cluster(
        ROWS, parse_topology_map(json.loads(text.read_text())), with_engine_state=True
    )
    one = PodRow("one", 8000, 4096, 1, 1000)
    mix = trace_mix([one] * 40 + [PodRow("whole", 120000, 655360, 8, 1000)])
    nodes = [(n.name, n.shape.spec, n.state) for n in cluster.nodes]
    request = engine_request(one, PolicyName.BEST_EFFORT)

    ranks = judge_candidates(request, candidates_of(nodes, {}, mix)).ranks

    hosts = mix_hosts(((spec, [state]) for _, spec, state in nodes if state), mix)
    expected = {
        name: float(score_many(spec, [state], request, mix=mix, hosts=hosts).rank[0])
        for name, spec, state in nodes
        if state is not None
    }
    assert expected == ranks
    assert max(ranks, key=ranks.__getitem__) != "g3"


def test_a_long_lived_engine_judges_a_changing_fleet_as_a_fresh_one():
    """The operator's engine keeps verdicts per node row across cycles; on a fleet where
    pods land between cycles, every verdict (ranks, scores, refusals) is a fresh
    engine's, and the scores are the order of the ranks (`extender_scores`)."""
    text = resources.files("numatopo_cli.samples.simulate").joinpath("topology-map.json")
    shapes = [
        *ROWS,
        NodeRow("t4", 104000, 524288, 2, "T4"),
        NodeRow("v", 96000, 786432, 8, "V100M32"),
    ]
    rows = [NodeRow(f"n{i}", r.cpu_milli, r.memory_mib, r.gpus, r.model)
            for i, r in enumerate(shapes[i % len(shapes)] for i in range(40))]  # fmt: skip
    cluster = build_cluster(rows, parse_topology_map(json.loads(text.read_text())),
                            with_engine_state=True)  # fmt: skip
    pods = [PodRow("one", 8000, 4096, 1, 1000), PodRow("four", 32000, 16384, 4, 1000),
            PodRow("eight", 64000, 65536, 8, 1000)]  # fmt: skip
    mix = trace_mix(pods * 5)
    engine = Engine()
    for cycle in range(4):
        nodes = [(n.name, n.shape.spec, n.state) for n in cluster.nodes]
        for pod in pods:
            request = engine_request(pod, PolicyName.BEST_EFFORT)
            kept = judge_candidates(request, candidates_of(nodes, {}, mix), engine)
            fresh = judge_candidates(request, candidates_of(nodes, {}, mix))
            assert (fresh.ranks, fresh.scores, fresh.failed, fresh.unresolvable) == (
                kept.ranks,
                kept.scores,
                kept.failed,
                kept.unresolvable,
            )
            assert extender_scores(kept.ranks) == kept.scores
            # And as the one-node path decides, from the node's bookings as they are now.
            for name, spec, state in nodes:
                assert state is not None
                try:
                    evaluate(spec, state, request)
                except UnsatisfiableError:
                    assert name in kept.failed
                else:
                    assert name in kept.ranks
        # One pod lands on every third node: those rows change, the others are kept.
        for node in cluster.nodes[cycle::3]:
            assert node.state is not None
            request = engine_request(pods[cycle % 2], PolicyName.BEST_EFFORT)
            try:
                decision = allocate(node.shape.spec, node.state, request, node.name)
            except UnsatisfiableError:
                continue
            node.state.apply(f"ns/c{cycle}-{node.name}", decision.assignment)
