"""The allocation engine's entry point: a pod request and a node's state in, a decision out.

`allocate` runs, per placement unit (the pod under scope `pod`; each app container in
turn under scope `container`, each seeing what the earlier ones took):

1. hint providers per resource (`hints`), merged per policy into one NUMA mask by a
   bounded search (`merging`, `policies`);
2. the concrete choice inside the mask: GPUs by link bandwidth (`gpu_assignment`), NICs
   by PCIe path to those GPUs (`nic_assignment`), exclusive CPUs packed by core, NUMA
   node and socket (`cpu_assignment`), memory and huge pages per NUMA node
   (`memory_assignment`);
3. the node score (`scoring`).

`evaluate` is the same decision without building the wire model (and, under scope
`pod`, without picking CPU ids, which the score does not need): what a scheduler
extender's filter+prioritize calls for every node. `allocate` is called once, for the
node that wins.

Init containers run one at a time before the app containers, so the pod needs, per
resource, max(largest init container, sum of app containers) (kubelet). Sidecars
(restartable init containers) keep running: they are placed like app containers and
add to every later init container's need. The pod-level
hint is sized for that; init containers then reuse what the app containers got: each
init container's entry lists CPUs taken from the app containers' exclusive CPUs
(topped up from the mask's shared CPUs when it needs more) with `exclusive: false`, so
nothing is booked twice; memory, huge pages, GPUs and NICs that the largest init
container needs beyond the app containers' sum are booked on its entry. Under scope
`container` the init excess is placed as one more unit after the app containers.

Nothing here mutates the caller's `NodeState`; the caller applies
`decision.assignment` with `state.apply(key, assignment)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from operator import methodcaller
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from numatopo_engine.annotations import (
    Assignment,
    ContainerAssignment,
    CpuMode,
    GpuLinksMode,
    Scope,
    SmtMode,
)
from numatopo_engine.batch_evaluate import (
    GENERAL,
    NO_SHARED_CPU,
    REFUSED,
    bulk_plan,
    decide_many,
    refusal_reason,
    stack,
)
from numatopo_engine.cpu_assignment import take_cpus
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.errors import InvalidRequestError, UnsatisfiableError
from numatopo_engine.fast_evaluate import Plan, decide, plan_for
from numatopo_engine.gpu_assignment import choose_gpus, first_unlinked_pair, set_bandwidth
from numatopo_engine.hints import FreeView, Need, Resource, build_resources
from numatopo_engine.memory_assignment import book_bytes
from numatopo_engine.merging import MaskChoice, choose_mask
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.nic_assignment import choose_nics
from numatopo_engine.numamask import bits, format_mask
from numatopo_engine.policies import rules_for
from numatopo_engine.refusals import Refusal, explain, format_bytes, shared_pool, summary
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.scoring import node_score, placement_score
from numatopo_engine.state import NodeState, shared_floor
from numatopo_engine.topology_tables import Tables, tables_for

__all__ = [
    "Decision",
    "Refusal",
    "ShapeGroup",
    "ShapeScores",
    "allocate",
    "evaluate",
    "evaluate_many",
    "group_by_shape",
    "node_score",
    "score_many",
]


@dataclass(frozen=True)
class Decision:
    assignment: Assignment
    score: int  # 0..100, higher is better; see `numatopo_engine.scoring`


def allocate(
    topology: NumatopologySpec, state: NodeState, request: PodRequest, node_name: str
) -> Decision:
    """Place `request` on the node; raises UnsatisfiableError naming what did not fit where."""
    plan = _decide(topology, state, request, build=True)
    containers = {name: _wire(entry) for name, entry in plan.entries.items()}
    assignment = Assignment(
        node=node_name,
        numa_nodes=bits(plan.mask),
        policy=request.options.policy,
        containers=containers,
    )
    return Decision(assignment=assignment, score=plan.score)


def evaluate(topology: NumatopologySpec, state: NodeState, request: PodRequest) -> int:
    """The score `allocate` would give, faster; raises UnsatisfiableError like it.

    Scope `pod` requests on nodes with few NUMA nodes are decided by table look-ups
    (`fast_evaluate`, exact: same score, same reason); the rest by `_decide`. Answers
    are memoised per topology, keyed by the request's sizing and the node's
    `free_state_id` (its `FreeSignature`): both paths read the node only through that
    signature, so a hit returns exactly what a miss computes.
    """
    tables = tables_for(topology)
    sizing, token = _sized(request, tables)
    key = (token, type(state), state.free_state_id())
    memo = tables.decision_memo
    outcome = memo.get(key)
    if outcome is None:
        outcome = _outcome(
            topology, tables=tables, state=state, request=request, need=sizing[5], token=token
        )
        if len(memo) >= _DECISION_MEMO_SIZE:
            memo.clear()  # a new scheduling epoch; cheaper than tracking recency per hit
        memo[key] = outcome
    if isinstance(outcome, str):
        raise UnsatisfiableError(outcome)
    return outcome


def evaluate_many(
    topology: NumatopologySpec,
    states: Sequence[NodeState],
    request: PodRequest,
    *,
    checked: bool = True,
) -> list[int | Refusal]:
    """`evaluate` on each of `states`, nodes of `topology`'s hardware shape, in bulk.

    Per node: the score `evaluate` returns, or a `Refusal` whose `reason` is the text
    its UnsatisfiableError carries (`summary` of it at once, the text when read). What
    depends on the hardware and the request is worked out once; the nodes are decided
    together (`batch_evaluate`), and those the bulk path does not model go through
    `evaluate` one by one. Raises InvalidRequestError where `evaluate` would on every
    node, and ValueError when a state is of another hardware shape (`checked=False`
    skips that check, for states grouped by `group_by_shape`).
    """
    scored = score_many(topology, states, request, checked=checked)
    outcomes: list[int | Refusal] = scored.scores.tolist()
    for refused, _ in scored.refused:
        for index in refused.tolist():
            outcomes[index] = scored.refusal(index)
    return outcomes


class ShapeScores(NamedTuple):
    """`evaluate_many`'s answers as arrays, for callers that read only some refusals."""

    scores: npt.NDArray[np.int64]  # per state: its score, or -1 where it is refused
    # The refused states (indices into `states`) with the summary they share.
    refused: list[tuple[npt.NDArray[np.intp], str]]
    refusal: Callable[[int], Refusal]  # a refused state's full `Refusal`, by index


