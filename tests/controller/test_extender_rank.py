"""The extender ranks with the same cluster-level input as the simulator: host counts of
the mix's shapes over the nodes of the call (`allocation.mix_hosts`)."""

from __future__ import annotations

import json
from importlib import resources

from numatopo_engine.allocation import mix_hosts, score_many
from numatopo_engine.annotations import PolicyName
from numatopo_engine.simulation import NodeRow, PodRow, parse_topology_map
from numatopo_engine.simulation.cluster import build_cluster
from numatopo_engine.simulation.strategies import engine_request, trace_mix
from numatopo_operator.extender import Candidates, judge_candidates

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

    ranks = judge_candidates(request, Candidates(nodes, {}, mix)).ranks

    hosts = mix_hosts(((spec, [state]) for _, spec, state in nodes if state), mix)
    expected = {
        name: float(score_many(spec, [state], request, mix=mix, hosts=hosts).rank[0])
        for name, spec, state in nodes
        if state is not None
    }
    assert expected == ranks
    assert max(ranks, key=ranks.__getitem__) != "g3"
