"""The kubelet's own Topology Manager test tables, transcribed as data, plus hint rows.

Each merge row gives the providers' hint lists per resource (None = the provider or the
resource has no preference, [] = no possible alignment), the machine's NUMA nodes, the
policy, and the expected merged hint. The kubelet's tests check only the hint; `admit`
follows from the policy (best-effort admits, the others admit a preferred hint).
"""

from __future__ import annotations

from dataclasses import dataclass

from reference import Hint, mask_of


def h(*ids: int, p: bool = True) -> Hint:
    """A hint on the NUMA nodes `ids` (no ids: the nil mask)."""
    return Hint(mask_of(ids) if ids else None, p)


NIL_T = Hint(None, True)
NIL_F = Hint(None, False)


@dataclass(frozen=True)
class MergeRow:
    name: str
    source: str
    numa_ids: tuple[int, ...]
    policy: str
    providers: tuple[tuple[Hint, ...] | None, ...]
    mask: int | None
    preferred: bool
    distances: dict[tuple[int, int], int] | None = None
    prefer_closest: bool = False

    @property
    def admit(self) -> bool:
        return True if self.policy == "best-effort" else self.preferred

    def provider_lists(self) -> list[list[Hint] | None]:
        return [None if p is None else list(p) for p in self.providers]


def _dist(rows: dict[int, tuple[int, ...]]) -> dict[tuple[int, int], int]:
    return {(a, b): d for a, row in rows.items() for b, d in enumerate(row)}


# pkg/kubelet/cm/topologymanager/policy_test.go: commonNUMAInfoFourNodes, commonNUMAInfoEightNodes
FOUR = (0, 1, 2, 3)
EIGHT = (0, 1, 2, 3, 4, 5, 6, 7)
EIGHT_DISTANCES = _dist(
    {
        0: (10, 11, 12, 12, 30, 30, 30, 30),
        1: (11, 10, 12, 12, 30, 30, 30, 30),
        2: (12, 12, 10, 11, 30, 30, 30, 30),
        3: (12, 12, 11, 10, 30, 30, 30, 30),
        4: (30, 30, 30, 30, 10, 11, 12, 12),
        5: (30, 30, 30, 30, 11, 10, 12, 12),
        6: (30, 30, 30, 30, 12, 12, 10, 11),
        7: (30, 30, 30, 30, 12, 12, 13, 10),  # sic: asymmetric in the kubelet's table
    }
)

Case = tuple[str, tuple[tuple[Hint, ...] | None, ...], tuple[int, ...] | None, bool]
# (name, providers, expected ids (None = nil mask; "ALL" rows use the default), preferred)

ALL: tuple[int, ...] = (-1,)  # placeholder: the machine's default (every node) mask

# pkg/kubelet/cm/topologymanager/policy_test.go: commonPolicyMergeTestCases
COMMON: list[Case] = [
    ("Two providers, 1 hint each, same mask, both preferred 1/2", ((h(0),), (h(0),)), (0,), True),
    ("Two providers, 1 hint each, same mask, both preferred 2/2", ((h(1),), (h(1),)), (1,), True),
    ("Two providers, 1 no hints, 1 single hint preferred 1/2", (None, (h(0),)), (0,), True),
    ("Two providers, 1 no hints, 1 single hint preferred 2/2", (None, (h(1),)), (1,), True),
    (
        "Two providers, 1 with 2 hints, 1 with single hint matching 1/2",
        ((h(0), h(1)), (h(0),)),
        (0,),
        True,
    ),
    (
        "Two providers, 1 with 2 hints, 1 with single hint matching 2/2",
        ((h(0), h(1)), (h(1),)),
        (1,),
        True,
    ),
    (
        "Two providers, both with 2 hints, matching narrower preferred hint from both",
        ((h(0), h(1)), (h(0), h(0, 1, p=False))),
        (0,),
        True,
    ),
    (
        "Ensure less narrow preferred hints are chosen over narrower non-preferred hints",
        ((h(1), h(0, 1, p=False)), (h(0), h(1), h(0, 1, p=False))),
        (1,),
        True,
    ),
    (
        "Multiple resources, same provider",
        ((h(1), h(0, 1, p=False)), (h(0), h(1), h(0, 1, p=False))),
        (1,),
        True,
    ),
]

