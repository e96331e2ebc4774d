"""A brute-force reference of the kubelet's Topology Manager and its hint providers.

Written from the Kubernetes sources (1.26+ semantics), independently of numatopo's engine:

- pkg/kubelet/cm/topologymanager/policy.go: the cross product of the providers' hint
  lists, merged by AND; a merged hint is preferred only when every hint in the
  permutation is preferred and all its non-nil masks are equal; `HintMerger.compare`
  chooses among the merged hints (with `BestNonPreferredAffinityCount`).
- pkg/kubelet/cm/topologymanager/numa_info.go: `Narrowest` and `Closest`.
- pkg/kubelet/cm/topologymanager/bitmask/bitmask.go: `IsNarrowerThan`, `IsLessThan`.
- policy_best_effort.go, policy_restricted.go, policy_single_numa_node.go, policy_none.go.
- pkg/kubelet/cm/cpumanager/policy_static.go: `generateCPUTopologyHints`.
- pkg/kubelet/cm/devicemanager/topology_hints.go: `generateDeviceTopologyHints`.
- pkg/kubelet/cm/memorymanager/policy_static.go: `calculateHints`, `Allocate` with
  `getDefaultHint`, `extendTopologyManagerHint`, `findBestHint` and
  `isAffinityViolatingNUMAAllocations`; for a pod's containers in turn
  `updateMachineState`, `getPodReusableMemory`, `updatePodReusableMemory` and
  `updateInitContainersMemoryBlocks`, with memorymanager/state's `Block` (a container's
  NUMA affinity and size per memory type) and `MemoryTable` (`Reserved`/`Free` per
  NUMA node and type).

Masks are plain ints, bit i = NUMA node i; `None` is the kubelet's nil mask.
Nothing here is tuned for speed: every function enumerates what the kubelet enumerates.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

POLICIES = ("none", "best-effort", "restricted", "single-numa-node")

Distances = Mapping[tuple[int, int], int]


@dataclass(frozen=True)
class Hint:
    """The kubelet's `TopologyHint`: a NUMA mask (None = any node) and a preferred flag."""

    mask: int | None
    preferred: bool


# --- bitmask.go ----------------------------------------------------------------------


def mask_of(ids: Sequence[int]) -> int:
    """The mask with the bits of `ids` set (`bitmask.NewBitMask`)."""
    out = 0
    for i in ids:
        out |= 1 << i
    return out


def bits_of(mask: int) -> list[int]:
    """The set bits, lowest first (`BitMask.GetBits`)."""
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def is_narrower(a: int, b: int) -> bool:
    """`IsNarrowerThan`: fewer bits; on equal counts the numerically lower mask."""
    ca, cb = a.bit_count(), b.bit_count()
    if ca == cb:
        return a < b
    return ca < cb


def iterate_masks(numa_ids: Sequence[int]) -> Iterator[int]:
    """`bitmask.IterateBitMasks`: every non-empty subset, by size, then in combination order."""
    ids = list(numa_ids)
    for size in range(1, len(ids) + 1):
        for combo in itertools.combinations(ids, size):
            yield mask_of(combo)


# --- numa_info.go --------------------------------------------------------------------


def narrowest(m1: int, m2: int) -> int:
    """`NUMAInfo.Narrowest`: m1 when it is narrower than m2, else m2."""
    return m1 if is_narrower(m1, m2) else m2


def average_distance(mask: int, distances: Distances) -> float:
    """`NUMADistances.CalculateAverageFor`: the mean over all ordered pairs, diagonal included."""
    nodes = bits_of(mask)
    if not nodes:
        return 0.0
    total = 0.0
    count = 0.0
    for a in nodes:
        for b in nodes:
            total += float(distances[(a, b)])
            count += 1
    return total / count


def closest(m1: int, m2: int, distances: Distances) -> int:
    """`NUMAInfo.Closest`: narrowest on different counts, else the lower average distance.

    Equal averages fall back to `IsLessThan`, a numeric comparison of the masks.
    """
    if m1.bit_count() != m2.bit_count():
        return narrowest(m1, m2)
    d1 = average_distance(m1, distances)
    d2 = average_distance(m2, distances)
    if d1 == d2:
        return m1 if m1 < m2 else m2
    return m1 if d1 < d2 else m2


# --- policy.go -----------------------------------------------------------------------


def filter_providers(providers: Sequence[Sequence[Hint] | None]) -> list[list[Hint]]:
    """`filterProvidersHints`: nil -> [{nil, preferred}], empty -> [{nil, not preferred}]."""
    out: list[list[Hint]] = []
    for hints in providers:
        if hints is None:
            out.append([Hint(None, True)])
        elif len(hints) == 0:
            out.append([Hint(None, False)])
        else:
            out.append(list(hints))
    return out


