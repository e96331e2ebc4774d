"""The numatopo strategy chooses nodes by the production node rank, and what that rank is."""

from __future__ import annotations

import random

import numpy as np
import pytest

from numatopo_engine.allocation import Engine, allocate, mix_hosts, score_many
from numatopo_engine.annotations import PolicyName
from numatopo_engine.packing import Shape, WorkloadMix, node_rank, stranded, usable_gpus
from numatopo_engine.simulation.cluster import build_cluster
from numatopo_engine.simulation.replay import book_placement
from numatopo_engine.simulation.strategies import (
    Placement,
    engine_request,
    make_strategy,
    trace_mix,
)
from numatopo_engine.simulation.trace import NodeRow, PodRow

SHAPES = [
    NodeRow("v100", 96000, 786432, 8, "V100M32"),
    NodeRow("g2", 96000, 393216, 8, "G2"),
    NodeRow("g3", 128000, 786432, 8, "G3"),
    NodeRow("t4", 104000, 524288, 2, "T4"),
    NodeRow("p100", 64000, 262144, 2, "P100"),
]
KINDS = [(1, 8000), (1, 12000), (1, 4500), (2, 16000), (4, 32000), (8, 64000)]


def random_pods(rng: random.Random, count: int) -> list[PodRow]:
    return [
        PodRow(f"p{i}", cpu, 4096 * gpus, gpus, 1000)
        for i, (gpus, cpu) in enumerate(rng.choice(KINDS) for _ in range(count))
    ]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_strategy_picks_the_node_the_production_rank_ranks_first(topology_map, seed):
    """On random cluster states: the strategy's node is the first candidate with the
    highest `score_many(...).rank`, each node ranked alone (no grouping, no dedupe)."""
    rng = random.Random(seed)
    rows = [
        NodeRow(f"n{i}", r.cpu_milli, r.memory_mib, r.gpus, r.model)
        for i, r in enumerate(rng.choice(SHAPES) for _ in range(14))
    ]
    cluster = build_cluster(rows, topology_map, with_engine_state=True)
    workload = random_pods(rng, 60)
    strategy = make_strategy("numatopo", seed=seed)
    strategy.start(cluster, workload)
    mix = trace_mix(workload)
    engine = Engine()
    checked = 0
    for pod in workload:
        candidates = cluster.candidates(pod)
        if not candidates:
            continue
        request = engine_request(pod, PolicyName.BEST_EFFORT)
        # The cluster-level input over the same candidates, one node at a time.
        alone = [(cluster.nodes[i].shape.spec, [cluster.nodes[i].state]) for i in candidates]
        hosts = mix_hosts(((t, s) for t, s in alone if s[0] is not None), mix)
        ranks = []
        for index in candidates:
            node = cluster.nodes[index]
            assert node.state is not None
            scored = score_many(
                node.shape.spec, [node.state], request, engine=engine, mix=mix, hosts=hosts
            )
            ranks.append(float(scored.rank[0]))
        outcome = strategy.place(cluster, pod, candidates)
        if max(ranks) < 0:
            assert not isinstance(outcome, Placement)
            continue
        assert isinstance(outcome, Placement)
        assert candidates[int(np.argmax(ranks))] == outcome.node
        checked += 1
        book_placement(cluster, pod, outcome)
        strategy.booked(cluster, outcome)
    assert checked >= 20


def fragmentation(gpus, cpus, numa_gpu_capacity: int, mix: WorkloadMix):
    """Expected stranded free GPUs per row, as the rank's terms compose them (`usable_gpus`
    before `stranded`, as `decision` composes them)."""
    total, used = usable_gpus(gpus, cpus, numa_gpu_capacity, mix)
    return stranded(total, used, mix)


def test_free_gpus_split_over_numa_nodes_are_stranded_for_an_aligned_shape():
    """4 free GPUs as 2 + 2 host no aligned 4-GPU pod; 4 on one NUMA node host one."""
    mix = WorkloadMix.of({Shape.of(4, 0): 1.0})
    gpus = np.array([[2, 2], [4, 0]], dtype=np.int64)
    cpus = np.array([[48, 48], [48, 48]], dtype=np.int64)

    assert [4.0, 0.0] == fragmentation(gpus, cpus, 4, mix).tolist()


def test_exclusive_cpus_bound_the_copies_shared_pool_cpus_do_not():
    gpus = np.array([[4, 0]], dtype=np.int64)
    cpus = np.array([[16, 0]], dtype=np.int64)
    exclusive = WorkloadMix.of({Shape.of(1, 8): 1.0})
    pool = WorkloadMix.of({Shape.of(1, 8, exclusive=False): 1.0})

    assert (2.0, 0.0) == (
        fragmentation(gpus, cpus, 4, exclusive)[0],
        fragmentation(gpus, cpus, 4, pool)[0],
    )


def test_alignment_outranks_any_packing():
    """One alignment step (1 %) weighs more than the whole packing range."""
    ranks = node_rank(np.array([0.99, 1.0]), np.array([1.0, 0.0]))

    assert ranks[1] > ranks[0]


