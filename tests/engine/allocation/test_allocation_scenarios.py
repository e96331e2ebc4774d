"""The engine on named real-shape topologies: what it picks, and why it refuses."""

from __future__ import annotations

import json
import time
from itertools import combinations

import numpy as np
import pytest
from helpers import GiB, app, busy, pod
from score_oracle import node_score
from topologies import BUILDERS, FIXTURES, load

from numatopo_engine.allocation import Engine, allocate, evaluate
from numatopo_engine.annotations import CpuMode, GpuLinksMode, PolicyName, Scope, SmtMode
from numatopo_engine.decision import decide_rows
from numatopo_engine.errors import InvalidRequestError, UnsatisfiableError
from numatopo_engine.hints import Need
from numatopo_engine.model import Numatopology
from numatopo_engine.request import ContainerRequest, TopologyOptions
from numatopo_engine.state import NodeState

BE = PolicyName.BEST_EFFORT
SINGLE = PolicyName.SINGLE_NUMA_NODE
RESTRICTED = PolicyName.RESTRICTED


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_fixture_json_matches_its_builder(name: str) -> None:
    """The checked-in NODE.json is what the builder makes of the cited dump."""
    built = Numatopology(metadata={"name": name}, spec=BUILDERS[name]())  # type: ignore[arg-type]
    stored = json.loads((FIXTURES / f"{name}.json").read_text())

    assert built.to_wire() == stored


@pytest.mark.parametrize(
    ("topology", "held_gpus", "held_cpus", "request_", "numa_nodes", "gpus", "cpus"),
    [
        pytest.param("dgx1-v100", (), "", pod(app(4, 4)), [0], [0, 1, 2, 3], "0-1,24-25",
                     id="dgx1-4-gpus-fill-one-socket"),
        pytest.param("dgx1-v100", (0,), "", pod(app(2, 4)), [1], [4, 5, 6, 7], "12,36",
                     id="dgx1-4-gpus-move-to-the-whole-socket"),
        pytest.param("dgx1-v100", (0, 1), "", pod(app(0, 2)), [0], [2, 3], "",
                     id="dgx1-2-gpus-pack-the-used-socket-on-an-nv2-pair"),
        pytest.param("dgx1-v100", (), "", pod(app(0, 2)), [0], [0, 3], "",
                     id="dgx1-2-gpus-nv2-pair-least-tied-to-the-rest"),
        pytest.param("h100-nvswitch", (0, 1, 4, 5), "", pod(app(4, 4)), [0, 1], [2, 3, 6, 7],
                     "0-1,104-105", id="nvswitch-best-effort-spans-sockets"),
        pytest.param("aws-p4d", (), "", pod(app(2, 2, nics=1)), [0], [0, 1], "0,48",
                     id="p4d-nic-behind-the-same-switch"),
        pytest.param("cpu-2socket-ht", (), "", pod(app(4)), [0], [], "0,2,12,14",
                     id="ht-whole-cores-first"),
        pytest.param("cpu-2socket-ht", (), "", pod(app(3)), [0], [], "0,2,12",
                     id="ht-odd-count-splits-one-core"),
        pytest.param("cpu-2socket-ht", (), "0", pod(app(1)), [0], [], "12",
                     id="ht-single-thread-takes-the-broken-core-first"),
        pytest.param("cpu-2socket-ht", (), "0", pod(app(2), smt=SmtMode.FULL_CORES), [0], [],
                     "2,14", id="ht-full-cores-skips-the-broken-core"),
        pytest.param("cpu-2socket-ht", (), "", pod(app(16)), [0, 1], [],
                     "0-4,6,8,10,12-16,18,20,22", id="ht-whole-numa-node-then-cores"),
        pytest.param("dgx1-v100", (), "", pod(app(30, 1)), [0, 1], [0],
                     "0-14,24-38", id="best-effort-spans-two-nodes-for-cpus-with-a-local-gpu"),
        pytest.param("gb200-like", (), "", pod(app(64, 2, memory=64 * GiB), policy=SINGLE), [0],
                     [0, 1], "0-63", id="gb200-grace-node-not-gpu-memory-nodes"),
    ],
)  # fmt: skip
def test_allocate_picks(  # noqa: PLR0917 (one argument per table column)
    topology: str,
    held_gpus: tuple[int, ...],
    held_cpus: str,
    request_: object,
    numa_nodes: list[int],
    gpus: list[int],
    cpus: str,
) -> None:
    spec = load(topology)
    state = busy(spec, gpus=held_gpus, cpus=held_cpus)
    decision = allocate(spec, state, request_, "node-a")  # type: ignore[arg-type]
    container = decision.assignment.containers["app"]

    assert (numa_nodes, gpus, cpus) == (
        decision.assignment.numa_nodes,
        container.gpu_indices,
        str(container.cpus),
    )


def test_p4d_nic_follows_the_gpus_to_the_next_switch() -> None:
    spec = load("aws-p4d")
    decision = allocate(spec, busy(spec, gpus=(0, 1)), pod(app(2, 2, nics=1)), "n")

    assert ["rdmap32s27"] == decision.assignment.containers["app"].nics


