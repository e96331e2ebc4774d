"""`evaluate` (the decision without the fill) answers exactly what `allocate` (the same
decision, then the concrete resources) answers; shared builders of varied nodes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import combinations

import pytest
from helpers import GiB, app, busy, pod, small_node
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_allocation_properties import NAMED

from numatopo_engine.allocation import allocate, evaluate
from numatopo_engine.annotations import CpuMode, GpuLinksMode, PolicyName, Scope, SmtMode
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.errors import InvalidRequestError, UnsatisfiableError
from numatopo_engine.model import Gpu, Nic, NumatopologySpec
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.state import NodeState

# A score, a refusal reason, or the InvalidRequestError text (raised before any search).
Outcome = int | str | tuple[str, str]


@st.composite
def varied_nodes(draw: st.DrawFn) -> NumatopologySpec:
    """Small nodes with what the fast path must read right: off-NUMA and second-kind GPUs,
    NICs, huge pages, reserved CPUs, odd distances, memory-only NUMA nodes."""
    numa = draw(st.integers(1, 4))
    per_numa = draw(st.integers(0, 3))
    gpus = numa * per_numa
    pairs = list(combinations(range(gpus + 1), 2))
    linked = draw(st.lists(st.sampled_from(pairs), unique=True)) if pairs else []
    base = small_node(
        numa=numa,
        cores=draw(st.integers(1, 4)),
        threads=draw(st.integers(1, 2)),
        gpus_per_numa=per_numa,
        links=[(a, b, draw(st.sampled_from([25.0, 50.0]))) for a, b in linked],
        memory=draw(st.sampled_from([0, 4 * GiB, 8 * GiB])),
    )
    nodes = [
        node.model_copy(
            update={
                "hugepages": {"2Mi": draw(st.sampled_from([0, 512, 1024]))},
                "distances": {k: v * draw(st.integers(1, 2)) for k, v in node.distances.items()},
            }
        )
        for node in base.numa_nodes
    ]
    if draw(st.booleans()):
        nodes.append(nodes[0].model_copy(update={"id": numa, "cpus": CPUSet()}))
    gpu_rows = [
        g.model_copy(update={"resource": draw(st.sampled_from(["nvidia.com/gpu", "amd.com/gpu"]))})
        for g in base.gpus
    ]
    if draw(st.booleans()):
        gpu_rows.append(Gpu(index=gpus, numa=None))  # not NUMA-local
    nics = [
        Nic(name=f"nic{i}", numa=draw(st.sampled_from([None, *range(numa)])))
        for i in range(draw(st.integers(0, 3)))
    ]
    online = sorted(c.id for c in base.cpus)
    reserved = draw(st.sets(st.sampled_from(online), max_size=2)) if online else set()
    wire = base.to_wire()
    wire.update(
        numaNodes=[n.to_wire() for n in nodes],
        gpus=[g.to_wire() for g in gpu_rows],
        gpuLinks=[x for x in wire.get("gpuLinks", []) if x["b"] < len(gpu_rows)],
        nics=[n.to_wire() for n in nics],
        reservedCPUs=str(CPUSet(reserved)),
    )
    return NumatopologySpec.model_validate(wire)


def _named_apart(containers: list[ContainerRequest]) -> list[ContainerRequest]:
    return [replace(c, name=f"app{i}") for i, c in enumerate(containers)]


def _container(name: str) -> st.SearchStrategy[ContainerRequest]:
    return st.builds(
        ContainerRequest,
        name=st.just(name),
        # Mostly small requests, so that most probes fit somewhere and get a score.
        cpu_milli=st.sampled_from([0, 1000, 1000, 2000, 4000, 6000, 12000, 1500]),
        memory_bytes=st.sampled_from([0, 0, GiB, 3 * GiB, 9 * GiB]),
        hugepages=st.sampled_from([{}, {}, {}, {"2Mi": 512 * 2**20}, {"2Mi": 3 * GiB}]),
        gpus=st.sampled_from([0, 0, 1, 1, 2, 3, 4]),
        gpu_resource=st.sampled_from([None, None, "nvidia.com/gpu", "amd.com/gpu"]),
        nics=st.sampled_from([0, 0, 0, 1, 2]),
    )


def _pod(
    apps: list[ContainerRequest], inits: list[ContainerRequest], options: TopologyOptions
) -> PodRequest:
    """A pod as `request_from_pod` admits it: one GPU resource name for all its containers
    (a pod asking two is Invalid there, never decided)."""
    names = [c.gpu_resource for c in [*apps, *inits] if c.gpu_resource]
    one = names[0] if names else None
    apps = [replace(c, gpu_resource=one if c.gpu_resource else None) for c in apps]
    inits = [replace(c, gpu_resource=one if c.gpu_resource else None) for c in inits]
    return PodRequest("ns", "probe", tuple(apps), tuple(inits), options)


requests = st.builds(
    _pod,
    st.lists(_container("a"), min_size=1, max_size=2).map(_named_apart),
    st.lists(_container("init"), max_size=1),
    st.builds(
        TopologyOptions,
        policy=st.sampled_from(list(PolicyName)),
        scope=st.sampled_from([Scope.POD, Scope.POD, Scope.CONTAINER]),
        cpu=st.sampled_from(list(CpuMode)),
        smt=st.sampled_from(list(SmtMode)),
        gpu_links=st.sampled_from(list(GpuLinksMode)),
        max_numa_nodes=st.sampled_from([None, None, 1, 2, 3]),
    ),
)


def _outcome(decide: Callable[[], int]) -> Outcome:
    try:
        return decide()
    except UnsatisfiableError as exc:
        return exc.reason
    except InvalidRequestError as exc:
        return ("invalid", str(exc))


def _allocated(spec: NumatopologySpec, state: NodeState, request: PodRequest) -> Outcome:
    return _outcome(lambda: allocate(spec, state, request, "n").score)


def _evaluated(spec: NumatopologySpec, state: NodeState, request: PodRequest) -> Outcome:
    return _outcome(lambda: evaluate(spec, state, request))


def filled_states(
    spec: NumatopologySpec, held: set[int], fills: list[PodRequest]
) -> list[NodeState]:
    """Every state a node passes through while `fills` are placed on it in turn, after
    CPUs `held` (any thread of a core, as the engine itself rarely leaves them) are taken."""
    allocatable = spec.online_cpus().ids - spec.reserved_cpus.ids
    state = busy(spec, cpus=str(CPUSet(held & allocatable)))
    states = [state.copy()]
    for number, fill in enumerate(fills):
        try:
            state.apply(f"ns/f{number}", allocate(spec, state, fill, "n").assignment)
        except (UnsatisfiableError, InvalidRequestError):
            continue
        states.append(state.copy())
    return states


fills = st.lists(
    st.builds(
        lambda cpus, gpus, memory, split: pod(
            app(cpus, gpus, memory=memory * GiB, nics=split), name="fill"
        ),
        st.integers(0, 8),
        st.integers(0, 3),
        st.integers(0, 4),
        st.integers(0, 1),
    ),
    max_size=4,
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=st.one_of(st.sampled_from(sorted(NAMED)).map(NAMED.__getitem__), varied_nodes()),
    held=st.sets(st.integers(0, 63), max_size=6),
    placed=fills,
    probes=st.lists(requests, min_size=1, max_size=4),
)
def test_evaluate_answers_what_allocate_answers(
    spec: NumatopologySpec, held: set[int], placed: list[PodRequest], probes: list[PodRequest]
) -> None:
    """Score, refusal text or invalid request, on every state a node passes through, for
    any request: pod-scope requests on these nodes are the ones the tables answer."""
    for state in filled_states(spec, held, placed):
        for probe in probes:
            expected = _allocated(spec, state, probe)

            actual = _evaluated(spec, state, probe)

            assert expected == actual


BENCH_MIX = [
    pytest.param(pod(app(4, 1, memory=16 * GiB)), id="one-gpu-best-effort"),
    pytest.param(
        pod(app(16, 4, memory=64 * GiB), policy=PolicyName.SINGLE_NUMA_NODE),
        id="four-gpus-single-numa-node",
    ),
    pytest.param(pod(app(32, 8, memory=128 * GiB)), id="eight-gpus-refused-when-busy"),
    pytest.param(pod(app(8, memory=16 * GiB), policy=PolicyName.RESTRICTED), id="cpu-only"),
    pytest.param(pod(app(8, 2), smt=SmtMode.FULL_CORES), id="full-cores"),
    pytest.param(pod(app(8, 2), gpu_links=GpuLinksMode.REQUIRED), id="gpu-links-required"),
]


@pytest.mark.parametrize("shape", ["dgx1-v100", "h100-nvswitch", "cpu-2socket-ht"])
@pytest.mark.parametrize("request_", BENCH_MIX)
def test_common_requests_are_scored_as_allocate_scores_them(
    shape: str, request_: PodRequest
) -> None:
    """The requests a scheduler sees most (those the tables answer, and the GPU-link and
    full-core ones they hand over), on named hardware with some of it busy."""
    spec = NAMED[shape]
    state = busy(spec, gpus=(0, 5) if spec.gpus else (), cpus="0-5")
    expected = _allocated(spec, state, request_)

    actual = _evaluated(spec, state, request_)

    assert expected == actual


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param(pod(app(2, 1), scope=Scope.CONTAINER), id="scope-container"),
        pytest.param(pod(app(2)), id="nothing-numa-bound-but-cpus-on-a-64-numa-node"),
    ],
)
def test_rare_requests_are_scored_as_allocate_scores_them(request_: PodRequest) -> None:
    """Scope container, and nodes with more candidate NUMA nodes than the tables list:
    `evaluate` searches as `allocate` does, and scores the placement alike."""
    spec = small_node(numa=12, cores=1, threads=1, gpus_per_numa=0, links=[])
    spec = spec if request_.options.scope is Scope.POD else NAMED["dgx1-v100"]
    expected = allocate(spec, NodeState(spec), request_, "n").score

    actual = evaluate(spec, NodeState(spec), request_)

    assert expected == actual


@pytest.mark.parametrize(
    ("held", "expected"),
    [
        pytest.param("", 100, id="every-core-whole"),
        pytest.param(
            "12-13,18-19",
            "single-numa-node: no NUMA node has 12 CPUs free "
            "(NUMA 0: 8 CPUs free; NUMA 1: 8 CPUs free)",
            id="second-threads-held-break-two-cores-per-numa-node",
        ),
    ],
)
def test_full_cores_counts_only_cores_with_every_thread_free(
    held: str, expected: int | str
) -> None:
    """A core whose first thread is free but whose sibling is held does not count."""
    spec = NAMED["cpu-2socket-ht"]
    request = pod(app(12), smt=SmtMode.FULL_CORES, policy=PolicyName.SINGLE_NUMA_NODE)
    state = busy(spec, cpus=held)

    actual = [_evaluated(spec, state, request), _allocated(spec, state, request)]

    assert [expected, expected] == actual