def filter_single_numa(lists: list[list[Hint]]) -> list[list[Hint]]:
    """`filterSingleNumaHints`: keep preferred hints whose mask is nil or one node."""
    return [
        [h for h in hints if h.preferred and (h.mask is None or h.mask.bit_count() == 1)]
        for hints in lists
    ]


def merge_permutation(default: int, permutation: Sequence[Hint]) -> Hint:
    """`mergePermutation`: AND of the non-nil masks with the default mask.

    Preferred only when every hint is preferred and every non-nil mask equals the
    first non-nil mask (the rule since Kubernetes 1.24).
    """
    preferred = True
    first: int | None = None
    merged = default
    for hint in permutation:
        if hint.mask is not None:
            if first is None:
                first = hint.mask
            elif hint.mask != first:
                preferred = False
            merged &= hint.mask
        if not hint.preferred:
            preferred = False
    return Hint(merged, preferred)


def max_of_min_affinity_counts(lists: Sequence[Sequence[Hint]]) -> int:
    """`maxOfMinAffinityCounts`: over the lists, the largest count of a list's narrowest mask."""
    best = 0
    for hints in lists:
        masks = [h.mask for h in hints if h.mask is not None]
        if not masks:
            continue
        narrow = masks[0]
        for m in masks[1:]:
            if is_narrower(m, narrow):
                narrow = m
        best = max(best, narrow.bit_count())
    return best


@dataclass(frozen=True)
class _Merger:
    """`HintMerger` with its `compare` and `CompareNUMAAffinityMasks`."""

    best_non_preferred: int
    use_closest: bool
    distances: Distances | None

    def fitter(self, current: Hint, candidate: Hint) -> Hint:
        assert current.mask is not None
        assert candidate.mask is not None
        if candidate.mask == current.mask:
            return current
        if self.use_closest:
            assert self.distances is not None
            best = closest(current.mask, candidate.mask, self.distances)
        else:
            best = narrowest(current.mask, candidate.mask)
        return current if best == current.mask else candidate

    def compare(self, current: Hint | None, candidate: Hint) -> Hint | None:
        assert candidate.mask is not None
        if candidate.mask == 0:
            return current
        if current is None:
            return candidate
        assert current.mask is not None
        if candidate.preferred and not current.preferred:
            return candidate
        if current.preferred and not candidate.preferred:
            return current
        if current.preferred and candidate.preferred:
            return self.fitter(current, candidate)
        # Both non-preferred: approach BestNonPreferredAffinityCount from below.
        best = self.best_non_preferred
        cur_n, cand_n = current.mask.bit_count(), candidate.mask.bit_count()
        if cur_n > best:
            return self.fitter(current, candidate)
        if cur_n == best:
            return self.fitter(current, candidate) if cand_n == best else current
        if cand_n > best:
            return current
        if cand_n == best:
            return candidate
        if cand_n > cur_n:
            return candidate
        if cand_n < cur_n:
            return current
        return self.fitter(current, candidate)