def score_many(
    topology: NumatopologySpec,
    states: Sequence[NodeState],
    request: PodRequest,
    *,
    checked: bool = True,
) -> ShapeScores:
    """`evaluate_many` without a Python object per node: scores in an array, refusals
    as (indices, summary) pairs, each `Refusal` made only when asked for."""
    tables = tables_for(topology)
    for state in states if checked else ():
        if state.topology is not topology and tables_for(state.topology) is not tables:
            raise ValueError("evaluate_many: every state must be of the topology's hardware")
    return _evaluate_shape(topology, tables, states, request)


class ShapeGroup(NamedTuple):
    """Nodes of one hardware shape among many: where they were, and their states."""

    topology: NumatopologySpec  # one of theirs (equal content)
    positions: list[int]
    states: list[NodeState]


def group_by_shape(nodes: Iterable[tuple[NumatopologySpec, NodeState]]) -> list[ShapeGroup]:
    """`nodes` (topology, state) per hardware shape (equal content), in first-seen order:
    what `evaluate_many(group.topology, group.states, request, checked=False)` takes.

    Grouping depends on topologies only: a caller whose nodes keep their topologies
    (and `NodeState` objects) may keep the groups from one pod to the next."""
    groups: dict[int, ShapeGroup] = {}
    for position, (topology, state) in enumerate(nodes):
        tables = tables_for(topology)
        group = groups.get(id(tables))
        if group is None:
            group = groups[id(tables)] = ShapeGroup(topology, [], [])
        group.positions.append(position)
        group.states.append(state)
    return list(groups.values())