# pkg/kubelet/cm/topologymanager/policy_test.go: (*bestEffortPolicy).mergeTestCases
BEST_EFFORT: list[Case] = [
    (
        "Two providers, 2 hints each, same mask (some with different bits), same preferred",
        ((h(0, 1), h(0, 2)), (h(0, 1), h(0, 2))),
        (0, 1),
        True,
    ),
    ("TopologyHint not set", (), ALL, True),
    ("HintProvider returns empty non-nil map[string][]TopologyHint", (None,), ALL, True),
    ("HintProvider returns -nil map[string][]TopologyHint from provider", (None,), ALL, True),
    ("HintProvider returns empty non-nil map ... from provider", ((),), ALL, False),
    (
        "Single TopologyHint with Preferred as true and NUMANodeAffinity as nil",
        ((NIL_T,),),
        ALL,
        True,
    ),
    (
        "Single TopologyHint with Preferred as false and NUMANodeAffinity as nil",
        ((NIL_F,),),
        ALL,
        False,
    ),
    ("Two providers, 1 hint each, no common mask", ((h(0),), (h(1),)), ALL, False),
    (
        "Two providers, 1 hint each, same mask, 1 preferred, 1 not 1/2",
        ((h(0),), (h(0, p=False),)),
        (0,),
        False,
    ),
    (
        "Two providers, 1 hint each, same mask, 1 preferred, 1 not 2/2",
        ((h(1),), (h(1, p=False),)),
        (1,),
        False,
    ),
    (
        "Two providers, 1 hint each, 1 wider mask, both preferred 1/2",
        ((h(0),), (h(0, 1),)),
        (0,),
        False,
    ),
    (
        "Two providers, 1 with 2 hints, 1 with single non-preferred hint matching",
        ((h(0), h(1)), (h(0, 1, p=False),)),
        (0,),
        False,
    ),
    (
        "Two providers, 1 hint each, 1 wider mask, both preferred 2/2",
        ((h(1),), (h(0, 1),)),
        (1,),
        False,
    ),
    (
        "bestNonPreferredAffinityCount (1)",
        ((h(0, 1, 2, 3, p=False), h(0, 1, p=False)), (h(0, 1, p=False),)),
        (0, 1),
        False,
    ),
    (
        "bestNonPreferredAffinityCount (2)",
        ((h(0, 1, 2, 3, p=False), h(0, 1, p=False)), (h(0, 3, p=False),)),
        (0, 3),
        False,
    ),
    (
        "bestNonPreferredAffinityCount (3)",
        ((h(0, 1, 2, 3, p=False), h(0, 1, p=False)), (h(1, 2, p=False),)),
        (1, 2),
        False,
    ),
    (
        "bestNonPreferredAffinityCount (4)",
        ((h(0, 1, 2, 3, p=False), h(0, 1, p=False)), (h(2, 3, p=False),)),
        (2, 3),
        False,
    ),
]

_BNPAC5 = ((h(0, 1, 2, 3, p=False), h(0, 1, p=False)), (h(1, 2, p=False), h(2, 3, p=False)))
_BNPAC6 = (
    (h(0, 1, 2, 3, p=False), h(0, 1, p=False)),
    (h(1, 2, 3, p=False), h(1, 2, p=False), h(1, 3, p=False), h(2, 3, p=False)),
)

# pkg/kubelet/cm/topologymanager/policy_test.go: (*bestEffortPolicy).mergeTestCasesNoPolicies
BEST_EFFORT_NARROWEST: list[Case] = [
    ("bestNonPreferredAffinityCount (5)", _BNPAC5, (1, 2), False),
    ("bestNonPreferredAffinityCount (6)", _BNPAC6, (1, 2), False),
]

# pkg/kubelet/cm/topologymanager/policy_test.go: (*bestEffortPolicy).mergeTestCasesClosestNUMA
BEST_EFFORT_CLOSEST: list[Case] = [
    (
        "Two providers, 2 hints each, same mask (some with different bits), same preferred",
        ((h(0, 4), h(0, 2)), (h(0, 4), h(0, 2))),
        (0, 2),
        True,
    ),
    ("Two providers, 2 hints each, different mask", ((h(4), h(0, 2)), (h(4), h(0, 2))), (4,), True),
    ("bestNonPreferredAffinityCount (5)", _BNPAC5, (2, 3), False),
    ("bestNonPreferredAffinityCount (6)", _BNPAC6, (2, 3), False),
]

