"""Pods with init containers and sidecars, numatopo's decision against the kubelet's.

`reference.decide_pod` runs the kubelet's admission of a whole pod: under scope
`container` each container alone, init containers first, with the CPUs, devices and
memory a regular init container got reusable by the containers after it (and binding
their hints to its NUMA nodes); under scope `pod` one merge of the pod's totals. The
nodes are those of `test_decisions_differential`, loaded by earlier pods placed with the
engine; admission must agree under every policy and scope, and so must the NUMA nodes
of an admitted aligned placement.
"""

from __future__ import annotations

import pytest
from helpers import GiB, busy, pod, small_node
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import POLICIES, Container, bits_of, decide_pod
from test_decisions_differential import booked_nodes, kubelet_view, totals
from topologies import load

from numatopo_engine import NodeState, allocate, evaluate
from numatopo_engine.allocation import evaluate_many
from numatopo_engine.annotations import Assignment, ContainerAssignment, PolicyName, Scope
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import Cpu, Gpu, NumaNode, NumatopologySpec
from numatopo_engine.request import ContainerRequest

SCOPES = ("container", "pod")


def engine_request(containers: list[Container], policy: str, scope: str, name: str = "last"):
    def request(c: Container) -> ContainerRequest:
        return ContainerRequest(
            name=c.name, cpu_milli=c.cpus * 1000, memory_bytes=c.memory, gpus=c.gpus,
            restartable=c.restartable,
            hugepages={k.removeprefix("hugepages-"): v for k, v in c.hugepages.items()},
        )  # fmt: skip

    return pod(
        *(request(c) for c in containers if not c.init),
        init=tuple(request(c) for c in containers if c.init),
        policy=PolicyName(policy),
        scope=Scope(scope),
        name=name,
    )