def merge(
    providers: list[list[Hint] | None],
    numa_ids: list[int],
    policy: str,
    distances: dict[tuple[int, int], int] | None = None,
    prefer_closest: bool = False,
) -> tuple[int | None, bool, bool]:
    """The policy's `Merge`: (merged mask, preferred, admit).

    `providers` holds one entry per resource: None = no preference, [] = no possible
    alignment. "none" admits with no hint; "best-effort" always admits; "restricted"
    and "single-numa-node" admit only a preferred hint. single-numa-node first keeps
    only preferred nil/single-node hints and turns a result equal to the default mask
    into nil. prefer-closest-numa-nodes applies to every policy but single-numa-node.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}")
    if policy == "none":
        return None, False, True
    default = mask_of(numa_ids)
    lists = filter_providers(providers)
    single = policy == "single-numa-node"
    if single:
        lists = filter_single_numa(lists)
    use_closest = prefer_closest and not single
    if use_closest and distances is None:
        raise ValueError("prefer_closest needs distances")
    merger = _Merger(max_of_min_affinity_counts(lists), use_closest, distances)
    best: Hint | None = None
    for permutation in itertools.product(*lists):
        best = merger.compare(best, merge_permutation(default, permutation))
    if best is None:
        best = Hint(default, False)
    mask: int | None = best.mask
    if single and mask == default:
        mask = None
    admit = True if policy == "best-effort" else best.preferred
    return mask, best.preferred, admit


# --- hint providers ------------------------------------------------------------------


def cpu_hints(
    cpus_per_numa: Mapping[int, int],
    available_per_numa: Mapping[int, int],
    request: int,
    numa_ids: Sequence[int],
) -> list[Hint] | None:
    """The static CPU manager's hints (cpumanager/policy_static.go).

    No exclusive request -> None. minAffinitySize starts at the number of NUMA nodes and
    drops to the smallest mask whose CPUs (all of them, reserved included) cover the
    request; a hint is made for every mask whose available CPUs (allocatable, not
    exclusively assigned) cover it, preferred iff its count equals minAffinitySize.
    Not enough anywhere gives an empty list.
    """
    if request <= 0:
        return None
    min_affinity = len(numa_ids)
    found: list[int] = []
    for mask in iterate_masks(numa_ids):
        nodes = bits_of(mask)
        if sum(cpus_per_numa.get(n, 0) for n in nodes) >= request:
            min_affinity = min(min_affinity, mask.bit_count())
        if sum(available_per_numa.get(n, 0) for n in nodes) >= request:
            found.append(mask)
    return [Hint(m, m.bit_count() == min_affinity) for m in found]


def device_hints(
    devices: Sequence[int | None],
    available: Sequence[bool],
    request: int,
    numa_ids: Sequence[int],
) -> list[Hint] | None:
    """The device manager's hints for one resource (devicemanager/topology_hints.go).

    Not requested, or no device of the resource reports a NUMA node -> None (no
    preference). Fewer devices available than requested -> []. Otherwise a device counts
    in a mask iff its NUMA node is in the mask (one without a node counts in none);
    minAffinitySize comes from all devices, availability from the free ones.
    """
    if request <= 0:
        return None
    if all(n is None for n in devices):
        return None
    if sum(1 for a in available if a) < request:
        return []
    min_affinity = len(numa_ids)
    found: list[int] = []
    for mask in iterate_masks(numa_ids):
        in_mask = [n is not None and mask >> n & 1 == 1 for n in devices]
        if sum(in_mask) >= request:
            min_affinity = min(min_affinity, mask.bit_count())
        if sum(1 for inside, free in zip(in_mask, available, strict=True) if inside and free) >= (
            request
        ):
            found.append(mask)
    return [Hint(m, m.bit_count() == min_affinity) for m in found]


MemoryTable = Mapping[str, Mapping[int, int]]


def _group(groups: Mapping[int, Sequence[int]], n: int) -> tuple[int, ...]:
    return tuple(sorted(groups.get(n, (n,))))


def _total(table: MemoryTable, kind: str, nodes: Sequence[int]) -> int:
    return sum(table.get(kind, {}).get(n, 0) for n in nodes)


def memory_hints(  # noqa: PLR0917 (the brief's positional API)
    allocatable: MemoryTable,
    free: MemoryTable,
    groups: Mapping[int, Sequence[int]],
    assignments: Mapping[int, int],
    request: Mapping[str, int],
    numa_ids: Sequence[int],
    reusable: Mapping[str, Mapping[int, int]] | None = None,
) -> list[Hint]:
    """The static memory manager's `calculateHints` (memorymanager/policy_static.go).

    One list, which the kubelet hands to the Topology Manager once per requested memory
    type. For each mask: skip it unless the allocatable of every type suffices (such a
    mask lowers minAffinitySize); a single-node mask whose node's group (Cells) has more
    than one node is refused; a multi-node mask is refused when any node in it with
    NumberOfAssignments > 0 is in a single-node group or in a group other than the mask;
    then the free amounts, plus what the pod's init containers hold on exactly that mask
    (`reusable`: type -> mask -> bytes, `getPodReusableMemory`), must suffice.
    Preferred iff count == minAffinitySize. An empty
    result is returned as [] here; the kubelet returns an empty map, which the Topology
    Manager reads as "no preference" (see `decide`).
    """
    kinds = [k for k, v in request.items() if v > 0]
    min_affinity = len(numa_ids)
    found: list[int] = []
    for mask in iterate_masks(numa_ids):
        nodes = bits_of(mask)
        if any(_total(allocatable, k, nodes) < request[k] for k in kinds):
            continue
        min_affinity = min(min_affinity, mask.bit_count())
        if len(nodes) == 1:
            if len(_group(groups, nodes[0])) > 1:
                continue
        else:
            refused = False
            for n in nodes:
                if assignments.get(n, 0) > 0:
                    group = _group(groups, n)
                    if len(group) == 1 or group != tuple(nodes):
                        refused = True
                        break
            if refused:
                continue
        reused = {k: (reusable or {}).get(k, {}).get(mask, 0) for k in kinds}
        if any(_total(free, k, nodes) + reused[k] < request[k] for k in kinds):
            continue
        found.append(mask)
    return [Hint(m, m.bit_count() == min_affinity) for m in found]


def find_best_hint(hints: Sequence[Hint]) -> Hint | None:
    """`findBestHint`: the first preferred hint beats non-preferred ones, then the narrowest."""
    best: Hint | None = None
    for hint in hints:
        assert hint.mask is not None
        if best is None:
            best = hint
            continue
        assert best.mask is not None
        if hint.preferred and not best.preferred:
            best = hint
            continue
        if hint.preferred == best.preferred and is_narrower(hint.mask, best.mask):
            best = hint
    return best


def memory_affinity(  # noqa: PLR0917 (the brief's positional API)
    tm_hint_mask: int | None,
    tm_preferred: bool,
    allocatable: MemoryTable,
    free: MemoryTable,
    groups: Mapping[int, Sequence[int]],
    assignments: Mapping[int, int],
    request: Mapping[str, int],
    numa_ids: Sequence[int],
    reusable: Mapping[str, Mapping[int, int]] | None = None,
) -> int | None:
    """The static memory manager's `Allocate` choice of NUMA nodes; None = it refuses.

    A nil Topology Manager hint is replaced by the best of the manager's own hints (an
    error when it has none, or when the TM hint was preferred and that one is not). A
    hint whose nodes lack the free amounts (`isAffinitySatisfyRequest`, blind to
    `reusable`) is extended to the best own hint containing it (those count `reusable`;
    an error when none does, or when the preference would be lost). Finally the
    result is refused when it mixes single- and multi-node groups
    (`isAffinityViolatingNUMAAllocations`).
    """
    kinds = [k for k, v in request.items() if v > 0]
    own = memory_hints(allocatable, free, groups, assignments, request, numa_ids, reusable)
    mask = tm_hint_mask
    preferred = tm_preferred
    if mask is None:
        if not own:
            return None
        default = find_best_hint(own)
        assert default is not None
        assert default.mask is not None
        if not default.preferred and preferred:
            return None
        mask, preferred = default.mask, default.preferred
    nodes = bits_of(mask)
    if any(_total(free, k, nodes) < request[k] for k in kinds):
        containing = [h for h in own if h.mask is not None and h.mask & mask == mask]
        extended = find_best_hint(containing)
        if extended is None:
            return None
        assert extended.mask is not None
        if not extended.preferred and preferred:
            return None
        mask = extended.mask
        nodes = bits_of(mask)
    if len(nodes) > 1:
        for n in nodes:
            if assignments.get(n, 0) == 0:
                continue
            group = _group(groups, n)
            if len(group) == 1 or group != tuple(nodes):
                return None
    return mask


# --- a whole request -----------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """A node as the kubelet's managers see it (all maps keyed by NUMA id)."""

    numa_ids: tuple[int, ...]
    cpus_per_numa: dict[int, int]  # every CPU, reserved ones included
    available_cpus_per_numa: dict[int, int]  # allocatable and not exclusively assigned
    gpus: tuple[int | None, ...] = ()  # NUMA node per GPU, None = no topology
    gpu_available: tuple[bool, ...] = ()
    allocatable: dict[str, dict[int, int]] = field(default_factory=dict)  # type -> numa -> B
    free: dict[str, dict[int, int]] = field(default_factory=dict)
    groups: dict[int, tuple[int, ...]] = field(default_factory=dict)  # memory Cells
    assignments: dict[int, int] = field(default_factory=dict)  # NumberOfAssignments
    distances: dict[tuple[int, int], int] | None = None