# pkg/kubelet/cm/topologymanager/policy_test.go: (*singleNumaNodePolicy).mergeTestCases
SINGLE_NUMA_NODE: list[Case] = [
    ("TopologyHint not set", (), None, True),
    ("HintProvider returns empty non-nil map[string][]TopologyHint", (None,), None, True),
    ("HintProvider returns -nil map[string][]TopologyHint from provider", (None,), None, True),
    ("HintProvider returns empty non-nil map ... from provider", ((),), None, False),
    (
        "Single TopologyHint with Preferred as true and NUMANodeAffinity as nil",
        ((NIL_T,),),
        None,
        True,
    ),
    (
        "Single TopologyHint with Preferred as false and NUMANodeAffinity as nil",
        ((NIL_F,),),
        None,
        False,
    ),
    ("Two providers, 1 hint each, no common mask", ((h(0),), (h(1),)), None, False),
    (
        "Two providers, 1 hint each, same mask, 1 preferred, 1 not 1/2",
        ((h(0),), (h(0, p=False),)),
        None,
        False,
    ),
    (
        "Two providers, 1 hint each, same mask, 1 preferred, 1 not 2/2",
        ((h(1),), (h(1, p=False),)),
        None,
        False,
    ),
    (
        "Two providers, 1 with 2 hints, 1 with single non-preferred hint matching",
        ((h(0), h(1)), (h(0, 1, p=False),)),
        None,
        False,
    ),
    (
        "Single NUMA hint generation",
        ((h(0, 1),), (h(0), h(1), h(0, 1, p=False))),
        None,
        False,
    ),
    ("One no-preference provider", ((h(0), h(1), h(0, 1, p=False)), None), (0,), True),
]


def _rows(
    cases: list[Case],
    source: str,
    numa_ids: tuple[int, ...],
    policy: str,
    *,
    distances: dict[tuple[int, int], int] | None = None,
) -> list[MergeRow]:
    out = []
    for name, providers, ids, preferred in cases:
        if ids is None:
            mask = None
        elif ids == ALL:
            mask = mask_of(numa_ids)
        else:
            mask = mask_of(ids)
        out.append(
            MergeRow(
                name=name,
                source=source,
                numa_ids=numa_ids,
                policy=policy,
                providers=providers,
                mask=mask,
                preferred=preferred,
                distances=distances,
                prefer_closest=distances is not None,
            )
        )
    return out


# How the kubelet's tests run the tables (policy_best_effort_test.go: TestPolicyBestEffortMerge
# on four nodes, TestPolicyBestEffortMergeClosestNUMA on eight with prefer-closest;
# policy_single_numa_node_test.go: TestPolicySingleNumaNodeMerge on four nodes;
# policy_restricted_test.go: the restricted policy embeds best-effort's merge, so the
# best-effort tables hold with admit = preferred).
MERGE_ROWS: list[MergeRow] = [
    *_rows(COMMON, "policy_test.go common / best-effort", FOUR, "best-effort"),
    *_rows(BEST_EFFORT, "policy_test.go best-effort", FOUR, "best-effort"),
    *_rows(BEST_EFFORT_NARROWEST, "policy_test.go best-effort no options", FOUR, "best-effort"),
    *_rows(
        COMMON, "policy_test.go common / closest", EIGHT, "best-effort", distances=EIGHT_DISTANCES
    ),
    *_rows(
        BEST_EFFORT,
        "policy_test.go best-effort / closest",
        EIGHT,
        "best-effort",
        distances=EIGHT_DISTANCES,
    ),
    *_rows(
        BEST_EFFORT_CLOSEST,
        "policy_test.go closest",
        EIGHT,
        "best-effort",
        distances=EIGHT_DISTANCES,
    ),
    *_rows(COMMON, "policy_test.go common / restricted", FOUR, "restricted"),
    *_rows(BEST_EFFORT, "policy_test.go best-effort / restricted", FOUR, "restricted"),
    *_rows(BEST_EFFORT_NARROWEST, "policy_test.go no options / restricted", FOUR, "restricted"),
    *_rows(COMMON, "policy_test.go common / single-numa-node", FOUR, "single-numa-node"),
    *_rows(SINGLE_NUMA_NODE, "policy_test.go single-numa-node", FOUR, "single-numa-node"),
]


