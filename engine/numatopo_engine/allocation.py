"""The allocation engine's entry points: a pod request and a node's state in, a decision out.

Every caller decides with `decision.decide_rows` per placement unit: the pod under scope `pod`, each
container in turn under scope `container` or with init containers (`_one_container_at_a_time`;
docs/DESIGN.md, "The allocation engine"). `allocate` then fills the chosen mask with concrete
resources (`gpu_assignment`, `nic_assignment`, `cpu_assignment`, memory in NUMA id order as the
memory manager books it), topping a `best-effort` or `none` placement up from outside the mask as
the kubelet's managers do; `evaluate` decides without the fill.

Pinned devices (Follow, `numatopo.io/observed`; DRA bind): `pinned={container: GPU indices}` gives
those containers exactly those GPUs, the only GPUs free to the decision, so every GPU container must
be pinned (the kubelet allocates every container's devices at admission); `pinned_nics={container:
NIC names}` likewise for RDMA NICs, and when every NIC container is pinned the NIC hint counts only
the held NICs. Memo tables live in an `Engine` the caller owns; nothing here mutates the caller's
`NodeState` (the caller applies `decision.assignment` with `state.apply`).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Container, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple, cast

import numpy as np
import numpy.typing as npt

from numatopo_engine.annotations import (
    Assignment,
    ContainerAssignment,
    CpuMode,
    GpuLinksMode,
    PolicyName,
    Scope,
    SmtMode,
)
from numatopo_engine.cpu_assignment import take_cpus
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.decision import (
    FULL_SEARCH,
    Decided,
    FreeColumns,
    Plan,
    decide_rows,
    free_columns,
    make_plan,
    reusing_memory,
    shortfall,
    wanted_of,
)
from numatopo_engine.errors import InvalidRequestError, NumatopoError, UnsatisfiableError
from numatopo_engine.gpu_assignment import GpuMemo, choose_gpus
from numatopo_engine.hints import FreeView, Need, RowLayout, row_layout, row_of
from numatopo_engine.memory_assignment import MemoryView, book_bytes, memory_manager_mask
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.nic_assignment import choose_nics
from numatopo_engine.numamask import bits, format_mask, make_mask
from numatopo_engine.packing import Hosts, WorkloadMix, shape_copies
from numatopo_engine.refusals import Kind, Refusal, Shortfall, format_bytes, word
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.resources import accelerator_word
from numatopo_engine.row_verdicts import RowVerdicts
from numatopo_engine.state import NodeState, cached_rows
from numatopo_engine.topology_tables import (
    DEFAULT_SHAPES,
    NodeNames,
    TableCache,
    Tables,
    node_names,
    shape_key,
)

REFUSED = -1
# Node rows whose verdicts an `Engine` keeps, all plans together: a few times a cycle's candidates
# times the request kinds in flight. About 0.45 KB a row (the 5,000-node bench fleet, 5 pod kinds:
# 14,295 rows, 6 MiB), so under 30 MiB.
DEFAULT_ROWS = 1 << 16


class NotWarmError(Exception):
    """A `warm_only` call met something to build: ask again where that may take time."""


class Engine:
    """The memo tables of one caller (an extender, a simulation), one Engine per thread. Every memo
    is keyed by content, never by a node's names or an object's id, and bounded (`shapes` hardware
    shapes, least recently used dropped first; verdicts of at most `rows` node rows, all dropped
    past that), so answers never depend on what is cached."""

    def __init__(self, shapes: int = DEFAULT_SHAPES, rows: int = DEFAULT_ROWS) -> None:
        self.tables = TableCache(shapes)
        self.layouts: dict[str, RowLayout] = {}
        self.plans: dict[tuple[object, ...], Plan] = {}
        self.gpu_memo: GpuMemo = {}
        self.free_columns: dict[str, FreeColumns] = {}
        self.verdicts: dict[tuple[object, ...], RowVerdicts] = {}
        # The last request (held strongly: never mistaken for another) sized per threads per core.
        self.sized: tuple[PodRequest | None, dict[int, _Sizing | NumatopoError]] = (None, {})
        self.max_rows = rows
        self._rows_kept = 0

    def tables_of(
        self, topology: NumatopologySpec, state: NodeState | None = None, *, warm_only: bool = False
    ) -> Tables:
        """The shape's tables, from `state` (a node state of `topology`) where it holds them or its
        shape key. `warm_only`, here and below: nothing is built, else `NotWarmError`."""
        if warm_only and (state is None or state.topology is not topology or state.tables is None):
            raise NotWarmError("no hardware tables at hand")
        if state is None or state.topology is not topology:
            return self.tables.get(topology)
        return state.tables or self.tables.get(topology, state.shape_key)

    def layout_of(self, tables: Tables, *, warm_only: bool = False) -> RowLayout:
        layout = self.layouts.get(tables.key)
        if layout is None:
            if warm_only:
                raise NotWarmError("no row layout at hand")
            if len(self.layouts) >= self.tables.size:
                self.layouts.clear()
            layout = self.layouts[tables.key] = row_layout(tables)
        return layout

    def plan(
        self, tables: Tables, need: Need, options: TopologyOptions, *, floor: int, closest: bool
    ) -> Plan:
        key = (tables.key, need, options, floor, closest)
        plan = self.plans.get(key)
        if plan is None:
            if len(self.plans) >= 4096 or len(self.gpu_memo) >= 1 << 16:
                # A new scheduling epoch; cheaper than tracking recency per hit.
                self.plans.clear()
                self.gpu_memo.clear()
                self.verdicts.clear()
                self._rows_kept = 0
            plan = self.plans[key] = make_plan(
                tables, self.layout_of(tables), need, options, floor=floor, prefer_closest=closest
            )
        return plan

    def row_verdicts(
        self,
        tables: Tables,
        need: Need,
        options: TopologyOptions,
        *,
        floor: int,
        closest: bool,
        mix: WorkloadMix | None,
        warm_only: bool = False,
    ) -> RowVerdicts:
        """The verdicts kept for this plan under `mix` (the rank's row terms depend on it)."""
        key = (tables.key, need, options, floor, closest, mix or None)
        found = self.verdicts.get(key)
        if found is None and warm_only:
            raise NotWarmError("no verdicts kept for this plan")
        if found is None:
            plan = self.plan(tables, need, options, floor=floor, closest=closest)
            found = self.verdicts[key] = RowVerdicts(plan, mix or None)
        return found

    def keep_rows(self, adding: int) -> None:
        """Room for `adding` more rows' verdicts: past `rows`, all are dropped."""
        if self._rows_kept + adding > self.max_rows:
            self.verdicts.clear()
            self._rows_kept = 0
        self._rows_kept += adding

    def free_columns_of(self, tables: Tables) -> FreeColumns:
        found = self.free_columns.get(tables.key)
        if found is None:
            if len(self.free_columns) >= self.tables.size:
                self.free_columns.clear()
            found = self.free_columns[tables.key] = free_columns(tables, self.layout_of(tables))
        return found

    def row(self, tables: Tables, state: NodeState) -> bytes:
        """The state's row (cached on the state until it changes)."""
        return self.rows(tables, (state,))[0]

    def rows(
        self, tables: Tables, states: Iterable[NodeState], *, warm_only: bool = False
    ) -> list[bytes]:
        """`row` of each of `states` (nodes of `tables`' shape)."""
        layout = self.layout_of(tables, warm_only=warm_only)
        listed = list(states)
        out = cached_rows(listed, layout)
        if warm_only and None in out:
            raise NotWarmError("a row not laid out yet")
        for index, row in enumerate(out):
            if not row:
                out[index] = self._new_row(tables, layout, listed[index])
        return cast("list[bytes]", out)  # every one laid out now

    def _new_row(self, tables: Tables, layout: RowLayout, state: NodeState) -> bytes:
        cached = state.row_cache
        if cached is not None and cached[0] == layout:
            packed = cached[1]  # laid out by an engine before this one: the same row
        else:
            values = row_of(tables, layout, FreeView.from_state(tables, state))
            try:
                packed = np.array(values, dtype=np.int64).tobytes()
            except OverflowError:
                packed = b""  # amounts beyond 64 bits: such a node is refused as unreadable
        state.row_cache = (layout, packed)
        return packed


@dataclass(frozen=True)
class Decision:
    assignment: Assignment
    score: int  # 0..100, higher is better; see `numatopo_engine.scoring`


Pinned = Mapping[str, Sequence[int]]
"""Container name -> the GPU indices it holds for real (app containers and sidecars)."""

PinnedNics = Mapping[str, Sequence[str]]
"""Container name -> the names of the RDMA NICs it holds for real."""


def allocate(
    topology: NumatopologySpec,
    state: NodeState,
    request: PodRequest,
    node_name: str,
    *,
    engine: Engine | None = None,
    pinned: Pinned | None = None,
    pinned_nics: PinnedNics | None = None,
) -> Decision:
    """Place `request` on the node; raises UnsatisfiableError naming what did not fit where, or a
    pinned device (module docstring) that is not free or unlike the container's request."""
    engine = engine or Engine()
    outcome = _admitted(_decide(
        engine, topology, state, request, build=True, pinned=pinned or {},
        pinned_nics=pinned_nics or {},
    ))  # fmt: skip
    # Names only here, at the edge, and from the node's own spec.
    tables = engine.tables_of(topology, state)
    names = state.names if state.topology is topology else node_names(topology)
    containers = {name: _wire(entry, tables, names) for name, entry in outcome.entries.items()}
    assignment = Assignment(
        node=node_name,
        numa_nodes=bits(outcome.mask),
        policy=request.options.policy,
        containers=containers,
    )
    return Decision(assignment=assignment, score=outcome.score)


def evaluate(
    topology: NumatopologySpec,
    state: NodeState,
    request: PodRequest,
    *,
    engine: Engine | None = None,
) -> int:
    """The score `allocate` would give; raises UnsatisfiableError like it."""
    return _admitted(_decide(engine or Engine(), topology, state, request, build=False)).score


def _admitted(outcome: _Plan | Shortfall) -> _Plan:
    if isinstance(outcome, Shortfall):
        raise UnsatisfiableError(word(outcome), word(outcome, detail=False))
    return outcome


def evaluate_many(
    topology: NumatopologySpec,
    states: Sequence[NodeState],
    request: PodRequest,
    *,
    checked: bool = True,
    engine: Engine | None = None,
) -> list[int | Refusal]:
    """`evaluate` on each of `states`: the score or a `Refusal` (its error's text). Raises
    InvalidRequestError as `evaluate` does, ValueError for another shape's state (if `checked`)."""
    scored = score_many(topology, states, request, checked=checked, engine=engine)
    return [scored.refusal(i) if s < 0 else s for i, s in enumerate(scored.scores.tolist())]


class ShapeScores(NamedTuple):
    """`evaluate_many`'s answers as arrays, for callers that read only some refusals."""

    scores: npt.NDArray[np.int64]  # per state: its score, or -1 where it is refused
    # The refused states (indices into `states`) with the summary they share.
    refused: list[tuple[npt.NDArray[np.intp], str]]
    refusal: Callable[[int], Refusal]  # a refused state's full `Refusal`, by index
    # Per state: the node rank every choice between nodes reads (`packing`), -1 refused.
    rank: npt.NDArray[np.float64]


def score_many(
    topology: NumatopologySpec,
    states: Sequence[NodeState],
    request: PodRequest,
    *,
    checked: bool = True,
    engine: Engine | None = None,
    mix: WorkloadMix | None = None,
    hosts: Hosts | None = None,
    warm_only: bool = False,
) -> ShapeScores:
    """`evaluate_many` as arrays, refusals grouped by summary, with the node rank (`packing`, under
    `mix` and the `hosts` from `mix_hosts`) that the extender and `numatopo simulate` choose by.

    `warm_only`: the same answers from what `engine` keeps, else `NotWarmError` before anything is
    built; about a microsecond per node, so the extender may call it on its event loop."""
    engine = engine or Engine()
    tables = engine.tables_of(topology, states[0] if states else None, warm_only=warm_only)
    for state in states if checked else ():
        if state.topology is not topology and state.shape_key != tables.key:
            raise ValueError("evaluate_many: every state must be of the topology's hardware")
    options = request.options
    try:
        sizing = _sized_by(engine, request, tables)
    except UnsatisfiableError as exc:
        return _everywhere(Refusal.text(exc.reason), len(states))
    one_at_a_time = _memory_per_container(request, sizing)
    if (
        options.scope is Scope.CONTAINER
        or not states
        or (one_at_a_time and not _unit_total(request))
    ):
        # The pod's total need not fit the memory manager at once (`_decide`).
        if warm_only and states:
            raise NotWarmError("decided node by node")
        return _one_by_one(engine, topology, states, request)
    if warm_only and one_at_a_time:
        raise NotWarmError("confirmed container by container")
    verdicts = engine.row_verdicts(
        tables, sizing.total, options, floor=states[0].shared_floor,
        closest=_prefers_closest(topology), mix=mix, warm_only=warm_only,
    )  # fmt: skip
    slots = _row_slots(engine, tables, verdicts, states, mix=mix, warm_only=warm_only)
    if slots is None:
        return _one_by_one(engine, topology, states, request)
    scores = verdicts.score[slots]  # gathered: copies, not the kept verdicts
    codes = verdicts.summary[slots]
    ranks = verdicts.ranks(slots, hosts)
    # With memory decided per container (`_memory_per_container`) the pod's hint may hold the total
    # yet leave a container no memory the memory manager accepts: confirm one by one.
    confirmed: dict[int, Refusal] = {}
    if one_at_a_time:
        confirmed = _refused_alone(engine, topology, states, request, scores=scores, ranks=ranks)
    refused = _grouped_refusals(verdicts, codes, confirmed)

    def refusal(index: int) -> Refusal:
        if index in confirmed:
            return confirmed[index]
        return verdicts.refusal(int(slots[index]))

    return ShapeScores(scores, refused, refusal, ranks)


def _row_slots(
    engine: Engine,
    tables: Tables,
    verdicts: RowVerdicts,
    states: Sequence[NodeState],
    *,
    mix: WorkloadMix | None,
    warm_only: bool,
) -> npt.NDArray[np.intp] | None:
    """Each state's slot in `verdicts`, unseen rows decided; None for rows of another width."""
    layout = engine.layout_of(tables, warm_only=warm_only)
    slots = verdicts.known_slots(states, layout)
    if slots is not None:
        return slots
    if warm_only:
        raise NotWarmError("a row not laid out or not decided yet")
    rows_bytes = engine.rows(tables, states)
    if sum(map(len, rows_bytes)) != len(states) * verdicts.width * 8:
        return None
    plan = verdicts.plan

    def decide(rows: npt.NDArray[np.int64]) -> Decided:
        engine.keep_rows(rows.shape[0])
        return decide_rows(plan, rows, engine.gpu_memo, mix)

    return verdicts.slots(rows_bytes, decide)


def _refused_alone(
    engine: Engine,
    topology: NumatopologySpec,
    states: Sequence[NodeState],
    request: PodRequest,
    *,
    scores: npt.NDArray[np.int64],
    ranks: npt.NDArray[np.float64],
) -> dict[int, Refusal]:
    """The nodes `scores` admits that refuse the pod container by container, marked refused."""
    refused: dict[int, Refusal] = {}
    for index in np.flatnonzero(scores >= 0).tolist():
        outcome = _decide(engine, topology, states[index], request, build=False)
        if isinstance(outcome, Shortfall):
            refused[index] = Refusal.of(outcome)
            scores[index], ranks[index] = REFUSED, -1.0
    return refused


def _grouped_refusals(
    verdicts: RowVerdicts, codes: npt.NDArray[np.int64], confirmed: Mapping[int, Refusal]
) -> list[tuple[npt.NDArray[np.intp], str]]:
    """The refused nodes' indices by summary: the plan's (`codes`) and `confirmed`'s."""
    # A plan that refused no row yet (no summary kept) refuses none of these.
    at = (codes >= 0).nonzero()[0] if verdicts.summaries else codes[:0]
    found = codes[at]
    by_plan = [(at[found == c], verdicts.summaries[c]) for c in dict.fromkeys(found.tolist())]
    return by_plan + _by_summary(confirmed)


def _by_summary(refusals: Mapping[int, Refusal]) -> list[tuple[npt.NDArray[np.intp], str]]:
    grouped: dict[str, list[int]] = {}
    for index, why in refusals.items():
        grouped.setdefault(why.summary, []).append(index)
    return [(np.array(ix, dtype=np.intp), text) for text, ix in grouped.items()]


def _everywhere(refusal: Refusal, count: int) -> ShapeScores:
    return ShapeScores(
        np.full(count, REFUSED, dtype=np.int64),
        [(np.arange(count), refusal.summary)] if count else [],
        lambda _: refusal,
        np.full(count, float(REFUSED)),
    )


def _one_by_one(
    engine: Engine, topology: NumatopologySpec, states: Sequence[NodeState], request: PodRequest
) -> ShapeScores:
    """Each node decided alone; the rank is the score (no packing term)."""
    scores = np.full(len(states), REFUSED, dtype=np.int64)
    refusals: dict[int, Refusal] = {}
    for index, state in enumerate(states):
        plan = _decide(engine, topology, state, request, build=False)
        if isinstance(plan, Shortfall):
            refusals[index] = Refusal.of(plan)
        else:
            scores[index] = plan.score
    return ShapeScores(
        scores, _by_summary(refusals), refusals.__getitem__, scores.astype(np.float64)
    )


def _prefers_closest(topology: NumatopologySpec) -> bool:
    options = topology.policies.topology_manager_policy_options
    return options.get("prefer-closest-numa-nodes", "").lower() == "true"


class ShapeGroup(NamedTuple):
    """Nodes of one hardware shape among many: where they were, and their states."""

    topology: NumatopologySpec  # one of theirs (equal content)
    positions: list[int]
    states: list[NodeState]


def group_by_shape(nodes: Iterable[tuple[NumatopologySpec, NodeState]]) -> list[ShapeGroup]:
    """`nodes` grouped per hardware shape, first seen first (for `checked=False` calls)."""
    groups: dict[str, ShapeGroup] = {}
    for position, (topology, state) in enumerate(nodes):
        key = state.shape_key if state.topology is topology else shape_key(topology)
        group = groups.get(key)
        if group is None:
            group = groups[key] = ShapeGroup(topology, [], [])
        group.positions.append(position)
        group.states.append(state)
    return list(groups.values())


def mix_hosts(
    groups: Iterable[tuple[NumatopologySpec, Sequence[NodeState]]],
    mix: WorkloadMix,
    *,
    engine: Engine | None = None,
    warm_only: bool = False,
) -> Hosts:
    """How many of the nodes one decision judges (`groups`, per hardware shape) can host each shape
    of `mix` now, for `score_many(..., hosts=)`; unreadable rows host none."""
    engine = engine or Engine()
    counts = np.zeros(len(mix.shapes), dtype=np.int64)
    nodes = 0
    for topology, states in groups:
        nodes += len(states)
        if not mix or not states:
            continue
        tables = engine.tables_of(topology, states[0], warm_only=warm_only)
        width = engine.layout_of(tables, warm_only=warm_only).width
        packed = engine.rows(tables, states, warm_only=warm_only)
        if warm_only and tables.key not in engine.free_columns:
            raise NotWarmError("no free columns at hand")
        rows_bytes = [b for b in packed if len(b) == width * 8]
        if not rows_bytes:
            continue
        rows = np.frombuffer(b"".join(rows_bytes), dtype=np.int64).reshape(len(rows_bytes), width)
        columns = engine.free_columns_of(tables)
        gpus, cpus = columns.per_numa(rows)
        copies = shape_copies(
            gpus, cpus, columns.numa_gpu_capacity, mix, numa_cpu_capacity=columns.numa_cpu_capacity
        )
        counts += (copies > 0).sum(axis=0)
    return Hosts(mix, nodes, tuple(counts.tolist()))


# -- internals -------------------------------------------------------------------


@dataclass(slots=True)
class _Entry:
    cpus: list[int] = field(default_factory=list)
    exclusive: bool = True
    mask: int = 0
    gpus: list[int] = field(default_factory=list)
    nics: list[int] = field(default_factory=list)  # positions (`topology_tables`)
    # kind ("memory" or a huge page size) -> NUMA id -> bytes; zeros are not written out
    booked: dict[str, dict[int, int]] = field(default_factory=dict)


@dataclass(slots=True)
class _Plan:
    mask: int
    score: int
    entries: dict[str, _Entry]


def _wire(entry: _Entry, tables: Tables, names: NodeNames) -> ContainerAssignment:
    # Whole GPUs and MIG devices are one index space in the engine, two lists on the wire.
    whole = [g for g in entry.gpus if g not in tables.mig_parent]
    mig = [g for g in entry.gpus if g in tables.mig_parent]
    pages: dict[int, dict[str, int]] = {}
    for kind, booked in sorted(entry.booked.items()):
        for numa, amount in booked.items():
            if kind != "memory" and amount:
                pages.setdefault(numa, {})[kind] = amount
    return ContainerAssignment(
        cpus=CPUSet(entry.cpus),
        exclusive=entry.exclusive,
        mems=CPUSet(bits(entry.mask)),
        gpus=[names.gpu_name[g] for g in whole],
        gpu_indices=whole,
        mig=[names.gpu_name[g] for g in mig],
        mig_indices=mig,
        nics=[names.nic_name[n] for n in sorted(entry.nics)],
        memory={str(n): v for n, v in sorted(entry.booked.get("memory", {}).items()) if v},
        hugepages={str(n): pages[n] for n in sorted(pages)},
    )


class _Choice(NamedTuple):
    mask: int  # bit n = NUMA id n
    memory_mask: int
    score: int
    gpus: tuple[int, ...]
    preferred: bool = False  # the Topology Manager's merged hint is preferred


class _Filler(NamedTuple):
    """What one decision fills from; `free` shrinks as containers are filled."""

    engine: Engine
    tables: Tables
    free: FreeView
    options: TopologyOptions
    floor: int  # `NodeState.shared_floor`
    closest: bool  # `prefer-closest-numa-nodes`
    pins: Pinned
    nic_pins: _NicPins


class _Sizing(NamedTuple):
    apps: tuple[ContainerRequest, ...]  # app containers and sidecars
    needs: dict[str, Need]  # per app container
    excess: Need  # what the largest init container needs beyond the app containers
    total: Need  # the pod's total: app containers + that excess


def _decide(
    engine: Engine,
    topology: NumatopologySpec,
    state: NodeState,
    request: PodRequest,
    *,
    build: bool,
    pinned: Pinned | None = None,
    pinned_nics: PinnedNics | None = None,
) -> _Plan | Shortfall:
    tables = engine.tables_of(topology, state)
    options = request.options
    pins = pinned or {}
    try:
        sizing = _sized(request, tables)
        _check_pins(pins, sizing, tables, state)
        nic_pins = _nic_pins(pinned_nics or {}, sizing, topology, state)
    except UnsatisfiableError as exc:
        return Shortfall(Kind.REQUEST, options.policy.value, (), note=exc.reason)
    free = FreeView.from_state(tables, state)
    if pins:
        free.gpus &= {g for gpus in pins.values() for g in gpus}
    if nic_pins.all_pinned:
        free.nics &= nic_pins.held
    floor, closest = state.shared_floor, _prefers_closest(topology)
    filler = _Filler(engine, tables, free, options, floor, closest, pins, nic_pins)
    if options.scope is not Scope.POD:
        return _one_container_at_a_time(filler, request)
    per_container = _memory_per_container(request, sizing)
    plan = engine.plan(tables, sizing.total, options, floor=floor, closest=closest)
    unit_memory = _unit_total(request) or not per_container
    choice = _choice_on(engine, tables, plan, free, unit_memory=unit_memory)
    if isinstance(choice, Shortfall):
        return choice
    if per_container:
        # Admission depends on each container's memory, so the score path fills too.
        return _one_container_at_a_time(filler, request, pod_hint=choice)
    entries: dict[str, _Entry] = {}
    if not build:
        return _Plan(choice.mask, choice.score, entries)
    pool = list(choice.gpus)
    for container in sizing.apps:
        filled = _fill(
            filler, sizing.needs[container.name], choice=choice, gpu_pool=pool,
            pinned=pins.get(container.name), nic_pool=nic_pins.pool(container.name),
        )  # fmt: skip
        if isinstance(filled, Shortfall):
            return filled
        entries[container.name] = filled
    return _Plan(choice.mask, choice.score, entries)


def _unit_total(request: PodRequest) -> bool:
    """Scope `pod`: whether the pod's total (reuse counted) must fit the memory manager at once:
    with init containers a merged hint holds it, but `none` merges none (each container's own)."""
    return bool(request.init_containers) and request.options.policy is not PolicyName.NONE


def _memory_per_container(request: PodRequest, sizing: _Sizing) -> bool:
    """Scope `pod`: whether the memory manager's per-container choice (`Allocate` extends the pod's
    hint per container) can differ from the pod's: with init containers (reuse), or several memory
    containers under `none` or `best-effort`; a preferred hint holding the total holds each part."""
    if request.init_containers:
        return True
    if request.options.policy not in (PolicyName.NONE, PolicyName.BEST_EFFORT):
        return False
    return sum(1 for c in sizing.apps if sizing.needs[c.name].has_memory) > 1


def _check_held(
    kind: str,
    held: Mapping[str, Sequence[Hashable]],
    wanted: Mapping[str, int],
    known: Container[Hashable],
    free: Container[Hashable],
) -> list[str]:
    """Each app container holds as many devices of `kind` as it asks: known, free, its alone.
    Returns the app containers asking for some that hold none."""
    seen: set[Hashable] = set()
    for name, devices in held.items():
        count = wanted.get(name)
        if count is None:
            raise UnsatisfiableError(f"pinned {kind}s for {name}, which is no app container")
        if len(devices) != count or len(set(devices)) != len(devices):
            raise UnsatisfiableError(
                f"container {name} holds {kind}s {list(devices)} but asks for {count}"
            )
        for device in devices:
            if device not in known:
                raise UnsatisfiableError(f"container {name} holds {kind} {device}, unknown here")
            if device not in free or device in seen:
                raise UnsatisfiableError(
                    f"container {name} holds {kind} {device}, which is booked by another pod"
                )
            seen.add(device)
    return [name for name, count in wanted.items() if count and name not in held]


def _check_pins(pins: Pinned, sizing: _Sizing, tables: Tables, state: NodeState) -> None:
    """Pinned GPUs must be what the containers ask for, and free (the caller released the pod's)."""
    if not pins:
        return
    unpinned = _check_held(
        "GPU", pins, {c.name: c.gpus for c in sizing.apps}, tables.gpu_resource, state.free_gpus()
    )
    if unpinned:
        raise UnsatisfiableError(
            f"GPUs pinned for some containers but not for {', '.join(unpinned)}"
        )


def _sized_by(engine: Engine, request: PodRequest, tables: Tables) -> _Sizing:
    """`_sized`, kept per threads per core (all it reads of the hardware) for the last request."""
    last, sizings = engine.sized
    if last is not request:
        sizings = {}
        engine.sized = (request, sizings)
    found = sizings.get(tables.threads_per_core)
    if found is None:
        try:
            found = _sized(request, tables)
        except (InvalidRequestError, UnsatisfiableError) as exc:
            found = exc
        sizings[tables.threads_per_core] = found
    if isinstance(found, InvalidRequestError):
        raise InvalidRequestError(found.field, found.message)
    if isinstance(found, UnsatisfiableError):
        raise UnsatisfiableError(found.reason, found.summary)
    assert isinstance(found, _Sizing)
    return found


@dataclass(frozen=True, slots=True)
class _NicPins:
    """The NICs the pod's containers hold for real, as NIC positions."""

    by_container: Mapping[str, frozenset[int]] = field(default_factory=dict)
    held: frozenset[int] = frozenset()
    everything: frozenset[int] = frozenset()
    all_pinned: bool = False  # every container asking NICs holds pinned ones

    def pool(self, name: str, *, regular_init: bool = False) -> frozenset[int] | None:
        """The NICs container `name` may take, None for any free one (so for a regular init
        container: the container after it reuses them)."""
        if not self.by_container or regular_init:
            return None
        return self.by_container.get(name, self.everything - self.held)


def _nic_pins(
    pinned: PinnedNics, sizing: _Sizing, topology: NumatopologySpec, state: NodeState
) -> _NicPins:
    """Pinned NICs must be what the pinned containers ask for, and free."""
    if not pinned:
        return _NicPins()
    names = state.names if state.topology is topology else node_names(topology)
    unpinned = _check_held(
        "NIC", pinned, {c.name: c.nics for c in sizing.apps}, names.nic_position,
        state.free_nics(),
    )  # fmt: skip
    by_container = {
        name: frozenset(names.nic_position[n] for n in nics) for name, nics in pinned.items()
    }
    return _NicPins(
        by_container=by_container,
        held=frozenset(p for held in by_container.values() for p in held),
        everything=frozenset(range(len(names.nic_name))),
        all_pinned=not unpinned and not sizing.excess.nics,
    )


def _sized(request: PodRequest, tables: Tables) -> _Sizing:
    """The pod's needs (KEP-753): per resource, the larger of the app containers' and sidecars' sum
    and each regular init container's request plus the sidecars before it."""
    options = request.options
    sidecars = tuple(c for c in request.init_containers if c.restartable)
    apps = request.containers + sidecars
    needs = {c.name: _container_need(c, options, tables) for c in apps}
    empty = Need(
        cpu_mode=options.cpu,
        full_cores=options.smt is SmtMode.FULL_CORES and options.cpu is CpuMode.EXCLUSIVE,
    )
    running = empty  # the sidecars started so far
    init_needs: list[Need] = []
    for container in request.init_containers:
        need = _container_need(container, options, tables)
        if container.restartable:
            running = _combine(running, need)
        else:
            init_needs.append(_combine(running, need))
    pod_need = functools.reduce(_combine, needs.values(), empty)
    excess = empty  # what the largest init container needs beyond the app containers
    if init_needs:
        largest = functools.reduce(lambda x, y: _combine(x, y, max), init_needs)
        excess = _combine(largest, pod_need, lambda x, y: max(0, x - y))
    return _Sizing(apps, needs, excess, _combine(pod_need, excess))


@dataclass(slots=True)
class _Reusable:
    """What regular init containers hold that later containers take first: the kubelet's
    `cpusToReuse`, `devicesToReuse`, `initContainersReusableMemory` (per mask and kind)."""

    cpus: set[int] = field(default_factory=set)
    gpus: set[int] = field(default_factory=set)
    nics: set[int] = field(default_factory=set)  # positions (`topology_tables`)
    memory: dict[tuple[int, str], int] = field(default_factory=dict)
    # Which init entries hold the reusable memory of a (mask, kind), in order.
    holders: dict[tuple[int, str], list[_Entry]] = field(default_factory=dict)


def _one_container_at_a_time(
    filler: _Filler, request: PodRequest, pod_hint: _Choice | None = None
) -> _Plan | Shortfall:
    """Every container in the kubelet's order (init containers and sidecars, then app containers),
    each seeing what the earlier ones took: decided alone (scope `container`, `scope_container.go`)
    or with `pod_hint` (scope `pod`, `scope_pod.go`). Memory and reuse as docs/DESIGN.md, "The
    allocation engine" (init containers) tells; app containers and sidecars spend the reusable set,
    regular init containers add to it."""
    _, tables, free, options, _, _, pins, nic_pins = filler
    reusable = _Reusable()
    entries: dict[str, _Entry] = {}
    union = 0
    scores: list[int] = []
    order = [*request.init_containers, *request.containers]
    inits = {c.name for c in request.init_containers if not c.restartable}
    for index, container in enumerate(order):
        need = _container_need(container, options, tables)
        regular_init = container.name in inits
        # The next containers' CPU hints read where this one's CPUs land (`_fill_reusing`).
        read_later = regular_init or (pod_hint is None and index < len(order) - 1)
        only = pins.get(container.name)
        nic_pool = nic_pins.pool(container.name, regular_init=regular_init)
        if pod_hint is None:
            choice = _container_choice(filler, need, reusable, only, nic_pool)
        else:
            choice = pod_hint._replace(gpus=tuple(g for g in pod_hint.gpus if g in free.gpus))
        if isinstance(choice, Shortfall):
            return choice
        memory = _memory_of(filler, need, choice, reusable.memory)
        if memory is None:
            in_bytes = tuple(w for w in wanted_of(need) if w.in_bytes)
            return Shortfall(Kind.MEMORY, options.policy.value, in_bytes)
        choice = choice._replace(memory_mask=memory or choice.memory_mask)
        filled = _fill_reusing(
            filler, need, choice, reusable, only, nic_pool, regular_init=regular_init,
            kubelet_cpus=read_later,
        )  # fmt: skip
        if isinstance(filled, Shortfall):
            return filled
        entries[container.name] = filled
        if regular_init:
            _keep_for_reuse(reusable, filled, need)
            # Reused CPUs run the later containers; the init container holds none alone.
            filled.exclusive = False
            # Free to every later container: what is left of them stays free.
            free.cpus |= reusable.cpus
            free.gpus |= reusable.gpus
            free.nics |= reusable.nics
        union |= choice.mask
        scores.append(choice.score)
    _drop_handed_on(entries, [c.name for c in order])
    return _Plan(union, min(scores, default=100), entries)


def _container_choice(
    filler: _Filler,
    need: Need,
    reusable: _Reusable,
    only: Sequence[int] | None,
    nic_pool: frozenset[int] | None,
) -> _Choice | Shortfall:
    """One container's own hint under scope `container`, bound by and counting what it reuses, over
    the devices it may have (`only`: its pinned GPUs)."""
    engine, tables, free, options, floor, closest, _, _ = filler
    plan = _binding(
        engine.plan(tables, need, options, floor=floor, closest=closest), need, reusable
    )
    plan = reusing_memory(plan, reusable.memory)
    working = replace(
        free,
        gpus=free.gpus if only is None else free.gpus & set(only),
        nics=free.nics if nic_pool is None else free.nics & nic_pool,
    )
    return _choice_on(engine, tables, plan, working)


def _choice_on(
    engine: Engine, tables: Tables, plan: Plan, working: FreeView, *, unit_memory: bool = True
) -> _Choice | Shortfall:
    """`plan` decided on the one row of `working`."""
    row = np.array([row_of(tables, plan.layout, working)], dtype=np.int64)
    decided = decide_rows(plan, row, engine.gpu_memo, unit_memory=unit_memory)
    if decided.score[0] < 0:
        return shortfall(plan, decided, 0, row[0])
    return _Choice(decided.mask(0), decided.memory_mask(0), int(decided.score[0]),
                   decided.gpus[0], bool(decided.preferred[0]))  # fmt: skip


def _memory_of(
    filler: _Filler, need: Need, choice: _Choice, reusable: Mapping[tuple[int, str], int]
) -> int | None:
    """The memory manager's mask for one container, reuse counted (0: no memory; None: refused)."""
    _, tables, free, options, *_ = filler
    if not need.has_memory:
        return 0
    if len(tables.numa_ids) > FULL_SEARCH:
        # Beyond the kubelet's machines the decision's own (bounded) memory choice.
        return choice.memory_mask
    every = make_mask(tables.numa_ids)
    hint: int | None = choice.mask
    if options.policy is PolicyName.NONE or (
        options.policy is PolicyName.SINGLE_NUMA_NODE and choice.mask == every
    ):
        hint = None
    allocatable: dict[str, dict[int, int]] = {"memory": dict(tables.memory_capacity)}
    for size, _ in need.hugepages:
        allocatable[size] = {n: v for (n, s), v in tables.numa_hugepages.items() if s == size}
    view = MemoryView(tables.numa_ids, allocatable, free.memory, free.groups)
    request = {"memory": need.memory_bytes, **dict(need.hugepages)}
    return memory_manager_mask(view, request, hint, choice.preferred, reusable)


def _matching(devices: Iterable[int], wanted: str | None, resource: Mapping[int, str]) -> list[int]:
    """Those of `devices` (GPUs or NICs) of the resource `wanted` (any when None), ascending."""
    return sorted(d for d in devices if wanted in (None, resource[d]))


def _binding(plan: Plan, need: Need, reusable: _Reusable) -> Plan:
    """`plan` with the CPU, device and NIC providers' hints bound to the NUMA nodes of the reusable
    CPUs, GPUs and NICs the container takes (the kubelet's hint generators with reusable ones);
    their narrowest width unchanged."""
    tables = plan.tables
    exclusive = need.cpu_mode is CpuMode.EXCLUSIVE and need.cpus
    cpus = {tables.cpu_numa[c] for c in reusable.cpus} if exclusive else set()
    gpus = _matching(reusable.gpus, need.gpu_resource, tables.gpu_resource) if need.gpus else []
    nics = _matching(reusable.nics, need.nic_resource, tables.nic_resource) if need.nics else []
    gpu_numa = {n for g in gpus if (n := tables.gpu_numa[g]) is not None}
    nic_numa = {n for x in nics if (n := tables.nic_numa[x]) is not None}
    if not (cpus or gpu_numa or nic_numa):
        return plan
    device = accelerator_word(need.gpu_resource)
    providers = []
    for provider in plan.providers:
        name = provider.wanted[0].resource if provider.wanted and not provider.memory else ""
        # A later key wins: CPUs before the device's word before NICs.
        numa = {"NICs": nic_numa, device: gpu_numa, "CPUs": cpus}.get(name, set())
        positions = [plan.position_of[n] for n in numa if n in plan.position_of]
        bound = provider.holds & plan.member[:, positions].all(axis=1)
        providers.append(replace(provider, holds=bound) if numa else provider)
    return replace(plan, providers=tuple(providers))


def _fill_reusing(  # noqa: PLR0917 (the fill's inputs, one container's)
    filler: _Filler,
    need: Need,
    choice: _Choice,
    reusable: _Reusable,
    pinned: Sequence[int] | None,
    nic_pool: frozenset[int] | None,
    *,
    regular_init: bool,
    kubelet_cpus: bool,
) -> _Entry | Shortfall:
    """`_fill`, the reusable devices and memory taken first as the kubelet's managers take them.
    CPUs come from free and reusable ones alike, spread as the CPU manager's `allocateCPUs` spreads
    them (`_aligned_reusing`), when reusable ones are in the mask or `kubelet_cpus` (later
    containers' hints read where they land): then also outside the mask for what does not fit."""
    tables, free = filler.tables, filler.free
    numa_ids = set(bits(choice.mask))
    aligned_cpus: list[int] = []
    if (
        need.cpu_mode is CpuMode.EXCLUSIVE
        and need.cpus
        and not need.full_cores
        and (kubelet_cpus or any(tables.cpu_numa[c] in numa_ids for c in reusable.cpus))
    ):
        aligned_cpus = _aligned_reusing(tables, free.cpus, reusable.cpus, numa_ids, need.cpus)
        if kubelet_cpus and len(aligned_cpus) < need.cpus:
            others = set(tables.numa_ids) - numa_ids
            aligned_cpus += _aligned_reusing(
                tables, free.cpus - set(aligned_cpus), reusable.cpus, others,
                need.cpus - len(aligned_cpus),
            )  # fmt: skip
    pooled = reusable.nics if nic_pool is None else reusable.nics & nic_pool
    reused_nics = _matching(pooled, need.nic_resource, tables.nic_resource)[: need.nics]
    gpus = list(pinned) if pinned else _gpus_reusing(filler, need, choice, reusable)
    _release_reused_memory(free, need, choice.memory_mask, reusable, spend=not regular_init)
    rest = replace(need, cpus=need.cpus - len(aligned_cpus), nics=need.nics - len(reused_nics))
    free.cpus.difference_update(aligned_cpus)
    free.nics.difference_update(reused_nics)
    entry = _fill(
        filler, rest, choice=choice, gpu_pool=list(gpus), pinned=gpus or None, nic_pool=nic_pool
    )
    if isinstance(entry, Shortfall):
        return entry
    if aligned_cpus:
        entry.cpus = sorted([*aligned_cpus, *entry.cpus])
    entry.nics = sorted([*reused_nics, *entry.nics])
    reusable.cpus.difference_update(entry.cpus)
    reusable.gpus.difference_update(entry.gpus)
    reusable.nics.difference_update(entry.nics)
    return entry


def _aligned_reusing(
    tables: Tables, pool: set[int], reusable: set[int], numa_ids: set[int], count: int
) -> list[int]:
    """Up to `count` CPUs of `pool` (free and reusable) inside `numa_ids`, spread over NUMA nodes as
    the packed `takeByTopology` does: nodes wholly in the pool first when the request is that big,
    then fewest in the pool first, ties by id. Within a node reusable ones go first, packed by core
    (the node, which binds later hints, is the kubelet's)."""
    per_numa = {n: {c for c in pool if tables.cpu_numa.get(c) == n} for n in sorted(numa_ids)}
    left = min(count, sum(len(cpus) for cpus in per_numa.values()))
    taken: dict[int, int] = {}
    for numa in sorted(per_numa, key=lambda n: (len(per_numa[n]), n)):
        size = len(per_numa[numa])
        # Wholly free: every online CPU (reserved ones too: the kubelet's topology sees them).
        if size and size == tables.numa_online.get(numa, 0) and left >= size:
            taken[numa] = size
            left -= size
    rest = {n: len(cpus) - taken.get(n, 0) for n, cpus in per_numa.items()}
    for numa in sorted((n for n in rest if rest[n]), key=lambda n: (rest[n], n)):
        more = min(left, rest[numa])
        taken[numa] = taken.get(numa, 0) + more
        left -= more
    out: list[int] = []
    for numa, k in taken.items():
        mine = per_numa[numa]
        reused = mine & reusable
        # Packed by core like any exclusive CPUs, the reusable ones first.
        first = take_cpus(tables, reused, {numa}, min(k, len(reused)), full_cores=False) or []
        second = take_cpus(tables, mine - set(first), {numa}, k - len(first), full_cores=False)
        out += first + (second or [])
    return sorted(out)


def _gpus_reusing(filler: _Filler, need: Need, choice: _Choice, reusable: _Reusable) -> list[int]:
    """The reusable GPUs, then the best of the decision's, of the aligned free ones, then any."""
    tables, free = filler.tables, filler.free
    if not need.gpus:
        return []
    picked = _matching(reusable.gpus, need.gpu_resource, tables.gpu_resource)[: need.gpus]
    missing = need.gpus - len(picked)
    if not missing:
        return picked
    decided = frozenset(g for g in choice.gpus if g in free.gpus and g not in reusable.gpus)
    chosen = _best_gpus(filler, decided, missing)
    if chosen is not None:
        return picked + list(chosen)
    numa_ids = set(bits(choice.mask))
    others = _matching(free.gpus - reusable.gpus, need.gpu_resource, tables.gpu_resource)
    aligned = frozenset(g for g in others if tables.gpu_numa[g] in numa_ids)
    if len(aligned) >= missing:
        return picked + list(_best_gpus(filler, aligned, missing) or ())
    # Other NUMA nodes' before those on none (the device manager's `noAffinity`, last).
    unaligned = sorted(
        (g for g in others if g not in aligned), key=lambda g: (tables.gpu_numa[g] is None, g)
    )
    return picked + sorted(aligned) + unaligned[: missing - len(aligned)]


def _best_gpus(filler: _Filler, pool: frozenset[int], count: int) -> tuple[int, ...] | None:
    """The best `count` of `pool` under the pod's `gpu-links`, else any `count` of them."""
    engine, tables, _, options, *_ = filler
    return choose_gpus(tables, pool, count, options.gpu_links, engine.gpu_memo) or choose_gpus(
        tables, pool, count, GpuLinksMode.IGNORE
    )


def _release_reused_memory(
    free: FreeView, need: Need, memory_mask: int, reusable: _Reusable, *, spend: bool
) -> None:
    """Give back to `free` what init containers booked on exactly this container's NUMA nodes, up to
    its request, shrinking their entries (`updateInitContainersMemoryBlocks`) so the pod books it
    once. `spend`: false for a regular init container, whose later peers may reuse the same bytes
    (`updatePodReusableMemory` only raises it)."""
    for kind, amount in [("memory", need.memory_bytes), *need.hugepages]:
        key = (memory_mask, kind)
        reuse = min(reusable.memory.get(key, 0), amount)
        if reuse <= 0:
            continue
        if spend:
            reusable.memory[key] -= reuse
        left = reuse
        freed = free.memory.setdefault(kind, {})
        for holder in reusable.holders.get(key, []):
            booked = holder.booked.get(kind, {})
            # Booked in NUMA id order, so given back from the highest id.
            for numa in sorted(booked, reverse=True):
                back = min(left, booked[numa])
                if not back:
                    continue
                left -= back
                booked[numa] -= back
                freed[numa] = freed.get(numa, 0) + back
            if not left:
                break


def _keep_for_reuse(reusable: _Reusable, entry: _Entry, need: Need) -> None:
    """A regular init container's CPUs, devices and memory (largest per mask) become reusable."""
    if need.cpu_mode is CpuMode.EXCLUSIVE:
        reusable.cpus.update(entry.cpus)
    reusable.gpus.update(entry.gpus)
    reusable.nics.update(entry.nics)
    for kind, amount in [("memory", need.memory_bytes), *need.hugepages]:
        if amount:
            key = (entry.mask, kind)
            reusable.memory[key] = max(reusable.memory.get(key, 0), amount)
            reusable.holders.setdefault(key, []).append(entry)


def _drop_handed_on(entries: dict[str, _Entry], order: Sequence[str]) -> None:
    """Devices an init container handed on stay on the later container only (booked once)."""
    later_gpus: set[int] = set()
    later_nics: set[int] = set()
    for name in reversed(order):
        entry = entries[name]
        gpus, nics = entry.gpus, entry.nics
        entry.gpus = [g for g in gpus if g not in later_gpus]
        entry.nics = [x for x in nics if x not in later_nics]
        later_gpus.update(gpus)
        later_nics.update(nics)


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


def _combine(a: Need, b: Need, amounts: Callable[[int, int], int] = operator.add) -> Need:
    """`a` and `b` resource by resource (`amounts`), with `a`'s CPU mode and either's resources."""
    pages = dict(a.hugepages)
    for size, amount in b.hugepages:
        pages[size] = amounts(pages.get(size, 0), amount)
    return Need(
        cpus=amounts(a.cpus, b.cpus),
        cpu_mode=a.cpu_mode,
        full_cores=a.full_cores,
        memory_bytes=amounts(a.memory_bytes, b.memory_bytes),
        hugepages=tuple(sorted((s, v) for s, v in pages.items() if v > 0)),
        gpus=amounts(a.gpus, b.gpus),
        gpu_resource=a.gpu_resource or b.gpu_resource,
        nics=amounts(a.nics, b.nics),
        nic_resource=a.nic_resource or b.nic_resource,
    )


def _fill(
    filler: _Filler,
    need: Need,
    *,
    choice: _Choice,
    gpu_pool: list[int],
    pinned: Sequence[int] | None,
    nic_pool: frozenset[int] | None,
) -> _Entry | Shortfall:
    """Concrete resources for one container, taken out of `free`: inside `choice.mask` first, the
    rest of an unaligned placement outside it; NICs only from `nic_pool` when given."""
    _, tables, free, options, *_ = filler
    mask = choice.mask
    numa_ids = bits(mask)
    entry = _Entry(mask=mask, exclusive=need.cpu_mode is CpuMode.EXCLUSIVE)
    policy = options.policy.value
    if pinned:
        if not set(pinned) <= set(gpu_pool):
            return Shortfall(Kind.REQUEST, policy, (), note=f"pinned GPUs {list(pinned)} "
                             f"are not all in the pod's set {sorted(gpu_pool)}")  # fmt: skip
        entry.gpus = list(pinned)
    elif need.gpus:
        picked = _best_gpus(filler, frozenset(gpu_pool), need.gpus)
        if picked is None:
            asked = accelerator_word(need.gpu_resource)
            return Shortfall(Kind.REQUEST, policy, (), note=f"{need.gpus} {asked} requested, "
                             f"{len(gpu_pool)} left of the pod's set")  # fmt: skip
        entry.gpus = list(picked)
    for gpu in entry.gpus:
        gpu_pool.remove(gpu)
        free.gpus.discard(gpu)
    if need.nics:
        pooled = free.nics if nic_pool is None else free.nics & nic_pool
        matching = _matching(pooled, need.nic_resource, tables.nic_resource)
        nics = choose_nics(tables, matching, need.nics, gpus=entry.gpus, numa_ids=set(numa_ids))
        if nics is None:
            return Shortfall(Kind.REQUEST, policy, (), note=f"{need.nics} NICs requested, "
                             f"{len(matching)} free")  # fmt: skip
        entry.nics = nics
        free.nics.difference_update(nics)
    if need.cpu_mode is CpuMode.EXCLUSIVE and need.cpus:
        # Within a mask wider than the GPUs' NUMA nodes, the CPUs next to the GPUs come first.
        near = sorted({n for g in entry.gpus if (n := tables.gpu_numa.get(g)) is not None}
                      & set(numa_ids))  # fmt: skip
        cpus = None
        if near and len(near) < len(numa_ids):
            cpus = take_cpus(tables, free.cpus, near, need.cpus, full_cores=need.full_cores)
        if cpus is None:
            cpus = _take_cpus(tables, free.cpus, numa_ids, need.cpus, full_cores=need.full_cores)
        if cpus is None:
            return Shortfall(Kind.REQUEST, policy, (), note=f"{need.cpus} exclusive CPUs "
                             f"requested, fewer free on NUMA {format_mask(mask)}")  # fmt: skip
        entry.cpus = cpus
        free.cpus.difference_update(cpus)
    elif need.cpu_mode is CpuMode.NUMA:
        entry.cpus = sorted(c for c in free.cpus if tables.cpu_numa[c] in numa_ids)
    memory_ids = bits(choice.memory_mask)
    if need.has_memory:
        entry.mask = choice.memory_mask
        booked = _book_memory(free, need, entry, memory_ids)
        if booked is not None:
            return Shortfall(Kind.REQUEST, policy, (), note=booked)
        free.join_group(memory_ids)
    return entry


def _take_cpus(
    tables: Tables, free: set[int], numa_ids: list[int], count: int, *, full_cores: bool
) -> list[int] | None:
    """`count` CPUs, as many as fit inside `numa_ids` first, the rest from other NUMA nodes."""
    others = [n for n in tables.numa_ids if n not in numa_ids]
    for taken in range(count, -1, -1):
        first = take_cpus(tables, free, numa_ids, taken, full_cores=full_cores)
        if first is None:
            continue
        rest = take_cpus(tables, free - set(first), others, count - taken, full_cores=full_cores)
        if rest is not None:
            return sorted(first + rest)
        return None
    return None


def _book_memory(free: FreeView, need: Need, entry: _Entry, numa_ids: list[int]) -> str | None:
    """Book memory and huge pages over `numa_ids` in id order; the reason when they do not fit."""
    for kind, amount in [("memory", need.memory_bytes), *need.hugepages]:
        booked = book_bytes(free.memory.get(kind, {}), numa_ids, amount)
        if booked is None:
            name = kind if kind == "memory" else f"hugepages-{kind}"
            where = ",".join(map(str, numa_ids))
            return f"{name}: {format_bytes(amount)} requested, less free on NUMA {where}"
        entry.booked[kind] = booked
    return None