@dataclass(frozen=True)
class Pod:
    """One Guaranteed container (or a pod of one container)."""

    policy: str
    cpus: int = 0  # exclusive, integer
    memory: int = 0  # bytes
    hugepages: dict[str, int] = field(default_factory=dict)  # "hugepages-2Mi" -> bytes
    gpus: int = 0
    prefer_closest: bool = False


def pod_providers(node: Node, pod: Pod) -> list[list[Hint] | None]:
    """The per-resource hint lists the kubelet's providers hand the Topology Manager.

    CPU manager: nothing without exclusive CPUs. Device manager: one list for the GPUs.
    Memory manager: its one list once per requested memory type; when it has no hint
    at all it returns an empty map, which the Topology Manager treats as no preference.
    """
    providers: list[list[Hint] | None] = []
    providers.append(
        cpu_hints(node.cpus_per_numa, node.available_cpus_per_numa, pod.cpus, node.numa_ids)
    )
    providers.append(device_hints(node.gpus, node.gpu_available, pod.gpus, node.numa_ids))
    request = memory_request(pod)
    if request:
        hints = memory_hints(
            node.allocatable, node.free, node.groups, node.assignments, request, node.numa_ids
        )
        if hints:
            providers.extend(list(hints) for _ in request)
        else:
            providers.append(None)
    return providers


def memory_request(pod: Pod) -> dict[str, int]:
    """The memory types the container asks for (memory first, then hugepages)."""
    out = {"memory": pod.memory} if pod.memory > 0 else {}
    out.update({k: v for k, v in sorted(pod.hugepages.items()) if v > 0})
    return out