# pkg/kubelet/cm/topologymanager/policy_test.go: TestMaxOfMinAffinityCounts
MAX_OF_MIN_ROWS: list[tuple[tuple[tuple[Hint, ...], ...], int]] = [
    ((), 0),
    (((Hint(0, True),),), 0),
    (((h(0),),), 1),
    (((h(0, 1),),), 2),
    (((h(0, 1), h(0, 1, 2)),), 2),
    (((h(0, 1), h(0, 1, 2)), (h(0, 1, 2),)), 3),
    (((h(0, 1), h(0, 1, 2)), (h(0, 1, 2), h(0, 1, 2, 3))), 3),
]


# --- hint providers (own rows, marked OWN: derived by hand from the Go code) ----------

GiB = 2**30


@dataclass(frozen=True)
class MemoryRow:
    name: str
    numa_ids: tuple[int, ...]
    allocatable: dict[str, dict[int, int]]
    free: dict[str, dict[int, int]]
    groups: dict[int, tuple[int, ...]]
    assignments: dict[int, int]
    request: dict[str, int]
    hints: tuple[Hint, ...]


def _mem(per_node: dict[int, int]) -> dict[str, dict[int, int]]:
    return {"memory": dict(per_node)}


_TWO_FRESH = _mem({0: 4 * GiB, 1: 4 * GiB})

# OWN rows for memorymanager/policy_static.go calculateHints (groups = Cells).
MEMORY_ROWS: list[MemoryRow] = [
    MemoryRow("OWN fresh, fits one node", (0, 1), _TWO_FRESH, _TWO_FRESH, {}, {},
              {"memory": 2 * GiB}, (h(0), h(1), h(0, 1, p=False))),
    MemoryRow("OWN fresh, needs both nodes", (0, 1), _TWO_FRESH, _TWO_FRESH, {}, {},
              {"memory": 6 * GiB}, (h(0, 1),)),
    MemoryRow("OWN node 0 used alone: no cross-NUMA mask with it", (0, 1), _TWO_FRESH,
              _mem({0: 1 * GiB, 1: 4 * GiB}), {0: (0,)}, {0: 1},
              {"memory": 2 * GiB}, (h(1),)),
    MemoryRow("OWN nodes 0+1 grouped: single-node masks refused, min count stays 1",
              (0, 1), _TWO_FRESH, _mem({0: 2 * GiB, 1: 2 * GiB}), {0: (0, 1), 1: (0, 1)},
              {0: 1, 1: 1}, {"memory": 1 * GiB}, (h(0, 1, p=False),)),
    MemoryRow("OWN group 0+1 on three nodes: only {2} and the group itself",
              (0, 1, 2), _mem({0: 4 * GiB, 1: 4 * GiB, 2: 4 * GiB}),
              _mem({0: 2 * GiB, 1: 2 * GiB, 2: 4 * GiB}), {0: (0, 1), 1: (0, 1)},
              {0: 1, 1: 1}, {"memory": 1 * GiB}, (h(2), h(0, 1, p=False))),
    MemoryRow("OWN hugepages decide the minimum",
              (0, 1), {"memory": {0: 4 * GiB, 1: 4 * GiB}, "hugepages-1Gi": {0: GiB, 1: GiB}},
              {"memory": {0: 4 * GiB, 1: 4 * GiB}, "hugepages-1Gi": {0: GiB, 1: GiB}}, {}, {},
              {"memory": GiB, "hugepages-1Gi": 2 * GiB}, (h(0, 1),)),
    MemoryRow("OWN allocatable never suffices: no hints", (0, 1), _TWO_FRESH, _TWO_FRESH, {},
              {}, {"memory": 9 * GiB}, ()),
]  # fmt: skip


