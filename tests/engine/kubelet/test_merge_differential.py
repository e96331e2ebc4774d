"""numatopo's Topology Manager merge against the brute-force kubelet reference.

Random hint lists per resource (sometimes None = no preference, [] = no alignment),
1-6 NUMA nodes, every policy, and prefer-closest-numa-nodes with random symmetric
distances (10 on the diagonal, as the kernel reports them).
"""

from __future__ import annotations

import itertools

import merge_oracle as tm
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import POLICIES, Hint, merge

ProviderLists = list[list[Hint] | None]


@st.composite
def merge_inputs(
    draw: st.DrawFn,
) -> tuple[ProviderLists, list[int], str, dict[tuple[int, int], int] | None, bool]:
    n = draw(st.integers(1, 6))
    full = (1 << n) - 1
    hint = st.builds(
        Hint,
        mask=st.one_of(st.integers(1, full), st.none()),
        preferred=st.booleans(),
    )
    one = st.one_of(
        st.none(),
        st.just([]),
        st.lists(hint, min_size=1, max_size=4),
        st.lists(hint, min_size=1, max_size=4),
    )
    providers = draw(st.lists(one, min_size=1, max_size=5))
    policy = draw(st.sampled_from(POLICIES))
    distances = None
    prefer_closest = draw(st.booleans())
    if prefer_closest:
        distances = {}
        for a, b in itertools.combinations(range(n), 2):
            d = draw(st.integers(11, 40))
            distances[(a, b)] = distances[(b, a)] = d
        for a in range(n):
            distances[(a, a)] = 10
    return providers, list(range(n)), policy, distances, prefer_closest


@settings(max_examples=300, deadline=None)
@given(merge_inputs())
def test_reference_is_order_independent(
    case: tuple[ProviderLists, list[int], str, dict[tuple[int, int], int] | None, bool],
) -> None:
    """The kubelet walks resources in Go map order; the result must not depend on it."""
    providers, numa_ids, policy, distances, closest = case
    expected = merge(providers, numa_ids, policy, distances, closest)
    assert merge(providers[::-1], numa_ids, policy, distances, closest) == expected
    reversed_hints = [None if p is None else p[::-1] for p in providers]
    assert merge(reversed_hints, numa_ids, policy, distances, closest) == expected


@settings(max_examples=300, deadline=None)
@given(merge_inputs())
def test_engine_merge_matches_reference(
    case: tuple[ProviderLists, list[int], str, dict[tuple[int, int], int] | None, bool],
) -> None:
    from numatopo_engine.annotations import PolicyName

    providers, numa_ids, policy, distances, closest = case
    expected = merge(providers, numa_ids, policy, distances, closest)
    engine_providers = [
        None if p is None else [tm.Hint(h.mask, h.preferred) for h in p] for p in providers
    ]
    got = tm.merge(
        engine_providers, numa_ids, PolicyName(policy), distances=distances, prefer_closest=closest
    )
    assert (got.mask, got.preferred, got.admit) == expected