def _evaluate_shape(
    topology: NumatopologySpec, tables: Tables, states: Sequence[NodeState], request: PodRequest
) -> ShapeScores:
    try:
        sizing, token = _sized(request, tables)
    except UnsatisfiableError as exc:
        return _everywhere(Refusal.of(exc.reason), len(states))
    plan = _plan(topology, tables, token, sizing[5], request.options)
    bulk = None
    if isinstance(plan, Plan):
        if plan.refusal is not None:
            return _everywhere(Refusal.of(plan.refusal), len(states))
        bulk = bulk_plan(tables, token, plan, topology)
    if bulk is None or not states:
        return _one_by_one(topology, states, request)
    rows = list(map(_free_row, states))
    joined = b"".join(rows)
    if len(joined) != len(rows) * bulk.width * 8:  # some row is empty: see `free_row`
        return _one_by_one(topology, states, request)
    codes = decide_many(tables, bulk, stack(joined, bulk.width))
    refused: list[tuple[npt.NDArray[np.intp], str]] = []
    singles: dict[int, Refusal] = {}
    in_bulk = np.flatnonzero(codes == REFUSED)
    word = partial(refusal_reason, bulk)
    if in_bulk.size:
        # Every bulk refusal of one plan words the same summary (what is short, not by
        # how much); the detailed text waits for a reader.
        refused.append((in_bulk, summary(word(rows[int(in_bulk[0])]))))
    short = refused[0][1] if in_bulk.size else ""
    # Nodes refused for their last shared CPU share another summary (`refusals.shared_pool`).
    no_shared = codes == NO_SHARED_CPU
    no_shared_at = np.flatnonzero(no_shared)
    no_shared_summary = ""
    if no_shared_at.size:
        no_shared_summary = summary(word(rows[int(no_shared_at[0])]))
        refused.append((no_shared_at, no_shared_summary))
        codes[no_shared_at] = REFUSED
    general = np.flatnonzero(codes == GENERAL)
    if general.size:
        for index in general.tolist():
            outcome = _one(topology, states[index], request)
            if isinstance(outcome, Refusal):
                singles[index] = outcome
                codes[index] = REFUSED
                refused.append((np.array([index], dtype=np.intp), outcome.summary))
            else:
                codes[index] = outcome

    def refusal(index: int) -> Refusal:
        found = singles.get(index)
        if found is not None:
            return found
        return Refusal(no_shared_summary if no_shared[index] else short, None, word, rows[index])

    return ShapeScores(codes, refused, refusal)


def _everywhere(refusal: Refusal, count: int) -> ShapeScores:
    return ShapeScores(
        np.full(count, REFUSED, dtype=np.int64),
        [(np.arange(count), refusal.summary)] if count else [],
        lambda _: refusal,
    )


def _one_by_one(
    topology: NumatopologySpec, states: Sequence[NodeState], request: PodRequest
) -> ShapeScores:
    outcomes = [_one(topology, state, request) for state in states]
    refusals = {i: o for i, o in enumerate(outcomes) if isinstance(o, Refusal)}
    scores = np.array([REFUSED if isinstance(o, Refusal) else o for o in outcomes], dtype=np.int64)
    refused = [(np.array([i], dtype=np.intp), o.summary) for i, o in refusals.items()]
    return ShapeScores(scores, refused, refusals.__getitem__)


_free_row = methodcaller("free_row")


def _one(topology: NumatopologySpec, state: NodeState, request: PodRequest) -> int | Refusal:
    try:
        return evaluate(topology, state, request)
    except UnsatisfiableError as exc:
        return Refusal.of(exc.reason)


def _plan(
    topology: NumatopologySpec, tables: Tables, token: object, need: Need, options: TopologyOptions
) -> Plan | None:
    """`fast_evaluate`'s plan for the request, cached on `tables` under its token."""
    plans = tables.evaluate_plans
    plan = plans.get(token, _NO_PLAN)
    if plan is _NO_PLAN:
        if len(plans) >= _TOKENS_SIZE:
            plans.clear()
        # `tables` stand for every spec of equal content, so the floor is theirs too.
        plan = plans[token] = plan_for(tables, need, options, shared_floor(topology))
    return plan if isinstance(plan, Plan) else None