def decide(node: Node, pod: Pod) -> tuple[bool, int | None]:
    """Admission and the Topology Manager's mask for `pod` on `node`.

    Admitted when the policy admits the merged hint, the CPU and device managers find
    enough free CPUs/GPUs on the node at all (they take aligned ones first, then any),
    and the memory manager finds an affinity. The mask is the merged hint's (None for
    the "none" policy, and for single-numa-node when the best mask is every node).
    """
    providers = pod_providers(node, pod)
    mask, preferred, admit = merge(
        providers, list(node.numa_ids), pod.policy, node.distances, pod.prefer_closest
    )
    if not admit:
        return False, mask
    if pod.cpus > sum(node.available_cpus_per_numa.values()):
        return False, mask
    if pod.gpus > sum(1 for a in node.gpu_available if a):
        return False, mask
    request = memory_request(pod)
    if request:
        chosen = memory_affinity(
            mask,
            preferred,
            node.allocatable,
            node.free,
            node.groups,
            node.assignments,
            request,
            node.numa_ids,
        )
        if chosen is None:
            return False, mask
    return True, mask


# --- a pod of several containers, init containers included ---------------------------
#
# pkg/kubelet/cm/topologymanager/scope_container.go admits the containers one at a time,
# init containers first, in spec order, each merged and allocated before the next;
# scope_pod.go merges the pod's totals once and allocates every container with that hint.
# What a regular (non-restartable) init container got is reusable by later containers:
# devicemanager/manager.go `devicesToReuse` (allocated first, `devicesToAllocate`),
# cpumanager/policy_static.go `cpusToReuse`, memorymanager/policy_static.go
# `initContainersReusableMemory` (only on the very same NUMA nodes). The CPU and device
# hints for a container with reusable ones list only masks holding the NUMA node of every
# reusable one, counting them as free there (`generateCPUTopologyHints`,
# `generateDeviceTopologyHints`); the memory manager's hints count what is reusable on
# exactly the mask as free there (`calculateHints`), without binding to it.


@dataclass(frozen=True)
class Container:
    name: str
    cpus: int = 0
    memory: int = 0
    gpus: int = 0
    init: bool = False
    restartable: bool = False  # an init container with restartPolicy Always (sidecar)
    hugepages: Mapping[str, int] = field(default_factory=dict)  # "hugepages-2Mi" -> bytes

    def memory_request(self) -> dict[str, int]:
        """`getRequestedResources`: the memory types it asks for, memory first."""
        out = {"memory": self.memory} if self.memory > 0 else {}
        out.update({k: v for k, v in sorted(self.hugepages.items()) if v > 0})
        return out


@dataclass
class Block:
    """memorymanager/state `Block`: one memory type of one container, its NUMA affinity
    (the memory manager's mask, all of it) and its size; no per-node split."""

    mask: int
    kind: str
    size: int


def cpu_hints_reusing(
    cpus_per_numa: Mapping[int, int],
    available_per_numa: Mapping[int, int],
    reusable_per_numa: Mapping[int, int],
    request: int,
    numa_ids: Sequence[int],
) -> list[Hint] | None:
    """`generateCPUTopologyHints` with reusable CPUs: a mask missing the NUMA node of a
    reusable CPU is no hint; reusable CPUs count as free in the masks that hold them."""
    if request <= 0:
        return None
    min_affinity = len(numa_ids)
    found: list[int] = []
    bound = [n for n, count in reusable_per_numa.items() if count]
    for mask in iterate_masks(numa_ids):
        nodes = bits_of(mask)
        if sum(cpus_per_numa.get(n, 0) for n in nodes) >= request:
            min_affinity = min(min_affinity, mask.bit_count())
        if any(not mask >> n & 1 for n in bound):
            continue
        matching = sum(reusable_per_numa.values()) + sum(
            available_per_numa.get(n, 0) for n in nodes
        )
        if matching >= request:
            found.append(mask)
    return [Hint(m, m.bit_count() == min_affinity) for m in found]


def device_hints_reusing(
    devices: Sequence[int | None],
    available: Sequence[bool],
    reusable: Sequence[bool],
    request: int,
    numa_ids: Sequence[int],
) -> list[Hint] | None:
    """`GetTopologyHints` + `generateDeviceTopologyHints` with reusable devices."""
    if request <= 0:
        return None
    if all(n is None for n in devices):
        return None
    if sum(1 for a, r in zip(available, reusable, strict=True) if a or r) < request:
        return []
    min_affinity = len(numa_ids)
    found: list[int] = []
    for mask in iterate_masks(numa_ids):
        in_mask = [n is not None and mask >> n & 1 == 1 for n in devices]
        if sum(in_mask) >= request:
            min_affinity = min(min_affinity, mask.bit_count())
        matching = 0
        bound_ok = True
        for n, inside, reuse in zip(devices, in_mask, reusable, strict=True):
            if reuse and n is not None:
                if not inside:
                    bound_ok = False
                    break
                matching += 1
        if not bound_ok:
            continue
        matching += sum(1 for inside, a in zip(in_mask, available, strict=True) if inside and a)
        if matching >= request:
            found.append(mask)
    return [Hint(m, m.bit_count() == min_affinity) for m in found]