def test_a_one_gpu_pod_goes_to_the_node_it_fragments_least(topology_map):
    """Two 8-GPU boxes, one with 3 GPUs taken: under a mix with 8-GPU pods, the next
    1-GPU pod goes to the used box and keeps the other whole."""
    rows = [SHAPES[0], NodeRow("v100-b", 96000, 786432, 8, "V100M32")]
    cluster = build_cluster(rows, topology_map, with_engine_state=True)
    engine = Engine()
    one = PodRow("one", 8000, 4096, 1, 1000)
    node = cluster.nodes[1]
    assert node.state is not None
    for number in range(3):
        request = engine_request(one, PolicyName.BEST_EFFORT)
        decision = allocate(node.shape.spec, node.state, request, node.name, engine=engine)
        node.state.apply(f"x/{number}", decision.assignment)
    mix = trace_mix([one] * 8 + [PodRow("eight", 64000, 4096, 8, 1000)])
    ranks = [
        float(
            score_many(
                n.shape.spec, [n.state], engine_request(one, PolicyName.BEST_EFFORT), mix=mix
            ).rank[0]
        )
        for n in cluster.nodes
        if n.state is not None
    ]

    assert ranks[1] > ranks[0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("1x8:3,8x64p:1", "1x8:0.75,8x64p:0.25", id="weights-normalised"),
        pytest.param("1x12:1", "1x16:1", id="cpus-rounded-up"),
        pytest.param("", "", id="empty-is-no-mix"),
        pytest.param("0x8:5,2x16:1", "2x16:1", id="cpu-only-shapes-dropped"),
    ],
)
def test_mix_text_round_trips(text, expected):
    assert expected == WorkloadMix.parse(text).format()


G2 = NodeRow("g2", 96000, 393216, 8, "G2")  # 48 CPUs per NUMA node
G3 = NodeRow("g3", 128000, 786432, 8, "G3")  # 64 CPUs per NUMA node: the only 8x120 host
HALF = PodRow("half", 60200, 65536, 4, 1000)  # 4 GPUs, 60.2 CPUs from the shared pool
WHOLE = PodRow("whole", 120000, 655360, 8, 1000)  # 8 GPUs, 120 exclusive CPUs


def test_hosts_count_the_nodes_that_can_take_each_shape(topology_map):
    rows = [NodeRow(f"g2-{i}", *_of(G2)) for i in range(3)] + [NodeRow("g3", *_of(G3))]
    cluster = build_cluster(rows, topology_map, with_engine_state=True)
    mix = trace_mix([HALF, WHOLE])
    hosts = mix_hosts(((n.shape.spec, [n.state]) for n in cluster.nodes if n.state), mix)

    counts = dict(zip(mix.shapes, hosts.counts, strict=True))
    # The 4-GPU shape's 61 CPUs fit no G2 NUMA node: it counts node-wide there.
    assert (4, 4, 1) == (
        hosts.nodes,
        counts[Shape.of(4, 61, exclusive=False)],
        counts[Shape.of(8, 120)],
    )
    weights = dict(zip(mix.shapes, hosts.weights().tolist(), strict=True))
    shares = dict(zip(mix.shapes, mix.weights, strict=True))
    # Weighed by nodes / hosts: the shape one node of four hosts, four times its share.
    assert weights[Shape.of(8, 120)] == pytest.approx(4 * shares[Shape.of(8, 120)])
    assert weights[Shape.of(4, 61, exclusive=False)] == pytest.approx(
        shares[Shape.of(4, 61, exclusive=False)]
    )


def _of(row: NodeRow) -> tuple[int, int, int, str]:
    return row.cpu_milli, row.memory_mib, row.gpus, row.model


def test_a_pod_that_fits_elsewhere_keeps_off_the_last_host_of_a_big_shape(topology_map):
    """A 4-GPU pod fits a NUMA node of the G3 exactly (the fullest fill) and spreads its
    CPUs over a G2; the G3 is the only node an 8-GPU 120-CPU pod can run on. The rank
    must send the 4-GPU pod to a G2, and a replay must then place the 8-GPU pod."""
    rows = [NodeRow(f"g2-{i}", *_of(G2)) for i in range(2)] + [NodeRow("g3", *_of(G3))]
    cluster = build_cluster(rows, topology_map, with_engine_state=True)
    workload = [replace_name(HALF, i) for i in range(2)] + [WHOLE]
    strategy = make_strategy("numatopo", seed=1)
    strategy.start(cluster, workload)
    for pod in workload:
        placed = strategy.place(cluster, pod, cluster.candidates(pod))
        assert isinstance(placed, Placement), pod.name
        assert (cluster.nodes[placed.node].model == "G3") == (pod is WHOLE), pod.name
        book_placement(cluster, pod, placed)
        strategy.booked(cluster, placed)


def replace_name(pod: PodRow, number: int) -> PodRow:
    return PodRow(f"{pod.name}-{number}", pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli)


def test_the_last_host_of_a_shape_costs_more_than_one_of_many(topology_map):
    """The same 1-GPU choice between a fresh G2 and a fresh G3: with the G3 the last
    node an 8x120 pod fits, the rank keeps off it; the scarcity weight is what decides
    (without hosts, both nodes are equally good GPU-wise but for the 8x120 copy)."""
    rows = [NodeRow("g2", *_of(G2)), NodeRow("g3", *_of(G3))]
    cluster = build_cluster(rows, topology_map, with_engine_state=True)
    mix = trace_mix([PodRow("one", 8000, 4096, 1, 1000)] * 40 + [WHOLE])
    request = engine_request(PodRow("one", 8000, 4096, 1, 1000), PolicyName.BEST_EFFORT)
    groups = [(n.shape.spec, [n.state]) for n in cluster.nodes if n.state is not None]
    hosts = mix_hosts(groups, mix)
    plain = [float(score_many(t, s, request, mix=mix).rank[0]) for t, s in groups]
    scarce = [float(score_many(t, s, request, mix=mix, hosts=hosts).rank[0]) for t, s in groups]

    assert scarce[0] > scarce[1]
    assert scarce[0] - scarce[1] > plain[0] - plain[1]