@pytest.mark.parametrize(
    ("topology", "held_gpus", "request_", "message"),
    [
        pytest.param(
            "h100-nvswitch", (0, 1, 4, 5), pod(app(16, 4), policy=SINGLE),
            r"^single-numa-node: no NUMA node has 16 CPUs and 4 GPUs free "
            r"\(NUMA 0: 104 CPUs, 2 GPUs free; NUMA 1: 104 CPUs, 2 GPUs free\)$",
            id="single-numa-names-the-free-counts-per-node",
        ),
        pytest.param(
            "dgx1-v100", (), pod(app(30, 1), policy=SINGLE),
            r"^single-numa-node: no NUMA node has 30 CPUs and 1 GPUs free",
            id="single-numa-cpus-wider-than-a-node",
        ),
        pytest.param(
            "dgx1-v100", (1, 2, 3, 4, 7), pod(app(0, 3), gpu_links=GpuLinksMode.REQUIRED),
            r"GPU 0 and GPU 5 have no direct link",
            id="required-links-names-the-unlinked-pair",
        ),
        pytest.param(
            "cpu-2socket-ht", (), pod(app(3), smt=SmtMode.FULL_CORES),
            r"asks 3 CPUs, which is not a multiple of the 2 threads per physical core",
            id="full-cores-needs-a-multiple-of-threads",
        ),
        pytest.param(
            "dgx1-v100",
            (),
            pod(app(0, 9)),
            r"9 GPUs requested, more than the node has free \(8 GPUs free in all;",
            id="more-gpus-than-the-hardware",
        ),
        pytest.param(
            "cpu-2socket-ht", (), pod(app(14), policy=RESTRICTED, max_numa_nodes=1),
            r"^restricted: max-numa-nodes 1: the kubelet's placement of 14 CPUs spans more NUMA "
            r"nodes \(2 NUMA nodes;",
            id="max-numa-nodes-bounds-restricted",
        ),
        pytest.param(
            # Kubernetes 1.24+: CPUs need both NUMA nodes, the GPU one; no mask is preferred
            # by both, so the kubelet would refuse the pod (TopologyAffinityError).
            "dgx1-v100", (), pod(app(30, 1), policy=RESTRICTED),
            r"^restricted: no NUMA placement is preferred for every resource of 30 CPUs and "
            r"1 GPUs free \(NUMA 0: 24 CPUs, 4 GPUs free; NUMA 1: 24 CPUs, 4 GPUs free\)$",
            id="restricted-refuses-cpus-over-two-nodes-with-a-one-node-gpu",
        ),
    ],
)  # fmt: skip
def test_unsatisfiable_says_what_did_not_fit_where(
    topology: str, held_gpus: tuple[int, ...], request_: object, message: str
) -> None:
    spec = load(topology)

    with pytest.raises(UnsatisfiableError, match=message):
        allocate(spec, busy(spec, gpus=held_gpus), request_, "n")  # type: ignore[arg-type]


def test_required_links_pick_the_linked_pair() -> None:
    spec = load("dgx1-v100")
    request = pod(app(0, 2), gpu_links=GpuLinksMode.REQUIRED)
    decision = allocate(spec, busy(spec, gpus=(1, 2, 3, 4, 7)), request, "n")

    assert [5, 6] == decision.assignment.containers["app"].gpu_indices


def test_fractional_cpus_cannot_be_exclusive() -> None:
    spec = load("cpu-2socket-ht")
    request = pod(ContainerRequest(name="app", cpu_milli=500))

    with pytest.raises(InvalidRequestError, match="500m"):
        allocate(spec, NodeState(spec), request, "n")


def test_cpu_numa_mode_runs_on_the_nodes_shared_pool() -> None:
    spec = load("cpu-2socket-ht")
    request = pod(ContainerRequest(name="app", cpu_milli=1500), cpu=CpuMode.NUMA)
    container = allocate(spec, busy(spec, cpus="0,12"), request, "n").assignment.containers["app"]

    assert (False, "2,4,6,8,10,14,16,18,20,22", "0") == (
        container.exclusive,
        str(container.cpus),
        str(container.mems),
    )


def test_cpu_none_places_devices_and_memory_only() -> None:
    spec = load("dgx1-v100")
    request = pod(app(4, 1, memory=GiB), cpu=CpuMode.NONE)
    container = allocate(spec, NodeState(spec), request, "n").assignment.containers["app"]

    assert ("", [0], {"0": GiB}) == (str(container.cpus), container.gpu_indices, container.memory)


def test_container_scope_places_each_container_on_its_own_node() -> None:
    spec = load("h100-nvswitch")
    request = pod(app(2, 4, name="a"), app(2, 4, name="b"), policy=SINGLE, scope=Scope.CONTAINER)
    assignment = allocate(spec, NodeState(spec), request, "n").assignment

    assert ([0, 1], [0, 1, 2, 3], [4, 5, 6, 7]) == (
        assignment.numa_nodes,
        assignment.containers["a"].gpu_indices,
        assignment.containers["b"].gpu_indices,
    )


