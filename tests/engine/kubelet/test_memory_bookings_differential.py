"""What numatopo books per NUMA node for a pod with init containers, against the kubelet's
static memory manager, memory and huge pages alike.

The kubelet keeps no per-container split over NUMA nodes: a container's memory blocks
(`state.Block`) hold, per memory type, its whole mask and a size, and the machine state
holds per NUMA node and type what is `Reserved` and `Free` (`updateMachineState` fills
the mask's nodes in id order with what `getPodReusableMemory` does not cover). What
numatopo writes that the kubelet's state determines is therefore:

- each container's `mems`: its blocks' NUMA affinity;
- each container's bytes per type summed over NUMA nodes: its block's size after
  `updateInitContainersMemoryBlocks` took the later containers' reuse off the init
  containers' blocks, and none of them outside `mems`;
- the pod's bytes per NUMA node and type, summed over its containers: what the kubelet
  reserved there, so that `NodeState`'s free memory and huge pages (which the
  Numatopology status and the exports show) are the machine state's `Free`;
- the memory groups `NodeState` derives: the nodes' `Cells`.

How the pod's bytes on a node are split among its containers is numatopo's own (the
kubelet has no such record), so only the sums are compared. Where an earlier container's
CPUs land shows here too: the later containers' hints read it, and their masks follow.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import GiB, app, pod
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import Container, PodOutcome, admit_pod, bits_of, mask_of
from test_decisions_differential import kubelet_view, specs
from test_init_containers_differential import SCOPES, engine_request, reusing_scenarios, uneven_node
from test_init_containers_differential import scenarios as init_container_scenarios

from numatopo_engine import NodeState, allocate
from numatopo_engine.annotations import Assignment, ContainerAssignment, PolicyName
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import Gpu, NumatopologySpec
from numatopo_engine.quantity import page_bytes

POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
HALF = GiB // 2
# Huge page sizes and the unit the pods ask them in (512Mi of 2Mi pages, 1Gi pages).
PAGES = {"2Mi": HALF, "1Gi": GiB}


def kind_of(size: str) -> str:
    return f"hugepages-{size}"


@st.composite
def paged_nodes(draw: st.DrawFn) -> tuple[NumatopologySpec, NodeState, tuple[str, ...]]:
    """A node of `test_decisions_differential` whose NUMA nodes also hold 0-8 GiB of 2Mi
    and of 1Gi huge pages, loaded by up to 3 pods the engine placed, some of them
    asking huge pages too, some behind an init container."""
    spec = draw(specs())
    sizes = tuple(s for s in PAGES if draw(st.booleans()))
    numa_nodes = [
        n.model_copy(
            update={
                "hugepages": {s: draw(st.integers(0, 8)) * PAGES[s] // page_bytes(s) for s in sizes}
            }
        )
        for n in spec.numa_nodes
    ]
    spec = spec.model_copy(update={"numa_nodes": numa_nodes})
    state = NodeState(spec)
    memory_units = sum(n.memory_bytes for n in spec.numa_nodes) // HALF
    for i in range(draw(st.integers(0, 3))):
        pages = {s: draw(st.integers(0, 4)) * PAGES[s] for s in sizes}
        asked = replace(
            app(draw(st.integers(1, 3)), memory=draw(st.integers(1, memory_units)) * HALF),
            hugepages={s: v for s, v in pages.items() if v},
        )
        # Sometimes behind an init container asking as much, which the app container
        # then reuses: the state holds an init container drained to no bytes.
        init = (replace(asked, name="init"),) if draw(st.integers(0, 2)) == 0 else ()
        request = pod(
            asked, init=init, policy=PolicyName(draw(st.sampled_from(POLICIES))), name=f"p{i}"
        )
        try:
            decision = allocate(spec, state, request, "n")
        except UnsatisfiableError:
            continue
        state.apply(f"ns/p{i}", decision.assignment)
    return spec, state, sizes


@st.composite
def paged_pods(draw: st.DrawFn, spec: NumatopologySpec, sizes: tuple[str, ...]) -> list[Container]:
    """One or two init containers (sometimes a sidecar) and one or two app containers,
    each asking memory (up to half the node's) and the node's huge page sizes (every
    app container some of each, so the pod's total asks every size an init container
    does); sizes drawn over the whole node make multi-node masks common."""
    memory_units = max(1, sum(n.memory_bytes for n in spec.numa_nodes) // HALF // 2)
    page_units = {
        s: max(1, sum(n.hugepages.get(s, 0) for n in spec.numa_nodes) * page_bytes(s)
               // PAGES[s] // 2)
        for s in sizes
    }  # fmt: skip

    def one(name: str, *, init: bool, restartable: bool = False) -> Container:
        least = 0 if init else 1
        return Container(
            name=name,
            cpus=draw(st.integers(1, 2)),
            memory=draw(st.integers(1, memory_units)) * HALF,
            gpus=draw(st.integers(0, 1)),
            init=init,
            restartable=restartable,
            hugepages={
                kind_of(s): draw(st.integers(least, page_units[s])) * PAGES[s] for s in sizes
            },
        )

    out = [
        one(f"init{i}", init=True, restartable=draw(st.integers(0, 3)) == 0)
        for i in range(draw(st.integers(1, 2)))
    ]
    out += [one(f"app{i}", init=False) for i in range(draw(st.integers(1, 2)))]
    return out


@st.composite
def scenarios(draw: st.DrawFn):
    spec, state, sizes = draw(paged_nodes())
    return (
        spec,
        state,
        draw(paged_pods(spec, sizes)),
        draw(st.sampled_from(POLICIES)),
        draw(st.sampled_from(SCOPES)),
    )


def spanning(draw: st.DrawFn, allocatable: dict[int, int], free: dict[int, int], unit: int) -> int:
    """An amount more than any NUMA node's allocatable (so the memory manager's preferred
    masks span several nodes) and at most the node's free total, in `unit`s; any amount
    up to the free total where there is no such amount."""
    least = max(allocatable.values(), default=0) // unit + 1
    most = sum(free.values()) // unit
    if most < least:
        return draw(st.integers(1, max(1, most))) * unit
    return draw(st.integers(least, most)) * unit


@st.composite
def spanning_scenarios(draw: st.DrawFn):
    """Pods whose init and app containers each ask more memory and huge pages than one
    NUMA node holds: their masks span nodes, and the app containers reuse the init
    containers' bytes there (an init container, sometimes a sidecar and a second init
    container after it, one or two app containers)."""
    spec, state, sizes = draw(paged_nodes())
    node = kubelet_view(spec, state)

    def one(name: str, **kw) -> Container:
        pages = {
            kind_of(s): spanning(
                draw, node.allocatable[kind_of(s)], node.free[kind_of(s)], PAGES[s]
            )
            for s in sizes
        }
        memory = spanning(draw, node.allocatable["memory"], node.free["memory"], HALF)
        return Container(name, cpus=1, memory=memory, hugepages=pages, **kw)

    containers = [one("init0", init=True)]
    if draw(st.booleans()):
        containers.append(
            Container(
                "sidecar", cpus=1, memory=HALF, init=True, restartable=True,
                hugepages={kind_of(s): PAGES[s] for s in sizes},
            )
        )  # fmt: skip
    if draw(st.booleans()):
        containers.append(one("init1", init=True))
    containers += [one(f"app{i}") for i in range(draw(st.integers(1, 2)))]
    return spec, state, containers, draw(st.sampled_from(POLICIES)), draw(st.sampled_from(SCOPES))


def booked_per_type(container) -> dict[str, dict[int, int]]:
    """A container's assignment as kubelet memory types -> NUMA id -> bytes."""
    out = {"memory": {int(n): v for n, v in container.memory.items()}}
    for numa, pages in container.hugepages.items():
        for size, amount in pages.items():
            out.setdefault(kind_of(size), {})[int(numa)] = amount
    return out