@dataclass(frozen=True)
class MemoryAffinityRow:
    name: str
    tm_mask: int | None
    tm_preferred: bool
    memory: MemoryRow
    expected: int | None


_M1, _M3 = MEMORY_ROWS[0], MEMORY_ROWS[2]
# OWN rows for memorymanager/policy_static.go Allocate.
MEMORY_AFFINITY_ROWS: list[MemoryAffinityRow] = [
    MemoryAffinityRow("OWN nil TM hint -> best own hint", None, True, _M1, mask_of([0])),
    MemoryAffinityRow("OWN TM hint satisfies the request", mask_of([1]), True, _M1, mask_of([1])),
    MemoryAffinityRow(
        "OWN TM {0} lacks free memory, extension {0,1} is refused (mixes groups)",
        mask_of([0]), False, _M3, None,
    ),
    MemoryAffinityRow(
        "OWN TM {0,1} violates node 0's single-node group", mask_of([0, 1]), False,
        MemoryRow("", (0, 1), _TWO_FRESH, _mem({0: 3 * GiB, 1: 4 * GiB}), {0: (0,)}, {0: 1},
                  {"memory": 1 * GiB}, ()),
        None,
    ),
    MemoryAffinityRow(
        "OWN TM {0} preferred lacks memory; only a non-preferred extension exists",
        mask_of([0]), True,
        MemoryRow("", (0, 1), _TWO_FRESH, _mem({0: 1 * GiB, 1: 4 * GiB}), {}, {},
                  {"memory": 2 * GiB}, ()),
        None,
    ),
    MemoryAffinityRow(
        "OWN TM {0} non-preferred lacks memory; extended to {0,1}",
        mask_of([0]), False,
        MemoryRow("", (0, 1), _TWO_FRESH, _mem({0: 1 * GiB, 1: 4 * GiB}), {}, {},
                  {"memory": 2 * GiB}, ()),
        mask_of([0, 1]),
    ),
    MemoryAffinityRow("OWN nil TM hint and no own hint", None, False, MEMORY_ROWS[6], None),
]  # fmt: skip


@dataclass(frozen=True)
class ProviderRow:
    name: str
    kind: str  # "cpu" or "device"
    args: tuple[object, ...]
    hints: tuple[Hint, ...] | None


# OWN rows for cpumanager/policy_static.go generateCPUTopologyHints and
# devicemanager/topology_hints.go generateDeviceTopologyHints (+ GetTopologyHints).
PROVIDER_ROWS: list[ProviderRow] = [
    ProviderRow("OWN cpu: reserved CPU on node 0 still counts for the minimum", "cpu",
                ({0: 4, 1: 4}, {0: 3, 1: 4}, 4, (0, 1)), (h(1), h(0, 1, p=False))),
    ProviderRow("OWN cpu: no exclusive request", "cpu", ({0: 4}, {0: 4}, 0, (0,)), None),
    ProviderRow("OWN cpu: too few anywhere -> empty", "cpu",
                ({0: 4, 1: 4}, {0: 1, 1: 1}, 3, (0, 1)), ()),
    ProviderRow("OWN cpu: needs two of three nodes", "cpu",
                ({0: 2, 1: 2, 2: 2}, {0: 2, 1: 1, 2: 2}, 3, (0, 1, 2)),
                (h(0, 1), h(0, 2), h(1, 2), h(0, 1, 2, p=False))),
    ProviderRow("OWN device: no topology at all -> no preference", "device",
                ((None, None), (True, True), 1, (0, 1)), None),
    ProviderRow("OWN device: a GPU without NUMA counts in no mask", "device",
                ((0, None), (True, True), 2, (0, 1)), ()),
    ProviderRow("OWN device: fewer free than requested -> empty", "device",
                ((0, 1), (True, False), 2, (0, 1)), ()),
    ProviderRow("OWN device: minimum from all devices, hints from free ones", "device",
                ((0, 0, 1), (True, False, True), 2, (0, 1)), (h(0, 1, p=False),)),
    ProviderRow("OWN device: two on node 0", "device",
                ((0, 0, 1), (True, True, True), 2, (0, 1)), (h(0), h(0, 1, p=False))),
]  # fmt: skip