def test_init_container_reuses_app_cpus_and_books_only_its_excess_memory() -> None:
    """Pod needs max(init, sum of apps): the init container's extra memory is booked once."""
    spec = load("cpu-2socket-ht")
    init = (ContainerRequest(name="init", cpu_milli=3000, memory_bytes=4 * GiB),)
    request = pod(app(2, memory=GiB), init=init)
    assignment = allocate(spec, NodeState(spec), request, "n").assignment
    state = NodeState(spec)
    state.apply("ns/p", assignment)

    assert ("0,12", "0,2,12", False, {"0": 3 * GiB}, spec.numa_nodes[0].memory_bytes - 4 * GiB) == (
        str(assignment.containers["app"].cpus),
        str(assignment.containers["init"].cpus),
        assignment.containers["init"].exclusive,
        assignment.containers["init"].memory,
        state.free_memory(0),
    )


def test_volcano_4998_prefers_the_node_with_four_gpus_on_one_numa_node() -> None:
    """volcano-sh/volcano#4998: node A has GPUs 0-2 + 7 free, node B has 0-3 free."""
    spec = load("pcie-8gpu")
    node_a = busy(spec, gpus=(3, 4, 5, 6))
    node_b = busy(spec, gpus=(4, 5, 6, 7))
    request = pod(app(4, 4))
    score_a, score_b = evaluate(spec, node_a, request), evaluate(spec, node_b, request)

    assert ([0, 1], [0]) == (
        allocate(spec, node_a, request, "a").assignment.numa_nodes,
        allocate(spec, node_b, request, "b").assignment.numa_nodes,
    )
    assert score_b > score_a


def test_dgx1_four_gpus_across_sockets_take_the_most_nvlinks() -> None:
    """With one GPU taken on each socket, the chosen 4 GPUs have the most NVLinks of any 4 free."""
    spec = load("dgx1-v100")
    links = {(x.a, x.b): x.links for x in spec.gpu_links}
    free = [1, 2, 3, 5, 6, 7]
    best = max(sum(links.get(p, 0) for p in combinations(s, 2)) for s in combinations(free, 4))
    chosen = allocate(spec, busy(spec, gpus=(0, 4)), pod(app(0, 4)), "n").assignment
    gpus = chosen.containers["app"].gpu_indices

    assert best == sum(links.get(p, 0) for p in combinations(gpus, 2))


def test_evaluate_and_node_score_agree_with_allocate() -> None:
    spec = load("dgx1-v100")
    state = busy(spec, gpus=(0, 5))
    request = pod(app(4, 3, memory=GiB))
    decision = allocate(spec, state, request, "n")

    assert (decision.score, decision.score) == (
        evaluate(spec, state, request),
        node_score(spec, state, decision.assignment),
    )


def test_allocate_does_not_mutate_the_state() -> None:
    spec = load("h100-nvswitch")
    state = busy(spec, gpus=(1,), cpus="3")
    before = (state.free_cpus(), state.free_gpus(), dict(state.assignments))
    allocate(spec, state, pod(app(8, 4, memory=GiB)), "n")

    assert before == (state.free_cpus(), state.free_gpus(), dict(state.assignments))


def _search(spec_name: str, need: Need, policy: PolicyName) -> tuple[int, int, float]:
    spec = load(spec_name)
    engine = Engine()
    tables = engine.tables_of(spec)
    started = time.perf_counter()
    plan = engine.plan(tables, need, TopologyOptions(policy=policy), floor=1, closest=False)
    row = np.frombuffer(engine.row(tables, NodeState(spec)), dtype=np.int64)[None, :]
    decided = decide_rows(plan, row, engine.gpu_memo)
    assert decided.score[0] >= 0
    return decided.mask(0), len(plan.masks), time.perf_counter() - started


@pytest.mark.parametrize(
    ("topology", "need", "policy", "mask", "most_evaluated"),
    [
        pytest.param("numa64-synthetic", Need(cpus=4), SINGLE, 0b1, 65, id="64-numa-one-node"),
        pytest.param("numa64-synthetic", Need(cpus=12), BE, 0b11, 6177, id="64-numa-two-nodes"),
        pytest.param("numa64-synthetic", Need(cpus=20), BE, 0b111, 10273,
                     id="64-numa-budgeted"),
        pytest.param("gb200-like", Need(cpus=100, gpus=4, memory_bytes=GiB), BE, 0b11, 3,
                     id="gb200-two-grace-nodes-only"),
    ],
)  # fmt: skip
@pytest.mark.alone
def test_mask_search_is_bounded(
    topology: str, need: Need, policy: PolicyName, mask: int, most_evaluated: int
) -> None:
    """Never 2^N: candidates are the relevant nodes, widths end one past the widest
    hardware minimum, each width within a budget.

    The count of candidate masks is the bound; the time is only a guard against a
    blow-up (2^64 masks would never finish), loose enough for a loaded 2-core machine.
    """
    chosen, evaluated, seconds = _search(topology, need, policy)

    assert (mask, True, True) == (chosen, evaluated <= most_evaluated, seconds < 5)
