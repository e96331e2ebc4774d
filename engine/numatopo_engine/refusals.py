"""The text of "does not fit" answers, shared by the general search and the fast path.

Both paths must refuse a node with the same words, so the wording lives here once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from numatopo_engine.annotations import GpuLinksMode, PolicyName
from numatopo_engine.hints import Need, Resource
from numatopo_engine.policies import rules_for
from numatopo_engine.request import TopologyOptions

__all__ = ["Refusal", "amount", "explain", "format_bytes", "shared_pool", "summary"]


def explain(need: Need, resources: Sequence[Resource], options: TopologyOptions) -> str:
    """Why no NUMA mask the policy admits holds `need`, with what is free per NUMA node."""
    wanted = " and ".join(amount(r, r.need) for r in resources) or "nothing"
    for resource in resources:
        if resource.min_width is None:
            total = resource.floating_capacity + sum(resource.capacity.values())
            return (
                f"{options.policy.value}: {resource.name}: {amount(resource, resource.need)} "
                f"requested, the node has {amount(resource, total)} in all"
            )
    ids = sorted({n for r in resources for n in r.capacity})
    per_numa = "; ".join(
        f"NUMA {n}: " + ", ".join(amount(r, r.free.get(n, 0)) for r in resources) + " free"
        for n in ids
    )
    floating = [r for r in resources if r.floating_capacity]
    if floating:
        per_numa += (
            "; not NUMA-local: " + ", ".join(amount(r, r.floating_free) for r in floating) + " free"
        )
    policy = options.policy
    if policy is PolicyName.SINGLE_NUMA_NODE:
        where = "no NUMA node has"
    elif policy is PolicyName.RESTRICTED:
        bound = rules_for(policy).max_width(options.max_numa_nodes)
        where = f"no preferred placement within {bound} NUMA node(s) has"
    elif options.max_numa_nodes is not None:
        where = f"no {options.max_numa_nodes} NUMA node(s) have"
    else:
        where = "the node does not have"
    if need.gpus and options.gpu_links is GpuLinksMode.REQUIRED:
        wanted += " (all pairs directly linked)"
    return f"{policy.value}: {where} {wanted} free ({per_numa})"


def shared_pool(cpus: int, free: int) -> str:
    """Why `cpus` exclusive CPUs are refused on a node without reserved CPUs where only
    `free` allocatable CPUs are free and `cpus` >= `free` (see `state.shared_floor`)."""
    return (
        f"shared pool: {cpus} exclusive CPUs would leave no CPU shared, and a node without "
        f"reserved CPUs must keep at least 1 CPU free ({free} CPUs free)"
    )


def summary(reason: str) -> str:
    """`reason` without the per-NUMA free amounts at its end.

    What a scheduler shows across many nodes: kube-scheduler counts nodes per identical
    reason ("3000 node(s) single-numa-node: no NUMA node has 4 nvidia.com/gpu free"), which
    only works when the text does not carry each node's own numbers.
    """
    head, marker, _ = reason.rpartition(" free (")
    return f"{head} free" if marker and reason.endswith(")") else reason


class Refusal:
    """One node's "does not fit": the `summary` at once, the detailed `reason` when read.

    A bulk decision refuses thousands of nodes whose detailed texts (free amounts per
    NUMA node) nobody may read; building each costs more than deciding the node. The
    detail is kept as a formatter and its immutable input, run on first read.
    """

    __slots__ = ("_format", "_input", "_reason", "summary")

    def __init__(
        self,
        summary: str,
        reason: str | None = None,
        format_reason: Callable[[Any], str] | None = None,
        reason_input: object = None,
    ) -> None:
        self.summary = summary
        self._reason = reason
        self._format = format_reason
        self._input = reason_input

    @classmethod
    def of(cls, reason: str) -> Refusal:
        return cls(summary(reason), reason)

    @property
    def reason(self) -> str:
        """The detailed text, exactly the `UnsatisfiableError` reason `evaluate` raises."""
        reason = self._reason
        if reason is None:
            assert self._format is not None, "a Refusal has a reason or a way to word it"
            reason = self._reason = self._format(self._input)
            self._format = self._input = None
        return reason

    def __str__(self) -> str:
        return self.reason

    def __repr__(self) -> str:
        return f"Refusal({self.reason!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Refusal) and self.reason == other.reason

    def __hash__(self) -> int:
        return hash(self.reason)


def amount(resource: Resource, value: int) -> str:
    if resource.name == "memory" or resource.name.startswith("hugepages-"):
        return f"{format_bytes(value)} {resource.name}"
    return f"{value} {resource.name}"


def format_bytes(value: int) -> str:
    for unit, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value >= factor and value % factor == 0:
            return f"{value // factor}{unit}"
    return f"{value}B"
