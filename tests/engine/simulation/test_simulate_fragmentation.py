"""GPU fragmentation (FGD-style) and how numatopo's strategy uses it to pick nodes."""

from __future__ import annotations

import pytest

from numatopo_engine.simulation.cluster import build_cluster
from numatopo_engine.simulation.fragmentation import Fragmentation, RequestType
from numatopo_engine.simulation.strategies import Placement, make_strategy
from numatopo_engine.simulation.trace import NodeRow, PodRow

G2_BOX = NodeRow("g2", 96000, 393216, 8, "G2")
G3_BOX = NodeRow("g3", 128000, 786432, 8, "G3")
T4_BOX = NodeRow("t4", 104000, 524288, 2, "T4")
V100_SMALL = NodeRow("v100-small", 8000, 32768, 1, "V100M16")
ONE_GPU = PodRow("one", 12000, 49152, 1, 1000)
SHARE = PodRow("share", 4000, 15258, 1, 320)
EIGHT_GPU_LARGE = PodRow("eight", 120000, 737280, 8, 1000)


@pytest.mark.parametrize(
    ("pod", "state", "expected"),
    [
        pytest.param(
            PodRow("whole", 4000, 1024, 1, 1000),
            (96000, 393216, (1000, 1000, 500, 0)),
            500,
            id="a-whole-gpu-request-cannot-use-a-partly-shared-gpu",
        ),
        pytest.param(
            PodRow("many-cpus", 12000, 1024, 1, 1000),
            (8000, 393216, (1000, 1000, 500, 0)),
            2500,
            id="too-few-cpus-left-strands-every-free-gpu-share",
        ),
        pytest.param(
            PodRow("share", 4000, 1024, 1, 300),
            (96000, 393216, (1000, 200, 500, 0)),
            200,
            id="a-share-request-uses-every-gpu-with-enough-left",
        ),
        pytest.param(
            PodRow("eight", 88000, 327680, 8, 1000),
            (96000, 393216, (1000,) * 7 + (0,)),
            7000,
            id="an-eight-gpu-request-cannot-use-seven-free-gpus",
        ),
        pytest.param(
            PodRow("two", 1000, 1024, 2, 1000),
            (96000, 393216, (1000,) * 8),
            0,
            id="an-empty-node-has-no-fragments",
        ),
    ],
)
def test_unusable_gpu_share_per_request_type(topology_map, pod, state, expected):
    """What `Fragmentation.of_state` weighs per type: the GPU milli it cannot use. One
    type on a one-node cluster weighs 1 (all the popularity, one host at most)."""
    measure = Fragmentation([pod], build_cluster([G2_BOX], topology_map))

    assert ([RequestType.of(pod)], [1.0]) == (measure.types, measure.weights)
    assert expected == round(measure.of_state(state))


def test_a_request_few_nodes_can_host_weighs_more(topology_map):
    """Popularity over hosts (rounded down to a power of two): 1 G3 box vs 4 boxes."""
    cluster = build_cluster([G2_BOX, G2_BOX, G2_BOX, G3_BOX], topology_map)
    measure = Fragmentation([ONE_GPU, EIGHT_GPU_LARGE], cluster)

    expected = {RequestType.of(ONE_GPU): 0.5 / 4, RequestType.of(EIGHT_GPU_LARGE): 0.5 / 1}
    assert expected == dict(zip(measure.types, measure.weights, strict=True))


def test_booking_the_last_host_of_a_request_drops_it_from_the_host_count(topology_map):
    cluster = build_cluster([G2_BOX, G3_BOX], topology_map)
    measure = Fragmentation([ONE_GPU, EIGHT_GPU_LARGE], cluster)
    cluster.book(1, ONE_GPU, gpus=[0], exclusive_cpus={0: 12})
    measure.booked(cluster, 1)

    expected = {RequestType.of(ONE_GPU): 2, RequestType.of(EIGHT_GPU_LARGE): 0}
    assert expected == dict(zip(measure.types, measure.hosts, strict=True))


def place_numatopo(topology_map, rows, booked, pod, workload):
    """numatopo's choice for `pod` on a cluster where `booked` (node, pod, GPUs) already run."""
    cluster = build_cluster(rows, topology_map, with_engine_state=True)
    for index, earlier, gpus in booked:
        cluster.book(index, earlier, gpus=gpus, exclusive_cpus={})
    strategy = make_strategy("numatopo", seed=1)
    strategy.start(cluster, workload)
    outcome = strategy.place(cluster, pod, cluster.candidates(pod))
    assert isinstance(outcome, Placement)
    return outcome.node


def test_a_gpu_share_goes_to_a_used_node_before_an_untouched_one(topology_map):
    """Best fit would break the small untouched box; numatopo keeps it whole."""
    rows = [V100_SMALL, T4_BOX]
    booked = [(1, ONE_GPU, [0])]

    assert 1 == place_numatopo(topology_map, rows, booked, SHARE, [ONE_GPU, SHARE])


def test_a_cpu_only_pod_goes_where_it_strands_no_gpu(topology_map):
    """Best fit (and first fit) would take CPUs next to a free GPU that 12-CPU GPU pods need."""
    rows = [T4_BOX, T4_BOX]
    large_hog, small_hog = PodRow("hog", 79000, 1024, 0, 0), PodRow("hog", 4000, 1024, 0, 0)
    # Box 0 keeps 13 CPUs and a GPU free (the tighter fit), box 1 76 CPUs and no GPU.
    booked = [(0, large_hog, []), (0, ONE_GPU, [0])]
    booked += [(1, small_hog, []), (1, ONE_GPU, [0]), (1, ONE_GPU, [1])]
    cpu_only = PodRow("cpu", 8000, 1024, 0, 0)

    assert 1 == place_numatopo(topology_map, rows, booked, cpu_only, [ONE_GPU])


def test_best_fit_would_have_chosen_otherwise(topology_map):
    """The two cases above are ones where count-level best fit picks the other node."""
    cluster = build_cluster([V100_SMALL, T4_BOX], topology_map)
    cluster.book(1, ONE_GPU, gpus=[0], exclusive_cpus={})
    share_scores = [cluster.best_fit_score(i, SHARE) for i in (0, 1)]
    cluster = build_cluster([T4_BOX, T4_BOX], topology_map)
    cluster.book(0, PodRow("hog", 91000, 1024, 0, 0), gpus=[0], exclusive_cpus={})
    cluster.book(1, PodRow("hog", 28000, 1024, 0, 0), gpus=[0, 1], exclusive_cpus={})
    cpu_only = PodRow("cpu", 8000, 1024, 0, 0)
    cpu_scores = [cluster.best_fit_score(i, cpu_only) for i in (0, 1)]

    assert (True, True) == (share_scores[0] > share_scores[1], cpu_scores[0] > cpu_scores[1])