@dataclass
class _PodRun:
    """The managers' state while one pod is admitted. Memory is the static memory
    manager's: per type ("memory", "hugepages-<size>"), the machine state's `Free` per
    NUMA node and what this pod added to its `Reserved`; `Cells` and
    `NumberOfAssignments`; the pod's `initContainersReusableMemory` (type -> mask ->
    bytes) and every container's memory blocks."""

    node: Node
    inits: tuple[Container, ...]  # pod.Spec.InitContainers, in spec order
    available_cpus: dict[int, int]
    reusable_cpus: dict[int, int]
    gpu_free: list[bool]
    gpu_reusable: list[bool]
    free: dict[str, dict[int, int]]
    reserved: dict[str, dict[int, int]]
    groups: dict[int, tuple[int, ...]]
    assignments: dict[int, int]
    reusable_memory: dict[str, dict[int, int]]
    blocks: dict[str, list[Block]]

    @classmethod
    def start(cls, node: Node, containers: Sequence[Container] = ()) -> _PodRun:
        return cls(
            node=node,
            inits=tuple(c for c in containers if c.init),
            available_cpus=dict(node.available_cpus_per_numa),
            reusable_cpus=dict.fromkeys(node.numa_ids, 0),
            gpu_free=list(node.gpu_available),
            gpu_reusable=[False] * len(node.gpus),
            free={kind: dict(per_numa) for kind, per_numa in node.free.items()},
            reserved={},
            groups=dict(node.groups),
            assignments=dict(node.assignments),
            reusable_memory={},
            blocks={},
        )

    def providers(self, cpus: int, gpus: int, memory: Mapping[str, int]) -> list[list[Hint] | None]:
        """The providers' hints; the memory manager's one list once per memory type it
        is asked for (`GetTopologyHints` returns a map keyed by type), or no preference
        when it has none (an empty map)."""
        node = self.node
        out: list[list[Hint] | None] = [
            cpu_hints_reusing(
                node.cpus_per_numa, self.available_cpus, self.reusable_cpus, cpus, node.numa_ids
            ),
            device_hints_reusing(node.gpus, self.gpu_free, self.gpu_reusable, gpus, node.numa_ids),
        ]
        request = {k: v for k, v in memory.items() if v > 0}
        if request:
            hints = memory_hints(
                node.allocatable, self.free, self.groups, self.assignments, request,
                node.numa_ids, self.reusable_memory,
            )  # fmt: skip
            if hints:
                out.extend(list(hints) for _ in request)
            else:
                out.append(None)
        return out

    def allocate(self, container: Container, mask: int | None, preferred: bool) -> int | None:
        """The managers' `Allocate` for one container; its memory mask (0 without
        memory), or None when one of them fails."""
        regular_init = container.init and not container.restartable
        if not self._take_cpus(container.cpus, mask, regular_init):
            return None
        if not self._take_gpus(container.gpus, mask, regular_init):
            return None
        request = container.memory_request()
        if not request:
            return 0
        node = self.node
        chosen = memory_affinity(
            mask, preferred, node.allocatable, self.free, self.groups, self.assignments,
            request, node.numa_ids, self.reusable_memory,
        )  # fmt: skip
        if chosen is None:
            return None
        # Allocate: every block holds the whole request on the whole mask; the machine
        # state books only what `getPodReusableMemory` does not cover.
        blocks: list[Block] = []
        for kind, size in request.items():
            blocks.append(Block(chosen, kind, size))
            reusable = self.reusable_memory.get(kind, {}).get(chosen, 0)
            self._update_machine_state(bits_of(chosen), kind, max(0, size - reusable))
        self._update_pod_reusable_memory(regular_init, blocks)
        self.blocks[container.name] = blocks
        self._update_init_containers_memory_blocks(container, blocks)
        return chosen

    def _update_machine_state(self, nodes: list[int], kind: str, size: int) -> None:
        """`updateMachineState`, called once per memory type: every node of the mask
        gets one more assignment and the mask as its Cells, even when nothing is left
        to book; the bytes fill the nodes in NUMA id order, each node's `Free` used up
        before the next."""
        free = self.free.setdefault(kind, {})
        reserved = self.reserved.setdefault(kind, {})
        for n in nodes:
            self.assignments[n] = self.assignments.get(n, 0) + 1
            self.groups[n] = tuple(nodes)
            if size == 0 or free.get(n, 0) <= 0:
                continue
            take = min(size, free[n])
            free[n] -= take
            reserved[n] = reserved.get(n, 0) + take
            size -= take

    def _update_pod_reusable_memory(self, regular_init: bool, blocks: Sequence[Block]) -> None:
        """`updatePodReusableMemory`: a regular init container raises the reusable
        amount of each (mask, type) to its block's size; any other container (an app
        container, a sidecar: `isRegularInitContainer` is false for both) lowers it by
        its block's size, down to 0."""
        for block in blocks:
            per_mask = self.reusable_memory.setdefault(block.kind, {})
            held = per_mask.get(block.mask, 0)
            if regular_init:
                per_mask[block.mask] = max(held, block.size)
            elif held:
                per_mask[block.mask] = 0 if block.size >= held else held - block.size

    def _update_init_containers_memory_blocks(
        self, container: Container, blocks: Sequence[Block]
    ) -> None:
        """`updateInitContainersMemoryBlocks`: each block's size is taken off the blocks
        of the same type and the very same mask of the regular init containers before
        this container in spec order, first come first, so that the pod's blocks add up
        to what its memory reserves (the kubelet's own comment says the per-container
        sizes then say little about who holds what)."""
        for block in blocks:
            left = block.size
            for init in self.inits:
                if init.name == container.name or left == 0:
                    break
                if init.restartable:
                    continue
                for held in self.blocks.get(init.name, []):
                    if held.size == 0 or held.kind != block.kind or held.mask != block.mask:
                        continue
                    if held.size > left:
                        held.size -= left
                        left = 0
                    else:
                        left -= held.size
                        held.size = 0

    def _take_cpus(self, count: int, mask: int | None, regular_init: bool) -> bool:
        """`allocateCPUs`: from the available and reusable CPUs together, those inside
        the mask first, then the rest, each step by `_packed`. Within a NUMA node the
        reusable ones go first (numatopo's order; the kubelet picks by CPU id there,
        which this per-node count cannot tell, and the node is the same either way)."""
        if count <= 0:
            return True
        pool = {n: self.available_cpus[n] + self.reusable_cpus[n] for n in self.node.numa_ids}
        if sum(pool.values()) < count:
            return False
        inside = [n for n in self.node.numa_ids if mask is not None and mask >> n & 1]
        aligned = _packed(
            self.node.cpus_per_numa, {n: pool[n] for n in inside},
            min(count, sum(pool[n] for n in inside)),
        )  # fmt: skip
        rest = {n: pool[n] - aligned.get(n, 0) for n in self.node.numa_ids}
        remaining = _packed(self.node.cpus_per_numa, rest, count - sum(aligned.values()))
        for n in self.node.numa_ids:
            k = aligned.get(n, 0) + remaining.get(n, 0)
            from_reusable = min(k, self.reusable_cpus[n])
            self.reusable_cpus[n] -= from_reusable
            self.available_cpus[n] -= k - from_reusable
            if regular_init:
                self.reusable_cpus[n] += k
        return True

    def _take_gpus(self, count: int, mask: int | None, regular_init: bool) -> bool:
        """`devicesToAllocate`: reusable first, then aligned, unaligned, no affinity."""
        if count <= 0:
            return True
        gpus = self.node.gpus
        order = [i for i, r in enumerate(self.gpu_reusable) if r]
        free = [i for i, f in enumerate(self.gpu_free) if f]
        aligned = [i for i in free if gpus[i] is not None and (mask is None or mask >> gpus[i] & 1)]
        unaligned = [i for i in free if gpus[i] is not None and i not in aligned]
        order += aligned + unaligned + [i for i in free if gpus[i] is None]
        if len(order) < count:
            return False
        for i in order[:count]:
            self.gpu_free[i] = False
            self.gpu_reusable[i] = regular_init
        return True