def _outcome(
    topology: NumatopologySpec,
    *,
    tables: Tables,
    state: NodeState,
    request: PodRequest,
    need: Need,
    token: object,
) -> int | str:
    """Score or refusal reason: the fast path where it answers, else the general one."""
    plan = _plan(topology, tables, token, need, request.options)
    if plan is not None:
        fast = decide(tables, plan, state.free_signature())
        if fast is not None:
            return fast
    try:
        return _decide(topology, state, request, build=False).score
    except UnsatisfiableError as exc:
        return exc.reason


# -- internals -------------------------------------------------------------------


@dataclass(slots=True)
class _Entry:
    cpus: list[int] = field(default_factory=list)
    exclusive: bool = True
    mask: int = 0
    gpus: list[int] = field(default_factory=list)
    nics: list[str] = field(default_factory=list)
    memory: dict[int, int] = field(default_factory=dict)
    hugepages: dict[int, dict[str, int]] = field(default_factory=dict)
    gpu_names: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Plan:
    mask: int
    score: int
    entries: dict[str, _Entry]


def _wire(entry: _Entry) -> ContainerAssignment:
    return ContainerAssignment(
        cpus=CPUSet(entry.cpus),
        exclusive=entry.exclusive,
        mems=CPUSet(bits(entry.mask)),
        gpus=entry.gpu_names,
        gpu_indices=entry.gpus,
        nics=entry.nics,
        memory={str(n): v for n, v in sorted(entry.memory.items())},
        hugepages={str(n): dict(sorted(s.items())) for n, s in sorted(entry.hugepages.items())},
    )


def _decide(
    topology: NumatopologySpec, state: NodeState, request: PodRequest, *, build: bool
) -> _Plan:
    tables = tables_for(topology)
    options = request.options
    apps, inits, needs, init_needs, excess, sized = _sized(request, tables)[0]
    floor = state.shared_floor
    free = FreeView.from_state(tables, state, hugepages=bool(sized.hugepages))
    initial = free.copy() if build or options.scope is Scope.CONTAINER else free
    entries: dict[str, _Entry] = {}
    if options.scope is Scope.POD:
        choice, resources = _choose(tables, free, sized, options, floor)
        gpus = _gpu_set(tables, free, sized, options, choice.mask)
        score = placement_score(
            tables,
            free,
            mask=choice.mask,
            min_width=_min_width(resources),
            cpus=sized.cpus if sized.cpu_mode is CpuMode.EXCLUSIVE else 0,
            gpus=gpus,
            gpu_resource=sized.gpu_resource,
        )
        if not build:
            return _Plan(choice.mask, score, entries)
        pool = list(gpus)
        for container in apps:
            entries[container.name] = _fill(
                tables, free, needs[container.name], options, choice.mask, gpu_pool=pool
            )
        union = choice.mask
    else:
        union = 0
        for container in apps:
            choice, _ = _choose(tables, free, needs[container.name], options, floor)
            gpus = _gpu_set(tables, free, needs[container.name], options, choice.mask)
            entries[container.name] = _fill(
                tables, free, needs[container.name], options, choice.mask, gpu_pool=list(gpus)
            )
            union |= choice.mask
        if _has_any(excess):
            choice, _ = _choose(tables, free, excess, options, floor)
            union |= choice.mask
        score = placement_score(
            tables,
            initial,
            mask=union,
            min_width=_min_width(build_resources(tables, initial, sized)),
            cpus=sum(len(e.cpus) for e in entries.values() if e.exclusive),
            gpus=sorted(g for e in entries.values() for g in e.gpus),
            gpu_resource=sized.gpu_resource,
        )
        if not build:
            return _Plan(union, score, entries)
    _add_init_entries(
        tables,
        free,
        inits=inits,
        init_needs=init_needs,
        excess=excess,
        entries=entries,
        union=union,
        options=options,
    )
    return _Plan(union, score, entries)