@st.composite
def containers(draw: st.DrawFn, max_cpus: int, max_memory: int) -> list[Container]:
    out: list[Container] = []

    def one(name: str, *, init: bool, restartable: bool = False) -> Container:
        return Container(
            name=name,
            cpus=draw(st.integers(1, max(1, max_cpus // 2))),
            memory=draw(st.integers(1, max(1, max_memory // GiB // 2))) * GiB // 2,
            gpus=draw(st.integers(0, 2)),
            init=init,
            restartable=restartable,
        )

    for i in range(draw(st.integers(1, 2))):
        out.append(one(f"init{i}", init=True, restartable=draw(st.integers(0, 3)) == 0))
    for i in range(draw(st.integers(1, 2))):
        out.append(one(f"app{i}", init=False))
    return out


@st.composite
def scenarios(draw: st.DrawFn):
    spec, state = draw(booked_nodes(most_pods=3))
    total_cpus, total_memory = totals(spec)
    return under_any_policy(draw, spec, state, draw(containers(total_cpus, total_memory)))


def under_any_policy(draw: st.DrawFn, spec, state, pod_containers):
    """A scenario: the pod on the node under a drawn policy and scope."""
    return (
        spec,
        state,
        pod_containers,
        draw(st.sampled_from(POLICIES)),
        draw(st.sampled_from(SCOPES)),
    )


def check(spec: NumatopologySpec, state: NodeState, pod_containers, policy, scope) -> None:
    node = kubelet_view(spec, state)
    admit, masks = decide_pod(node, pod_containers, policy, scope)
    try:
        decision = allocate(spec, state, engine_request(pod_containers, policy, scope), "n")
    except UnsatisfiableError as refused:
        engine_admit, why = False, str(refused)
    else:
        engine_admit, why = True, ""
        state.copy().apply("ns/last", decision.assignment)  # a booking the state accepts
    assert engine_admit == admit, (node, pod_containers, masks, why)
    if admit and policy in ("restricted", "single-numa-node"):
        wanted = set()
        for mask in masks.values():
            wanted |= set(bits_of(mask)) if mask is not None else set()
        if wanted and all(m is not None for m in masks.values()):
            assert set(decision.assignment.numa_nodes) == wanted, (node, pod_containers, masks)


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_pods_with_init_containers_match_the_kubelet(scenario) -> None:
    check(*scenario)


@st.composite
def reusing_scenarios(draw: st.DrawFn):
    """Pods whose app containers fit some NUMA node only by reusing what a regular init
    container booked there: a NUMA node's free memory F (in half GiB), an init container
    asking I <= F of it and an app container asking more than F - I but at most F, with
    sometimes a sidecar before the init container and a second, small app container."""
    spec, state = draw(booked_nodes(most_pods=3))
    free = kubelet_view(spec, state).free["memory"]
    numa = draw(st.sampled_from(sorted(free)))
    units = max(1, free[numa] // (GiB // 2))
    init = draw(st.integers(1, units))
    cpus = draw(st.integers(1, 2))
    pod_containers = []
    if draw(st.integers(0, 3)) == 0:
        pod_containers.append(
            Container("sidecar", cpus=1, memory=GiB // 2, init=True, restartable=True)
        )
    pod_containers += [
        Container(
            "init0", cpus=cpus, memory=init * GiB // 2, gpus=draw(st.integers(0, 1)), init=True
        ),
        Container(
            "app0", cpus=draw(st.integers(1, 2)), gpus=draw(st.integers(0, 1)),
            memory=draw(st.integers(units - init + 1, units + 1)) * GiB // 2,
        ),
    ]  # fmt: skip
    if draw(st.booleans()):
        pod_containers.append(Container("app1", cpus=1, memory=draw(st.integers(1, 2)) * GiB // 2))
    return under_any_policy(draw, spec, state, pod_containers)


@settings(max_examples=300, deadline=None)
@given(reusing_scenarios())
def test_pods_reusing_init_container_memory_match_the_kubelet(scenario) -> None:
    check(*scenario)


def test_an_init_container_binds_the_app_container_to_its_numa_node() -> None:
    """The issue's pod: init 1 GPU, app 2 GPUs, single-numa-node, scope container, on a
    node whose NUMA 0-2 have one free GPU each and NUMA 3 two. The kubelet aligns the
    init container alone (NUMA 0, GPU 0), the app container must reuse GPU 0 and no
    single NUMA node then holds two GPUs: refused, by both."""
    spec = small_node(numa=4, cores=4, threads=1, gpus_per_numa=2, links=[])
    state = busy(spec, gpus=(1, 3, 5))
    pod_containers = [Container("init", gpus=1, init=True), Container("app", gpus=2)]

    admit, _ = decide_pod(
        kubelet_view(spec, state), pod_containers, "single-numa-node", "container"
    )
    request = engine_request(pod_containers, "single-numa-node", "container")

    assert not admit
    try:
        allocate(spec, state, request, "n")
    except UnsatisfiableError:
        pass
    else:
        raise AssertionError("numatopo admitted a pod the kubelet refuses")


def test_the_app_container_reuses_the_init_containers_gpu() -> None:
    """Where NUMA 0 has two free GPUs the pod fits: the init container on GPU 0, the
    app container on GPUs 0 and 1; the assignment books GPU 0 once (on the app)."""
    spec = small_node(numa=4, cores=4, threads=1, gpus_per_numa=2, links=[])
    state = busy(spec, gpus=(3, 5))
    pod_containers = [Container("init", gpus=1, init=True), Container("app", gpus=2)]

    admit, masks = decide_pod(
        kubelet_view(spec, state), pod_containers, "single-numa-node", "container"
    )
    placed = allocate(
        spec, state, engine_request(pod_containers, "single-numa-node", "container"), "n"
    )

    assert admit
    assert masks == {"init": 1, "app": 1}
    assert placed.assignment.containers["app"].gpu_indices == [0, 1]
    assert placed.assignment.containers["init"].gpu_indices == []
    assert placed.assignment.numa_nodes == [0]


def test_under_none_the_pods_total_need_not_fit_the_memory_manager_at_once() -> None:
    """Policy `none`, scope `pod`: no hint is merged, so the memory manager gives each
    container its own default hint. Here the pod's total (4.5Gi) fits no NUMA set the
    memory manager may use (NUMA 0 and 3 each hold a single-NUMA booking, NUMA 1 and 2
    hold 4Gi together), yet each container fits a NUMA node alone: the kubelet admits,
    and so must numatopo (found by the property above, which refused it before)."""
    spec = small_node(numa=4, cores=2, threads=1, gpus_per_numa=0, links=[], memory=2 * GiB)
    state = NodeState(spec)
    for key, numa, cpus, memory in (("ns/a", "0", "0", 3 * GiB // 2), ("ns/b", "3", "6", GiB)):
        held = ContainerAssignment(
            cpus=CPUSet.parse(cpus), mems=CPUSet.parse(numa), memory={numa: memory}
        )
        state.apply(key, Assignment(node="n", containers={"c": held}))
    pod_containers = [
        Container("sidecar", cpus=1, memory=GiB // 2, init=True, restartable=True),
        Container("app0", cpus=1, memory=2 * GiB),
        Container("app1", cpus=1, memory=2 * GiB),
    ]

    admit, _ = decide_pod(kubelet_view(spec, state), pod_containers, "none", "pod")
    placed = allocate(spec, state, engine_request(pod_containers, "none", "pod"), "n")

    assert admit
    assert {"sidecar", "app0", "app1"} <= set(placed.assignment.containers)
    check(spec, state, pod_containers, "none", "pod")


def uneven_node(cpus: list[int], memory_gib: list[int]) -> NumatopologySpec:
    """A node of `test_decisions_differential`'s kind: NUMA node i holds `cpus[i]`
    single-thread CPUs (its own socket) and `memory_gib[i]` GiB; CPU 0 reserved."""
    nodes, all_cpus, first = [], [], 0
    for numa, count in enumerate(cpus):
        ids = list(range(first, first + count))
        first += count
        all_cpus += [Cpu(id=c, core=c, socket=numa, numa=numa) for c in ids]
        nodes.append(
            NumaNode(
                id=numa, cpus=CPUSet(ids), memory_bytes=memory_gib[numa] * GiB,
                distances={str(m): 10 if m == numa else 20 for m in range(len(cpus))},
            )
        )  # fmt: skip
    return NumatopologySpec(reserved_cpus=CPUSet([0]), numa_nodes=nodes, cpus=all_cpus)


def test_an_init_containers_spilled_cpu_comes_from_the_fullest_numa_node() -> None:
    """Best-effort, scope container. The init container's 9 CPUs get the merged mask
    {0,1} (8 free CPUs); the ninth comes from outside it, where NUMA 2 has 2 free CPUs
    and NUMA 3 one. The kubelet's packed takeByTopology sorts NUMA nodes by free CPUs,
    fewest first, so it takes NUMA 3's: the app container's CPU hints must then hold
    NUMA 1 and 3, its merged mask is {0,1}, memory extends to group {0,1,2}: admitted.
    (Taking NUMA 2's instead bound the app to {1,2}, whose memory breaks the group
    rule: the reference refused what the engine admits; found by the property.)"""
    spec = uneven_node([5, 8, 2, 3], [1, 1, 13, 11])
    state = NodeState(spec)
    group = ContainerAssignment(
        cpus=CPUSet.parse("1-4"), mems=CPUSet.parse("0-2"),
        memory={"0": GiB, "1": GiB, "2": 23 * GiB // 2},
    )  # fmt: skip
    single = ContainerAssignment(
        cpus=CPUSet.parse("15-16"), mems=CPUSet.parse("3"), memory={"3": GiB}
    )
    state.apply("ns/a", Assignment(node="n", containers={"c": group}))
    state.apply("ns/b", Assignment(node="n", containers={"c": single}))
    pod_containers = [
        Container("init0", cpus=9, memory=GiB // 2, init=True),
        Container("app0", cpus=1, memory=GiB // 2),
    ]

    admit, masks = decide_pod(kubelet_view(spec, state), pod_containers, "best-effort", "container")
    placed = allocate(spec, state, engine_request(pod_containers, "best-effort", "container"), "n")

    assert admit
    assert masks == {"init0": 0b0011, "app0": 0b0011}
    assert placed.assignment.containers["init0"].cpus == CPUSet.parse("5-12,17")
    check(spec, state, pod_containers, "best-effort", "container")


def test_a_second_init_container_leaves_the_first_ones_memory_reusable() -> None:
    """Scope `pod`, hint NUMA 1 (9Gi). init0 books 1Gi there; init1 (512Mi) reuses it
    and, being an init container, leaves the reusable 1Gi whole
    (`updatePodReusableMemory` only raises it for one); app0 (4Gi) reuses that 1Gi and
    books 3Gi, app1 books the last 5Gi: the kubelet admits. numatopo spent 512Mi of the
    reusable memory on init1, so app0 booked 3.5Gi and app1 found 4.5Gi (property)."""
    spec = uneven_node([2, 2], [11, 9])
    state = NodeState(spec)
    pod_containers = [
        Container("init0", cpus=1, memory=GiB, init=True),
        Container("init1", cpus=1, memory=GiB // 2, init=True),
        Container("app0", cpus=1, memory=4 * GiB),
        Container("app1", cpus=1, memory=5 * GiB),
    ]

    admit, masks = decide_pod(kubelet_view(spec, state), pod_containers, "best-effort", "pod")
    placed = allocate(spec, state, engine_request(pod_containers, "best-effort", "pod"), "n")

    assert admit
    assert set(masks.values()) == {0b10}
    booked = {name: c.memory for name, c in placed.assignment.containers.items()}
    assert sum(m.get("1", 0) for m in booked.values()) == 9 * GiB
    assert booked["app1"] == {"1": 5 * GiB}
    check(spec, state, pod_containers, "best-effort", "pod")
    check(spec, state, pod_containers, "best-effort", "container")


def test_a_gpu_on_no_numa_node_comes_after_those_on_other_nodes() -> None:
    """Best-effort, scope container; GPUs 0 and 1 on NUMA 2 and 3, GPU 2 on none. The
    init container's merged mask is {0} (its memory), which holds no GPU: the device
    manager takes an unaligned one before the one on no NUMA node (`filterByAffinity`
    puts that in `noAffinity`, taken last), so GPU 0; the app containers then reuse it
    and take GPUs 1 and 2: admitted. numatopo counted GPU 2 as inside every mask, gave
    it to the init container, and the last app container, left GPUs 0 and 1 on NUMA
    2 and 3 (a memory group of app0), was refused (found by the property)."""
    spec = uneven_node([2, 2, 2, 2], [2, 2, 1, 1])
    gpus = [Gpu(index=0, numa=2), Gpu(index=1, numa=3), Gpu(index=2, numa=None)]
    spec = spec.model_copy(update={"gpus": gpus})
    state = NodeState(spec)
    pod_containers = [
        Container("init0", cpus=1, memory=3 * GiB // 2, gpus=1, init=True),
        Container("app0", cpus=4, memory=GiB // 2, gpus=1),
        Container("app1", cpus=1, memory=GiB // 2, gpus=2),
    ]

    admit, masks = decide_pod(kubelet_view(spec, state), pod_containers, "best-effort", "container")
    placed = allocate(spec, state, engine_request(pod_containers, "best-effort", "container"), "n")

    assert admit
    assert masks == {"init0": 0b0001, "app0": 0b1110, "app1": 0b0001}
    assert placed.assignment.containers["app0"].gpu_indices == [0]
    assert placed.assignment.containers["app1"].gpu_indices == [1, 2]
    check(spec, state, pod_containers, "best-effort", "container")


def test_a_reusing_container_packs_over_free_and_reusable_cpus_alike() -> None:
    """Best-effort, scope container, empty node. The init container's 4 CPUs land on
    NUMA 0 (1), 1 (2) and 2 (1); app0's mask is {1,2,3}. The CPU manager picks app0's
    CPU from the free and reusable CPUs together, packed: NUMA 1 and 2 have 2 each in
    that pool, so NUMA 1; reusable CPUs stay on NUMA 0, 1 and 2, app1's hints must hold
    all three, and its mask is {1,2,3}, app0's memory group: admitted. numatopo took a
    reusable CPU first, by its own best fit among the reusable ones only (NUMA 2),
    which left app1 bound to {0,1}, merged to {1,2}, refused by the memory group rule
    (found by the property)."""
    spec = uneven_node([2, 2, 2, 4], [2, 1, 2, 1])
    state = NodeState(spec)
    pod_containers = [
        Container("init0", cpus=4, memory=3 * GiB // 2, init=True),
        Container("app0", cpus=1, memory=GiB // 2),
        Container("app1", cpus=1, memory=GiB // 2),
    ]

    admit, masks = decide_pod(kubelet_view(spec, state), pod_containers, "best-effort", "container")
    placed = allocate(spec, state, engine_request(pod_containers, "best-effort", "container"), "n")

    assert admit
    assert masks == {"init0": 0b0001, "app0": 0b1110, "app1": 0b1110}
    assert placed.assignment.containers["app0"].cpus == CPUSet.parse("2")
    check(spec, state, pod_containers, "best-effort", "container")


def test_a_single_node_booking_leaves_its_node_out_of_the_multi_node_group() -> None:
    """Best-effort, scope container. NUMA 0 and 1 form a memory group (pod p0). The
    sidecar's merged mask is {0}; the memory manager books it there alone (a single-node
    mask skips the group rule) and `updateMachineState` sets NUMA 0's Cells to [0]: it
    is a single node now, so app0's preferred hint {0} holds its 3Gi there and app1's
    8Gi fit NUMA 2: admitted. numatopo marked NUMA 0 as in two groups, sent app0 to
    NUMA 2 and found no room for app1 (found by the property)."""
    spec = uneven_node([3, 2, 2], [5, 16, 11])
    gpus = [Gpu(index=i, numa=n) for i, n in enumerate([1, 1, 2, 2, None])]
    spec = spec.model_copy(update={"gpus": gpus})
    state = NodeState(spec)
    p0 = ContainerAssignment(
        cpus=CPUSet.parse("3"), mems=CPUSet.parse("0-1"), gpu_indices=[0, 1, 2],
        memory={"0": GiB // 2},
    )  # fmt: skip
    p1 = ContainerAssignment(cpus=CPUSet.parse("5"), mems=CPUSet.parse("2"), memory={"2": GiB // 2})
    state.apply("ns/p0", Assignment(node="n", containers={"app": p0}))
    state.apply("ns/p1", Assignment(node="n", containers={"app": p1}))
    pod_containers = [
        Container("init0", cpus=1, memory=GiB // 2, gpus=2, init=True, restartable=True),
        Container("app0", cpus=1, memory=3 * GiB),
        Container("app1", cpus=1, memory=8 * GiB),
    ]

    admit, masks = decide_pod(kubelet_view(spec, state), pod_containers, "best-effort", "container")
    placed = allocate(spec, state, engine_request(pod_containers, "best-effort", "container"), "n")

    assert admit
    assert masks == {"init0": 0b001, "app0": 0b001, "app1": 0b100}
    assert placed.assignment.containers["app0"].memory == {"0": 3 * GiB}
    check(spec, state, pod_containers, "best-effort", "container")


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("policy", POLICIES)
def test_the_app_container_reuses_the_init_containers_memory(policy: str, scope: str) -> None:
    """NUMA 0 and 1 hold 10Gi each; init0 and app0 ask 8Gi each. init0 lands on NUMA 0.
    The kubelet's memory manager counts init0's 8Gi as free for app0 on exactly NUMA 0
    (`calculateHints`: free plus `getPodReusableMemory` of the mask), and `Allocate`,
    finding the hint's free 2Gi short (`isAffinitySatisfyRequest` counts no reuse),
    extends it to its own best hint holding it, NUMA 0 itself; app0 then books only
    what it does not reuse: nothing. Under every policy and scope the pod is admitted
    with both containers' memory on NUMA 0, 8Gi in all. numatopo counted no reuse in
    the hints: refused under scope `pod` and under `restricted`/`single-numa-node`,
    and elsewhere gave app0 NUMA 1's memory."""
    spec = uneven_node([4, 4], [10, 10])
    state = NodeState(spec)
    pod_containers = [
        Container("init0", cpus=1, memory=8 * GiB, init=True),
        Container("app0", cpus=1, memory=8 * GiB),
    ]

    request = engine_request(pod_containers, policy, scope)
    placed = allocate(spec, state, request, "n")

    assert evaluate(spec, state, request) == placed.score
    assert evaluate_many(spec, [state], request) == [placed.score]
    app0 = placed.assignment.containers["app0"]
    assert app0.mems == CPUSet.parse("0")
    assert app0.memory == {"0": 8 * GiB}
    booked = sum(sum(c.memory.values()) for c in placed.assignment.containers.values())
    assert booked == 8 * GiB
    after = state.copy()
    after.apply("ns/last", placed.assignment)
    assert after.free_memory(0) == 2 * GiB
    after.release("ns/last")
    assert after.free_memory(0) == state.free_memory(0)
    admit, masks = decide_pod(kubelet_view(spec, state), pod_containers, policy, scope)
    assert admit
    if policy != "none":
        assert masks == {"init0": 0b01, "app0": 0b01}
    check(spec, state, pod_containers, policy, scope)


def test_reused_memory_on_a_real_two_socket_machine() -> None:
    """The same on the hwloc dump of a 2-socket Xeon (18Gi per NUMA node), scope
    `container`, `single-numa-node`: init0 12Gi, app0 16Gi, NUMA 1 already holding 10Gi
    of another pod. Only NUMA 0 has room for app0, counting the 12Gi init0 leaves it
    there; the kubelet admits with 16Gi booked on NUMA 0, not 28Gi."""
    spec = load("cpu-2socket-ht")
    state = NodeState(spec)
    other = ContainerAssignment(
        cpus=CPUSet.parse("1"), mems=CPUSet.parse("1"), memory={"1": 10 * GiB}
    )
    state.apply("ns/other", Assignment(node="n", containers={"c": other}))
    pod_containers = [
        Container("init0", cpus=2, memory=12 * GiB, init=True),
        Container("app0", cpus=2, memory=16 * GiB),
    ]

    placed = allocate(
        spec, state, engine_request(pod_containers, "single-numa-node", "container"), "n"
    )

    assert placed.assignment.containers["app0"].memory == {"0": 16 * GiB}
    booked = sum(sum(c.memory.values()) for c in placed.assignment.containers.values())
    assert booked == 16 * GiB