def check(
    spec: NumatopologySpec, state: NodeState, containers: list[Container], policy, scope
) -> PodOutcome:
    """The engine's decision for the pod against `reference.admit_pod`: admission, and
    for an admitted pod everything the kubelet's memory manager state determines."""
    node = kubelet_view(spec, state)
    kubelet = admit_pod(node, containers, policy, scope)
    try:
        decision = allocate(spec, state, engine_request(containers, policy, scope), "n")
    except UnsatisfiableError as refused:
        why = str(refused)
    else:
        why = ""
    assert (not why) == kubelet.admit, (node, containers, kubelet, why)
    if why:
        return kubelet
    placed = decision.assignment.containers
    seen = (node, containers, kubelet, placed)
    reserved: dict[str, dict[int, int]] = {}
    for c in containers:
        blocks = kubelet.blocks.get(c.name, [])
        booked = booked_per_type(placed[c.name]) if c.name in placed else {}
        if blocks:
            assert sorted(placed[c.name].mems.ids) == bits_of(kubelet.memory[c.name]), seen
        for block in blocks:
            per_numa = booked.get(block.kind, {})
            assert sum(per_numa.values()) == block.size, (c.name, block, seen)
            assert {n for n, v in per_numa.items() if v} <= set(bits_of(block.mask)), seen
        for kind, per_numa in booked.items():
            if kind not in {b.kind for b in blocks}:
                assert not any(per_numa.values()), (c.name, kind, seen)
            for n, v in per_numa.items():
                reserved.setdefault(kind, {})[n] = reserved.get(kind, {}).get(n, 0) + v
    for kind in set(reserved) | set(kubelet.reserved):
        mine = {n: v for n, v in reserved.get(kind, {}).items() if v}
        theirs = {n: v for n, v in kubelet.reserved.get(kind, {}).items() if v}
        assert mine == theirs, (kind, mine, theirs, seen)
    after = state.copy()
    after.apply("ns/last", Assignment(node="n", containers=placed))
    for n in node.numa_ids:
        assert after.free_memory(n) == kubelet.free["memory"][n], (n, seen)
        for size in {s for numa in spec.numa_nodes for s in numa.hugepages}:
            assert after.free_hugepages(n, size) == kubelet.free[kind_of(size)][n], (n, seen)
    # The state marks a node two pods' groups meet with -1, where the kubelet's Cells
    # hold the later booking's mask (see `hints.FreeView.join_group`).
    groups = after.memory_groups()
    held = {n for n, count in kubelet.assignments.items() if count}
    assert set(groups) == held, (groups, kubelet.assignments, seen)
    for n in held:
        if groups[n] != -1:
            assert groups[n] == mask_of(kubelet.groups[n]), (n, groups, seen)
    return kubelet


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_memory_and_huge_pages_booked_per_numa_node_match_the_kubelet(scenario) -> None:
    check(*scenario)