def _packed(
    cpus_per_numa: Mapping[int, int], pool: Mapping[int, int], count: int
) -> dict[int, int]:
    """`takeByTopologyNUMAPacked` (cpumanager/cpu_assignment.go) counted per NUMA node,
    on the nodes these tests build (one socket per NUMA node, one thread per core):
    whole NUMA nodes first (every CPU of the node in `pool`, the request at least that
    big), then single cores, both from the NUMA node with the fewest CPUs in the pool
    first (`cpuAccumulator.sort`: smallest to largest, ties by id). The whole-socket step
    is left out: with a socket per NUMA node it takes what the NUMA step took, except
    where uneven nodes make `CPUsPerSocket` (an average) match a partly used one."""
    taken: dict[int, int] = {}
    for n in sorted((n for n in pool if pool[n]), key=lambda n: (pool[n], n)):
        if pool[n] == cpus_per_numa.get(n, 0) and count >= pool[n]:
            taken[n] = pool[n]
            count -= pool[n]
    left = {n: pool[n] - taken.get(n, 0) for n in pool}
    for n in sorted((n for n in left if left[n]), key=lambda n: (left[n], n)):
        take = min(count, left[n])
        taken[n] = taken.get(n, 0) + take
        count -= take
    return taken


def _pod_total(containers: Sequence[Container], amount: Callable[[Container], int]) -> int:
    """One resource as scope pod asks it (`getPodRequestedResources`): the larger of the
    largest init container (with the sidecars started before it) and the app containers
    with every sidecar."""
    sidecars = 0
    largest_init = 0
    for c in containers:
        if not c.init:
            continue
        if c.restartable:
            sidecars += amount(c)
        else:
            largest_init = max(largest_init, sidecars + amount(c))
    apps = sidecars + sum(amount(c) for c in containers if not c.init)
    return max(largest_init, apps)