_Sizing = tuple[
    tuple[ContainerRequest, ...],  # app containers and sidecars
    tuple[ContainerRequest, ...],  # regular init containers
    dict[str, Need],  # per app container
    list[Need],  # per regular init container, with the sidecars running beside it
    Need,  # what the largest init container needs beyond the app containers
    Need,  # the pod's total: app containers + that excess
]
# One scheduling pass evaluates the same request object on every node; its sizing
# depends only on the request and the threads per core. Keyed by identity, holding the
# request so its id is not reused while cached.
_sizing_memo: dict[tuple[int, int], tuple[PodRequest, _Sizing, object]] = {}
_SIZING_MEMO_SIZE = 64


class _Token:
    """Names one sizing in memos on `Tables`: hashed by identity, so cheaply, and owned by
    this module instance (a re-imported module makes new tokens, never equal to these)."""

    __slots__ = ("__weakref__",)


# Equal sizings (replicas of one job, the same pod retried) share one token, so the
# decision memo hashes a token per node instead of the needs. A token dropped from
# `_tokens` lives on in memo keys, so no later token can compare equal to it.
_tokens: dict[tuple[object, ...], _Token] = {}
_TOKENS_SIZE = 4096
_NO_PLAN = object()
# Decisions per topology (see `evaluate`); enough for every node state of a large
# cluster times a handful of pod shapes.
_DECISION_MEMO_SIZE = 65536


def _sized(request: PodRequest, tables: Tables) -> tuple[_Sizing, object]:
    """The request's sizing, and a token equal for requests `_decide` cannot tell apart."""
    key = (id(request), tables.threads_per_core)
    hit = _sizing_memo.get(key)
    if hit is not None and hit[0] is request:
        return hit[1], hit[2]
    options = request.options
    sidecars = tuple(c for c in request.init_containers if c.restartable)
    apps = request.containers + sidecars
    inits = tuple(c for c in request.init_containers if not c.restartable)
    needs = {c.name: _container_need(c, options, tables) for c in apps}
    init_needs = _init_totals(request, options, tables)
    pod_need = _sum_needs(list(needs.values()), options)
    excess = _excess(init_needs, pod_need, options)
    sizing = (apps, inits, needs, init_needs, excess, _add_needs(pod_need, excess))
    # Container names only label entries; what `_decide` decides depends on the rest.
    signature = (options, tuple(needs.values()), tuple(init_needs), excess, sizing[5])
    token = _tokens.get(signature)
    if token is None:
        if len(_tokens) >= _TOKENS_SIZE:
            del _tokens[next(iter(_tokens))]
        token = _tokens[signature] = _Token()
    if len(_sizing_memo) >= _SIZING_MEMO_SIZE:
        del _sizing_memo[next(iter(_sizing_memo))]
    _sizing_memo[key] = (request, sizing, token)
    return sizing, token


def _init_totals(request: PodRequest, options: TopologyOptions, tables: Tables) -> list[Need]:
    """Each regular init container's need plus the sidecars already running beside it."""
    running = _sum_needs([], options)
    totals: list[Need] = []
    for container in request.init_containers:
        need = _container_need(container, options, tables)
        if container.restartable:
            running = _add_needs(running, need)
        else:
            totals.append(_add_needs(running, need))
    return totals


