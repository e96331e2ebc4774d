"""Why a pod does not fit a node: structured data, worded in one function.

A `Shortfall` says what kind of refusal it is, which resource, and the amounts per NUMA node; `word`
is the only place that turns one into text. kube-scheduler counts nodes per identical reason ("3000
node(s) single-numa-node: no NUMA node has 4 nvidia.com/gpu free"), so every text has a `summary`
without any node's own numbers, and the detailed `reason` (with per-NUMA free amounts) for Events
and `numatopo assign`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass


class Kind(enum.StrEnum):
    SHORT = "short"  # the whole node has less free than asked
    SHARED_POOL = "shared-pool"  # the exclusive CPUs would leave no shared CPU
    ALIGNMENT = "alignment"  # the policy admits no merged hint (TopologyAffinityError)
    MAX_NUMA_NODES = "max-numa-nodes"  # the merged hint is wider than the user allows
    MEMORY = "memory"  # the memory manager finds no NUMA nodes for the memory
    GPU_LINKS = "gpu-links"  # the GPUs of the mask are not all directly linked
    REQUEST = "request"  # the request cannot be placed on this hardware as written


@dataclass(frozen=True, slots=True)
class Wanted:
    resource: str  # "CPUs", "memory", "hugepages-2Mi", or a device resource name
    amount: int
    in_bytes: bool = False

    def text(self, value: int | None = None) -> str:
        value = self.amount if value is None else value
        return f"{format_bytes(value) if self.in_bytes else value} {self.resource}"


@dataclass(frozen=True, slots=True)
class Shortfall:
    kind: Kind
    policy: str
    wanted: tuple[Wanted, ...]  # what the unit asks, NUMA-bound resources first
    resource: str | None = None  # the one that does not fit (SHORT, MEMORY)
    # Free amounts of `free_of` per NUMA id (None: devices on no NUMA node).
    free: tuple[tuple[int | None, tuple[int, ...]], ...] = ()
    free_of: tuple[Wanted, ...] = ()
    total: int | None = None  # SHORT: what the node has free of `resource` in all
    bound: int | None = None  # MAX_NUMA_NODES: the bound; SHARED_POOL: free CPUs
    width: int | None = None  # MAX_NUMA_NODES: the merged hint's width
    pair: tuple[int, int] | None = None  # GPU_LINKS: two chosen GPUs without a link
    note: str = ""  # REQUEST: what is wrong with it


def word(s: Shortfall, *, detail: bool = True) -> str:
    """The text of `s`; without `detail`, the same text without its closing part in parentheses,
    which holds every amount that is this node's own (`summary`)."""
    asked = " and ".join(w.text() for w in s.wanted) or "nothing"
    if s.kind is Kind.REQUEST:
        return s.note
    if s.kind is Kind.SHORT:
        found = next((w for w in s.wanted if w.resource == s.resource), None)
        asked_here = found.text() if found else s.resource
        text = f"{s.policy}: {asked_here} requested, more than the node has free"
        own = [f"{found.text(s.total)} free in all"] if found and s.total is not None else []
    elif s.kind is Kind.SHARED_POOL:
        cpus = next((w.amount for w in s.wanted if w.resource == "CPUs"), 0)
        text = (
            f"shared pool: {cpus} exclusive CPUs would leave no CPU shared, and a node "
            f"without reserved CPUs must keep at least 1 CPU free"
        )
        own = [f"{s.bound} CPUs free"]
    elif s.kind is Kind.GPU_LINKS:
        text = (
            f"gpu-links required: the free GPUs of the chosen NUMA nodes for {asked} "
            "are not all directly linked"
        )
        own = [f"GPU {s.pair[0]} and GPU {s.pair[1]} have no direct link"] if s.pair else []
    elif s.kind is Kind.MAX_NUMA_NODES:
        text = (
            f"{s.policy}: max-numa-nodes {s.bound}: the kubelet's placement of {asked} "
            "spans more NUMA nodes"
        )
        own = [f"{s.width} NUMA nodes"]
    elif s.kind is Kind.MEMORY:
        memory = " and ".join(w.text() for w in s.wanted if w.in_bytes) or "memory"
        text = f"{s.policy}: memory manager: no NUMA nodes it may use hold {memory} free"
        own = []
    elif s.policy == "single-numa-node":
        text = f"single-numa-node: no NUMA node has {asked} free"
        own = []
    else:
        text = f"{s.policy}: no NUMA placement is preferred for every resource of {asked} free"
        own = []
    own += _free_text(s)
    if not detail or not own:
        return text
    return f"{text} ({'; '.join(own)})"


def summary(reason: str) -> str:
    """`reason` without its node's own amounts: what `word(..., detail=False)` says."""
    head, marker, _ = reason.rpartition(" (")
    return head if marker and reason.endswith(")") else reason


def _free_text(s: Shortfall) -> list[str]:
    parts = []
    for numa, amounts in s.free:
        where = "not NUMA-local" if numa is None else f"NUMA {numa}"
        shown = ", ".join(w.text(v) for w, v in zip(s.free_of, amounts, strict=True))
        parts.append(f"{where}: {shown} free")
    return parts


class Refusal:
    """One node's "does not fit": `summary` at once, `reason` and `shortfall` when read."""

    __slots__ = ("_make", "_reason", "_shortfall", "summary")

    def __init__(self, summary: str, make: Callable[[], Shortfall] | None = None) -> None:
        self.summary = summary
        self._make = make
        self._shortfall: Shortfall | None = None
        self._reason: str | None = None

    @classmethod
    def of(cls, shortfall: Shortfall) -> Refusal:
        refusal = cls(word(shortfall, detail=False))
        refusal._shortfall = shortfall
        return refusal

    @classmethod
    def text(cls, reason: str) -> Refusal:
        """A refusal known only by its words (an error raised by a filler)."""
        return cls.of(Shortfall(Kind.REQUEST, "", (), note=reason))

    @property
    def shortfall(self) -> Shortfall:
        if self._shortfall is None:
            assert self._make is not None, "a Refusal has a shortfall or a way to make it"
            self._shortfall = self._make()
            self._make = None
        return self._shortfall

    @property
    def reason(self) -> str:
        if self._reason is None:
            self._reason = word(self.shortfall)
        return self._reason

    def __str__(self) -> str:
        return self.reason

    def __repr__(self) -> str:
        return f"Refusal({self.reason!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Refusal) and self.reason == other.reason

    def __hash__(self) -> int:
        return hash(self.reason)


def format_bytes(value: int) -> str:
    for unit, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value >= factor and value % factor == 0:
            return f"{value // factor}{unit}"
    return f"{value}B"