@settings(max_examples=400, deadline=None)
@given(spanning_scenarios())
def test_reuse_over_several_numa_nodes_books_what_the_kubelet_books(scenario) -> None:
    check(*scenario)


@settings(max_examples=200, deadline=None)
@given(st.one_of(init_container_scenarios(), reusing_scenarios()))
def test_the_init_container_properties_book_what_the_kubelet_books(scenario) -> None:
    """`test_init_containers_differential`'s pods (memory only), their bookings too."""
    check(*scenario)


def two_nodes_with_pages() -> NumatopologySpec:
    """Two NUMA nodes of 4 CPUs, 6Gi of memory, 3Gi of 2Mi pages and 3 1Gi pages each."""
    spec = uneven_node([4, 4], [6, 6])
    pages = {"2Mi": 3 * GiB // page_bytes("2Mi"), "1Gi": 3}
    numa_nodes = [n.model_copy(update={"hugepages": pages}) for n in spec.numa_nodes]
    return spec.model_copy(update={"numa_nodes": numa_nodes})


def paged(name: str, memory_gib: float, pages_gib: float, **kw) -> Container:
    """A container asking `memory_gib` of memory and `pages_gib` of each page size."""
    pages = int(pages_gib * GiB)
    return Container(
        name, cpus=1, memory=int(memory_gib * GiB),
        hugepages={"hugepages-1Gi": pages, "hugepages-2Mi": pages}, **kw,
    )  # fmt: skip


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("policy", POLICIES[:2])
def test_an_app_container_reuses_huge_pages_over_two_numa_nodes(policy: str, scope: str) -> None:
    """init0 asks 8Gi of memory and 4Gi of each page size, more than one NUMA node
    holds: the memory manager gives it NUMA 0-1 and books NUMA 0 full first (6Gi, 3Gi
    of pages), the rest on NUMA 1. app0 asks 9Gi and 5Gi of pages on the same mask:
    it reuses init0's and books the difference where NUMA 0-1 have room, which is NUMA
    1 only; init0's blocks end at 0. Per NUMA node the pod holds NUMA 0 whole and 3Gi
    of memory and 2Gi of each page size on NUMA 1."""
    spec = two_nodes_with_pages()
    state = NodeState(spec)
    containers = [paged("init0", 8, 4, init=True), paged("app0", 9, 5)]

    kubelet = check(spec, state, containers, policy, scope)

    assert kubelet.admit
    assert kubelet.memory == {"init0": 0b11, "app0": 0b11}
    assert kubelet.reserved == {
        "memory": {0: 6 * GiB, 1: 3 * GiB},
        "hugepages-1Gi": {0: 3 * GiB, 1: 2 * GiB},
        "hugepages-2Mi": {0: 3 * GiB, 1: 2 * GiB},
    }
    assert [b.size for b in kubelet.blocks["init0"]] == [0, 0, 0]


@pytest.mark.parametrize("scope", SCOPES)
def test_a_sidecar_reuses_the_init_containers_bytes_on_its_mask(scope: str) -> None:
    """init0 (7Gi, 4Gi of each page size) gets NUMA 0-1 and fills NUMA 0 first (6Gi,
    3Gi of pages). The sidecar after it (2Gi, 1Gi of pages) lands on the same mask and
    reuses init0's bytes there: a sidecar is no regular init container, so
    `updatePodReusableMemory` spends the reusable amount on it and it books nothing.
    app0 (7Gi, 4Gi of pages) reuses what is left (5Gi, 3Gi of pages) and books the
    difference on NUMA 1, NUMA 0 being full. init0's blocks shrink by the sidecar's
    and app0's sizes to nothing; the sidecar's and app0's hold their whole requests."""
    spec = two_nodes_with_pages()
    state = NodeState(spec)
    containers = [
        paged("init0", 7, 4, init=True),
        paged("sidecar", 2, 1, init=True, restartable=True),
        paged("app0", 7, 4),
    ]

    kubelet = check(spec, state, containers, "best-effort", scope)

    assert kubelet.admit
    assert kubelet.memory == {"init0": 0b11, "sidecar": 0b11, "app0": 0b11}
    assert kubelet.reserved["memory"] == {0: 6 * GiB, 1: 3 * GiB}
    assert kubelet.reserved["hugepages-2Mi"] == {0: 3 * GiB, 1: 2 * GiB}
    assert [b.size for b in kubelet.blocks["init0"]] == [0, 0, 0]
    assert [b.size for b in kubelet.blocks["sidecar"]] == [2 * GiB, GiB, GiB]


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize(
    ("inits", "apps", "reserved"),
    [((1, 2), (3, 4), 7), ((4, 3), (2, 1), 4), ((7, 4), (4, 3), 7), ((7, 4), (5, 2), 7)],
    ids=["1+2,3+4", "4+3,2+1", "7+4,4+3", "7+4,5+2"],
)
def test_the_kubelets_init_container_reuse_tables(
    inits: tuple[int, int], apps: tuple[int, int], reserved: int, scope: str
) -> None:
    """The kubelet's `TestStaticPolicyAllocateWithInitContainers` (memory manager
    policy_static_test.go): one NUMA node with 7.5Gi of memory and 8Gi of 1Gi huge pages
    allocatable, no Topology Manager hint (policy `none`), two init containers then two
    app containers, each asking as much of both, allocated in turn; each reuses what
    the init containers booked, so the node ends with the larger of the largest init
    container and the app containers' sum reserved, of each, and the app containers'
    blocks hold their whole requests. Both the reference and numatopo must reproduce
    the table. In the last two rows the app containers find 512Mi of memory (1Gi of
    pages) free and fit only by reuse; numatopo refused them once."""
    spec = uneven_node([5], [8])
    numa = spec.numa_nodes[0].model_copy(update={"hugepages": {"1Gi": 8}})
    spec = spec.model_copy(update={"numa_nodes": [numa]})
    state = NodeState(spec)
    system = ContainerAssignment(
        cpus=CPUSet.parse("1"), mems=CPUSet.parse("0"), memory={"0": GiB // 2}
    )
    state.apply("ns/system", Assignment(node="n", containers={"c": system}))

    def asking(name: str, gib: int, *, init: bool = False) -> Container:
        return Container(
            name, cpus=1, memory=gib * GiB, init=init, hugepages={"hugepages-1Gi": gib * GiB}
        )

    pod_containers = [
        *(asking(f"init{i}", m, init=True) for i, m in enumerate(inits)),
        *(asking(f"app{i}", m) for i, m in enumerate(apps)),
    ]

    kubelet = check(spec, state, pod_containers, "none", scope)
    placed = allocate(spec, state, engine_request(pod_containers, "none", scope), "n")

    assert kubelet.admit
    assert kubelet.reserved == {"memory": {0: reserved * GiB}, "hugepages-1Gi": {0: reserved * GiB}}
    for i, m in enumerate(apps):
        assert [b.size for b in kubelet.blocks[f"app{i}"]] == [m * GiB, m * GiB]
    containers = placed.assignment.containers
    for i, m in enumerate(apps):
        assert containers[f"app{i}"].memory == {"0": m * GiB}
        assert containers[f"app{i}"].hugepages == {"0": {"1Gi": m * GiB}}
    pages = sum(s.get("1Gi", 0) for c in containers.values() for s in c.hugepages.values())
    assert pages == reserved * GiB
    after = state.copy()
    after.apply("ns/last", placed.assignment)
    assert after.free_hugepages(0, "1Gi") == (8 - reserved) * GiB


def four_small_nodes(memory_gib: list[int], pages_on: int) -> NumatopologySpec:
    """Four NUMA nodes of 2 CPUs (CPU 0 reserved), the given memory, one 1Gi huge page on
    NUMA `pages_on`."""
    spec = uneven_node([2, 2, 2, 2], memory_gib)
    numa_nodes = [
        n.model_copy(update={"hugepages": {"1Gi": int(n.id == pages_on)}}) for n in spec.numa_nodes
    ]
    return spec.model_copy(update={"numa_nodes": numa_nodes})


def test_an_init_containers_cpus_take_a_wholly_free_numa_node_first() -> None:
    """Best-effort, scope container. init0 (2 CPUs, 9.5Gi) gets NUMA 0-1 (its memory
    needs both). The CPU manager's packed `takeByTopology` takes a NUMA node whose CPUs
    are all free when the request is that big: NUMA 1 (CPUs 2-3; NUMA 0's CPU 0 is
    reserved). app0's CPU hints must then hold NUMA 1, its 1Gi page is on NUMA 2 only,
    and the memory manager books it on NUMA 2. numatopo took CPUs 1-2 (fewest free
    first), which bound app0 to NUMA 0 as well, and its memory went to NUMA 2-3
    (found by the property)."""
    spec = four_small_nodes([1, 9, 1, 8], pages_on=2)
    state = NodeState(spec)
    containers = [
        Container("init0", cpus=2, memory=19 * HALF, init=True),
        Container("app0", cpus=1, memory=HALF, hugepages={"hugepages-1Gi": GiB}),
    ]

    kubelet = check(spec, state, containers, "best-effort", "container")
    placed = allocate(spec, state, engine_request(containers, "best-effort", "container"), "n")

    assert kubelet.memory == {"init0": 0b0011, "app0": 0b0100}
    assert placed.assignment.containers["init0"].cpus == CPUSet.parse("2-3")


def test_an_init_containers_cpu_is_not_taken_next_to_its_gpu() -> None:
    """Best-effort, scope container; NUMA 0 holds another pod's single-node memory, the
    GPU is on NUMA 2. init0 (1 CPU, 14.5Gi, the GPU) gets NUMA 1-2. The CPU manager
    knows nothing of GPUs: NUMA 1 and 2 have 2 free CPUs each, so it takes NUMA 1's
    (CPU 2). The sidecar's CPU hints must then hold NUMA 1, its merged hint is NUMA 1,
    whose free memory (none) does not hold its 512Mi, and the memory manager extends it
    to NUMA 1-2, where it reuses init0's memory: the pod reserves 14.5Gi there, not
    15Gi. numatopo took the CPU next to the GPU (CPU 4, NUMA 2) as it does for app
    containers, and the sidecar booked 512Mi more on NUMA 2 (found by the property)."""
    spec = four_small_nodes([1, 1, 14, 13], pages_on=3)
    spec = spec.model_copy(update={"gpus": [Gpu(index=0, numa=2)]})
    state = NodeState(spec)
    other = ContainerAssignment(cpus=CPUSet.parse("1"), mems=CPUSet.parse("0"), memory={"0": GiB})
    state.apply("ns/other", Assignment(node="n", containers={"c": other}))
    containers = [
        Container("init0", cpus=1, memory=29 * HALF, gpus=1, init=True),
        Container("sidecar", cpus=1, memory=HALF, init=True, restartable=True),
        Container("app0", cpus=1, memory=HALF, hugepages={"hugepages-1Gi": GiB}),
    ]

    kubelet = check(spec, state, containers, "best-effort", "container")
    placed = allocate(spec, state, engine_request(containers, "best-effort", "container"), "n")

    assert kubelet.masks["sidecar"] == 0b0010
    assert kubelet.memory == {"init0": 0b0110, "sidecar": 0b0110, "app0": 0b1000}
    assert kubelet.reserved["memory"] == {1: GiB, 2: 27 * HALF, 3: HALF}
    assert placed.assignment.containers["init0"].cpus == CPUSet.parse("2")


def test_a_sidecars_spilled_cpus_take_the_numa_node_with_fewest_free_cpus_first() -> None:
    """Best-effort, scope container; NUMA 0-3 hold 2, 3, 4 and 2 CPUs (CPU 0
    reserved), the GPU is on NUMA 3. The sidecar (4 CPUs, the GPU) gets NUMA 0, which
    has one free CPU; the CPU manager takes the other three from the rest as its packed
    `takeByTopology` does: NUMA 3 whole (the wholly free node with the fewest CPUs, and
    the request is that big), then one CPU of NUMA 1. app0 then finds NUMA 1 and 2 with
    free CPUs and gets NUMA 1 (the lower of two preferred masks). numatopo took NUMA 1
    whole (best fit), which sent app0 and its memory to NUMA 2 (found by the property)."""
    spec = uneven_node([2, 3, 4, 2], [1, 1, 1, 1])
    spec = spec.model_copy(update={"gpus": [Gpu(index=0, numa=3)]})
    state = NodeState(spec)
    containers = [
        Container("sidecar", cpus=4, memory=HALF, gpus=1, init=True, restartable=True),
        Container("app0", cpus=1, memory=HALF),
    ]

    kubelet = check(spec, state, containers, "best-effort", "container")
    placed = allocate(spec, state, engine_request(containers, "best-effort", "container"), "n")

    assert kubelet.memory == {"sidecar": 0b0001, "app0": 0b0010}
    assert placed.assignment.containers["sidecar"].cpus == CPUSet.parse("1-2,9-10")