def _container_need(c: ContainerRequest, options: TopologyOptions, tables: Tables) -> Need:
    mode = options.cpu
    if mode is CpuMode.EXCLUSIVE:
        if c.cpu_milli and c.integer_cpus is None:
            raise InvalidRequestError(
                "numatopo.io/cpu",
                f"exclusive CPUs need whole CPU requests; container {c.name} asks "
                f"{c.cpu_milli}m (use numatopo.io/cpu: numa for fractional CPUs)",
            )
        cpus = c.integer_cpus or 0
    elif mode is CpuMode.NUMA:
        cpus = -(-c.cpu_milli // 1000)
    else:
        cpus = 0
    full_cores = options.smt is SmtMode.FULL_CORES and mode is CpuMode.EXCLUSIVE
    if full_cores and cpus % tables.threads_per_core:
        raise UnsatisfiableError(
            f"smt full-cores: container {c.name} asks {cpus} CPUs, which is not a multiple "
            f"of the {tables.threads_per_core} threads per physical core on this node"
        )
    return Need(
        cpus=cpus,
        cpu_mode=mode,
        full_cores=full_cores,
        memory_bytes=c.memory_bytes,
        hugepages=tuple(sorted((s, b) for s, b in c.hugepages.items() if b)),
        gpus=c.gpus,
        gpu_resource=c.gpu_resource if c.gpus else None,
        nics=c.nics,
        nic_resource=c.nic_resource if c.nics else None,
    )


def _sum_needs(needs: Sequence[Need], options: TopologyOptions) -> Need:
    total = Need(
        cpu_mode=options.cpu,
        full_cores=options.smt is SmtMode.FULL_CORES and options.cpu is CpuMode.EXCLUSIVE,
    )
    for need in needs:
        total = _add_needs(total, need)
    return total


def _add_needs(a: Need, b: Need) -> Need:
    pages = dict(a.hugepages)
    for size, amount in b.hugepages:
        pages[size] = pages.get(size, 0) + amount
    return Need(
        cpus=a.cpus + b.cpus,
        cpu_mode=a.cpu_mode,
        full_cores=a.full_cores,
        memory_bytes=a.memory_bytes + b.memory_bytes,
        hugepages=tuple(sorted((s, v) for s, v in pages.items() if v)),
        gpus=a.gpus + b.gpus,
        gpu_resource=a.gpu_resource or b.gpu_resource,
        nics=a.nics + b.nics,
        nic_resource=a.nic_resource or b.nic_resource,
    )


def _excess(init_needs: Sequence[Need], apps: Need, options: TopologyOptions) -> Need:
    """What the largest init container needs beyond the app containers' sum, per resource."""
    if not init_needs:
        return Need(cpu_mode=apps.cpu_mode, full_cores=apps.full_cores)
    app_pages = dict(apps.hugepages)
    pages: dict[str, int] = {}
    for need in init_needs:
        for size, amount in need.hugepages:
            pages[size] = max(pages.get(size, 0), amount - app_pages.get(size, 0))
    return Need(
        cpus=max(0, max(n.cpus for n in init_needs) - apps.cpus),
        cpu_mode=apps.cpu_mode,
        full_cores=apps.full_cores,
        memory_bytes=max(0, max(n.memory_bytes for n in init_needs) - apps.memory_bytes),
        hugepages=tuple(sorted((s, v) for s, v in pages.items() if v > 0)),
        gpus=max(0, max(n.gpus for n in init_needs) - apps.gpus),
        gpu_resource=next((n.gpu_resource for n in init_needs if n.gpu_resource), None),
        nics=max(0, max(n.nics for n in init_needs) - apps.nics),
        nic_resource=next((n.nic_resource for n in init_needs if n.nic_resource), None),
    )


def _has_any(need: Need) -> bool:
    return bool(need.cpus or need.memory_bytes or need.hugepages or need.gpus or need.nics)


def _min_width(resources: Sequence[Resource]) -> int:
    return max((r.min_width or 1 for r in resources), default=1)


def _gpu_candidates(tables: Tables, free: FreeView, need: Need, mask: int) -> frozenset[int]:
    return frozenset(
        g
        for g in free.gpus
        if (need.gpu_resource is None or tables.gpu_resource[g] == need.gpu_resource)
        and ((n := tables.gpu_numa[g]) is None or mask >> n & 1)
    )


def _gpu_set(
    tables: Tables, free: FreeView, need: Need, options: TopologyOptions, mask: int
) -> tuple[int, ...]:
    if not need.gpus:
        return ()
    candidates = _gpu_candidates(tables, free, need, mask)
    chosen = choose_gpus(tables, candidates, need.gpus, options.gpu_links)
    if chosen is None:  # only `required` can refuse a mask the search accepted
        raise UnsatisfiableError(_unlinked_message(tables, candidates, need.gpus, mask))
    return chosen


def _choose(
    tables: Tables, free: FreeView, need: Need, options: TopologyOptions, floor: int
) -> tuple[MaskChoice, list[Resource]]:
    resources = build_resources(tables, free, need)
    if _short_on_node(resources):
        # No mask, not even every node, can hold it: the search would end in exactly
        # this message, so skip it.
        raise UnsatisfiableError(explain(need, resources, options))
    exclusive = need.cpus if need.cpu_mode is CpuMode.EXCLUSIVE else 0
    if exclusive and len(free.cpus) - exclusive < floor:
        # Node-wide, whatever the mask: the kubelet never empties its shared pool
        # (`state.shared_floor`). `free` already lacks what earlier units took, and an
        # init excess counts, as the kubelet pins init containers to exclusive CPUs too.
        raise UnsatisfiableError(shared_pool(need.cpus, len(free.cpus)))
    rules = rules_for(options.policy)

    def tie_break(mask: int) -> tuple[float, ...]:
        gpu_left = cpu_left = 0
        bandwidth = 0.0
        ids = bits(mask)
        if need.gpus:
            candidates = _gpu_candidates(tables, free, need, mask)
            chosen = choose_gpus(tables, candidates, need.gpus, options.gpu_links)
            bandwidth = set_bandwidth(tables, chosen) if chosen else 0.0
            gpu_left = len(candidates) - need.gpus
        for resource in resources:
            if resource.name == "CPUs":
                cpu_left = resource.free_in(ids) - need.cpus
        return (-bandwidth, gpu_left, cpu_left)

    accept = None
    if need.gpus and options.gpu_links is GpuLinksMode.REQUIRED:

        def accept(mask: int) -> bool:
            candidates = _gpu_candidates(tables, free, need, mask)
            return choose_gpus(tables, candidates, need.gpus, GpuLinksMode.REQUIRED) is not None

    choice = choose_mask(
        resources,
        rules=rules,
        max_numa_nodes=options.max_numa_nodes,
        distances=tables.distances,
        tie_break=tie_break,
        accept=accept,
    )
    if choice is None and accept is not None:
        # Name the unlinked pair when the counts alone would have fitted.
        by_count = choose_mask(
            resources, rules=rules, max_numa_nodes=options.max_numa_nodes,
            distances=tables.distances,
        )  # fmt: skip
        if by_count is not None:
            candidates = _gpu_candidates(tables, free, need, by_count.mask)
            raise UnsatisfiableError(
                _unlinked_message(tables, candidates, need.gpus, by_count.mask)
            )
    if choice is None:
        raise UnsatisfiableError(explain(need, resources, options))
    return choice, resources


def _short_on_node(resources: Sequence[Resource]) -> bool:
    """Some resource has less free on the whole node (every NUMA node, floating) than asked."""
    return any(r.floating_free + sum(r.free.values()) < r.need for r in resources)


def _fill(
    tables: Tables,
    free: FreeView,
    need: Need,
    options: TopologyOptions,
    mask: int,
    *,
    gpu_pool: list[int],
) -> _Entry:
    """Concrete resources for one container inside `mask`, taken out of `free`."""
    numa_ids = bits(mask)
    entry = _Entry(mask=mask, exclusive=need.cpu_mode is CpuMode.EXCLUSIVE)
    if need.gpus:
        picked = choose_gpus(tables, frozenset(gpu_pool), need.gpus, options.gpu_links)
        if picked is None:
            raise UnsatisfiableError(
                _unlinked_message(tables, frozenset(gpu_pool), need.gpus, mask)
            )
        entry.gpus = list(picked)
        entry.gpu_names = [tables.gpu_name[g] for g in picked]
        for gpu in picked:
            gpu_pool.remove(gpu)
            free.gpus.discard(gpu)
    if need.nics:
        candidates = [
            n
            for n in free.nics
            if (need.nic_resource is None or tables.nic_resource[n] == need.nic_resource)
            and ((numa := tables.nic_numa[n]) is None or numa in numa_ids)
        ]
        nics = choose_nics(tables, candidates, need.nics, gpus=entry.gpus, numa_ids=set(numa_ids))
        if nics is None:
            raise UnsatisfiableError(
                f"{need.nics} NICs requested, {len(candidates)} free on NUMA {format_mask(mask)}"
            )
        entry.nics = nics
        free.nics.difference_update(nics)
    if need.cpu_mode is CpuMode.EXCLUSIVE and need.cpus:
        cpus = take_cpus(tables, free.cpus, numa_ids, need.cpus, full_cores=need.full_cores)
        if cpus is None:
            raise UnsatisfiableError(
                f"{need.cpus} exclusive CPUs requested, fewer free on NUMA {format_mask(mask)}"
            )
        entry.cpus = cpus
        free.cpus.difference_update(cpus)
    elif need.cpu_mode is CpuMode.NUMA:
        entry.cpus = sorted(c for c in free.cpus if tables.cpu_numa[c] in numa_ids)
    _book_memory(tables, free, need, entry, numa_ids)
    return entry


def _book_memory(
    tables: Tables, free: FreeView, need: Need, entry: _Entry, numa_ids: list[int]
) -> None:
    if need.memory_bytes:
        memory_ids = [n for n in numa_ids if n in tables.memory_numa_ids] or numa_ids
        booked = book_bytes(free.memory, memory_ids, need.memory_bytes)
        if booked is None:
            raise UnsatisfiableError(
                f"memory: {format_bytes(need.memory_bytes)} requested, less free on NUMA "
                + ",".join(map(str, numa_ids))
            )
        entry.memory = booked
    for size, amount in need.hugepages:
        view = {n: free.hugepages.get((n, size), 0) for n in numa_ids}
        booked = book_bytes(view, numa_ids, amount)
        if booked is None:
            raise UnsatisfiableError(
                f"hugepages-{size}: {format_bytes(amount)} requested, less free on NUMA "
                + ",".join(map(str, numa_ids))
            )
        for numa_id, taken in booked.items():
            free.hugepages[(numa_id, size)] -= taken
            entry.hugepages.setdefault(numa_id, {})[size] = taken


def _add_init_entries(
    tables: Tables,
    free: FreeView,
    *,
    inits: Sequence[ContainerRequest],
    init_needs: Sequence[Need],
    excess: Need,
    entries: dict[str, _Entry],
    union: int,
    options: TopologyOptions,
) -> None:
    if not inits:
        return
    app_cpus = [c for e in entries.values() if e.exclusive for c in e.cpus]
    app_gpus = [g for e in entries.values() for g in e.gpus]
    numa_ids = bits(union)
    largest = max(
        range(len(init_needs)),
        key=lambda i: (init_needs[i].gpus, init_needs[i].cpus, init_needs[i].memory_bytes, -i),
    )
    shared = sorted(c for c in free.cpus if tables.cpu_numa[c] in numa_ids)
    for index, (container, need) in enumerate(zip(inits, init_needs, strict=True)):
        entry = _Entry(mask=union, exclusive=False)
        if need.cpu_mode is not CpuMode.NONE and need.cpus:
            entry.cpus = sorted((app_cpus + shared)[: need.cpus])
        if index == largest and _has_any(excess):
            if excess.gpus:
                pool = _gpu_candidates(tables, free, excess, union) - set(app_gpus)
                extra = _fill(
                    tables,
                    free,
                    Need(gpus=excess.gpus, gpu_resource=excess.gpu_resource, cpu_mode=CpuMode.NONE),
                    options,
                    union,
                    gpu_pool=sorted(pool),
                )
                entry.gpus, entry.gpu_names = extra.gpus, extra.gpu_names
            if excess.nics:
                extra = _fill(
                    tables,
                    free,
                    Need(nics=excess.nics, nic_resource=excess.nic_resource, cpu_mode=CpuMode.NONE),
                    options,
                    union,
                    gpu_pool=[],
                )
                entry.nics = extra.nics
            _book_memory(tables, free, excess, entry, numa_ids)
        entries[container.name] = entry


def _unlinked_message(tables: Tables, candidates: frozenset[int], count: int, mask: int) -> str:
    best = choose_gpus(tables, candidates, count, GpuLinksMode.PREFERRED)
    pair = first_unlinked_pair(tables, best or ())
    detail = f": GPU {pair[0]} and GPU {pair[1]} have no direct link" if pair else ""
    return (
        f"gpu-links required: no {count} free GPUs on NUMA {format_mask(mask)} are all "
        f"directly linked{detail}"
    )