def pod_request(containers: Sequence[Container]) -> tuple[int, dict[str, int], int]:
    """The pod's (CPUs, memory types, GPUs) as scope pod asks them."""
    kinds = sorted({k for c in containers for k in c.memory_request()}, key=lambda k: k != "memory")
    memory = {k: _pod_total(containers, lambda c, k=k: c.memory_request().get(k, 0)) for k in kinds}
    return (
        _pod_total(containers, lambda c: c.cpus),
        memory,
        _pod_total(containers, lambda c: c.gpus),
    )


@dataclass
class PodOutcome:
    """What the kubelet's managers make of a pod: admission, the Topology Manager's mask
    per container (None = nil hint), the memory manager's mask per container asking
    memory, each container's memory blocks (after `updateInitContainersMemoryBlocks`),
    and per memory type and NUMA node what the pod reserved and what is left `Free`,
    with the nodes' `Cells` and `NumberOfAssignments` after it."""

    admit: bool
    masks: dict[str, int | None]
    memory: dict[str, int]
    blocks: dict[str, list[Block]]
    reserved: dict[str, dict[int, int]]
    free: dict[str, dict[int, int]]
    groups: dict[int, tuple[int, ...]]
    assignments: dict[int, int]


def admit_pod(node: Node, containers: Sequence[Container], policy: str, scope: str) -> PodOutcome:
    """The admission of a pod (init containers first in `containers`, in spec order)."""
    ordered = [c for c in containers if c.init] + [c for c in containers if not c.init]
    run = _PodRun.start(node, ordered)
    masks: dict[str, int | None] = {}
    memory: dict[str, int] = {}

    def outcome(admit: bool) -> PodOutcome:
        return PodOutcome(
            admit, masks, memory, run.blocks, run.reserved, run.free, run.groups,
            run.assignments,
        )  # fmt: skip

    if scope == "pod":
        cpus, pod_memory_request, gpus = pod_request(ordered)
        mask, preferred, admit = merge(
            run.providers(cpus, gpus, pod_memory_request), list(node.numa_ids), policy,
            node.distances,
        )  # fmt: skip
        if not admit:
            return outcome(False)
    for container in ordered:
        if scope == "container":
            mask, preferred, admit = merge(
                run.providers(container.cpus, container.gpus, container.memory_request()),
                list(node.numa_ids), policy, node.distances,
            )  # fmt: skip
            if not admit:
                return outcome(False)
        masks[container.name] = mask
        got = run.allocate(container, mask, preferred)
        if got is None:
            return outcome(False)
        if got:
            memory[container.name] = got
    return outcome(True)


def decide_pod(
    node: Node, containers: Sequence[Container], policy: str, scope: str
) -> tuple[bool, dict[str, int | None]]:
    """Admission of a pod and the Topology Manager's mask per container."""
    done = admit_pod(node, containers, policy, scope)
    return done.admit, done.masks


def pod_memory(
    node: Node, containers: Sequence[Container], policy: str
) -> tuple[bool, dict[str, int]]:
    """Scope `pod` without init containers: admission, and the memory manager's NUMA
    nodes per container (0 for a container without memory), each container allocated
    in turn with the pod's merged hint (`scope_pod.go`)."""
    run = _PodRun.start(node, containers)
    cpus, memory, gpus = pod_request(containers)
    mask, preferred, admit = merge(
        run.providers(cpus, gpus, memory), list(node.numa_ids), policy, node.distances
    )
    if not admit:
        return False, {}
    chosen: dict[str, int] = {}
    for container in containers:
        got = run.allocate(container, mask, preferred)
        if got is None:
            return False, chosen
        chosen[container.name] = got
    return True, chosen
