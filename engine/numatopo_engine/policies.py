"""What each topology policy admits, with the kubelet Topology Manager's semantics.

| policy             | masks searched           | admits a non-preferred placement  |
|--------------------|--------------------------|-----------------------------------|
| `none`             | up to the width bound    | yes, and any placement at all     |
| `best-effort`      | up to the width bound    | yes, and any placement at all     |
| `restricted`       | up to the width bound    | no                                |
| `single-numa-node` | one NUMA node            | no                                |

"Any placement at all" is the kubelet's default affinity: when no mask within the
width bound fits, `none` and `best-effort` still admit the pod across every candidate
NUMA node, unless the user set `numatopo.io/max-numa-nodes`, which is a hard bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from numatopo_engine.annotations import PolicyName

__all__ = ["DEFAULT_MAX_NUMA_NODES", "PolicyRules", "rules_for"]

# The kubelet refuses to run its Topology Manager on machines with more than 8 NUMA
# nodes (`maxAllowableNUMANodes`) because hint merging is exponential in the node
# count. The engine's search is bounded differently, but keeps 8 as the widest mask it
# considers by default, so a preferred placement never spans more than the kubelet's.
DEFAULT_MAX_NUMA_NODES = 8


@dataclass(frozen=True, slots=True)
class PolicyRules:
    policy: PolicyName
    single_numa_only: bool
    admits_non_preferred: bool

    def max_width(self, requested: int | None) -> int:
        if self.single_numa_only:
            return 1
        return requested if requested is not None else DEFAULT_MAX_NUMA_NODES

    def may_use_every_node(self, requested: int | None) -> bool:
        """Whether the kubelet's "default affinity" (every node) is the last resort."""
        return self.admits_non_preferred and requested is None


_RULES = {
    PolicyName.NONE: PolicyRules(PolicyName.NONE, False, True),
    PolicyName.BEST_EFFORT: PolicyRules(PolicyName.BEST_EFFORT, False, True),
    PolicyName.RESTRICTED: PolicyRules(PolicyName.RESTRICTED, False, False),
    PolicyName.SINGLE_NUMA_NODE: PolicyRules(PolicyName.SINGLE_NUMA_NODE, True, False),
}


def rules_for(policy: PolicyName) -> PolicyRules:
    return _RULES[policy]
