"""The kubelet's Topology Manager test tables against the reference and numatopo's engine."""

from __future__ import annotations

import merge_oracle as tm
import pytest
from kubelet_tables import (
    MAX_OF_MIN_ROWS,
    MEMORY_AFFINITY_ROWS,
    MEMORY_ROWS,
    MERGE_ROWS,
    PROVIDER_ROWS,
    MergeRow,
)
from reference import (
    cpu_hints,
    device_hints,
    max_of_min_affinity_counts,
    memory_affinity,
    memory_hints,
    merge,
)


def _id(row: MergeRow) -> str:
    return f"{row.policy}/{len(row.numa_ids)}n{'/closest' if row.prefer_closest else ''}/{row.name}"


def test_enough_rows() -> None:
    assert len(MERGE_ROWS) >= 25


@pytest.mark.parametrize("row", MERGE_ROWS, ids=_id)
def test_reference_merge(row: MergeRow) -> None:
    got = merge(
        row.provider_lists(), list(row.numa_ids), row.policy, row.distances, row.prefer_closest
    )
    assert got == (row.mask, row.preferred, row.admit)


@pytest.mark.parametrize("row", MERGE_ROWS, ids=_id)
def test_reference_merge_none_policy(row: MergeRow) -> None:
    assert merge(row.provider_lists(), list(row.numa_ids), "none") == (None, False, True)


@pytest.mark.parametrize("row", MERGE_ROWS, ids=_id)
def test_engine_merge(row: MergeRow) -> None:
    from numatopo_engine.annotations import PolicyName

    providers = [
        None if p is None else [tm.Hint(x.mask, x.preferred) for x in p] for p in row.providers
    ]
    got = tm.merge(
        providers,
        list(row.numa_ids),
        PolicyName(row.policy),
        distances=row.distances,
        prefer_closest=row.prefer_closest,
    )
    assert (got.mask, got.preferred, got.admit) == (row.mask, row.preferred, row.admit)


@pytest.mark.parametrize(("lists", "expected"), MAX_OF_MIN_ROWS)
def test_max_of_min_affinity_counts(lists: tuple, expected: int) -> None:
    assert max_of_min_affinity_counts([list(x) for x in lists]) == expected


@pytest.mark.parametrize("row", MEMORY_ROWS, ids=lambda r: r.name)
def test_memory_hints(row) -> None:  # type: ignore[no-untyped-def]
    got = memory_hints(
        row.allocatable, row.free, row.groups, row.assignments, row.request, row.numa_ids
    )
    assert tuple(got) == row.hints


@pytest.mark.parametrize("row", MEMORY_AFFINITY_ROWS, ids=lambda r: r.name)
def test_memory_affinity(row) -> None:  # type: ignore[no-untyped-def]
    m = row.memory
    got = memory_affinity(
        row.tm_mask, row.tm_preferred, m.allocatable, m.free, m.groups, m.assignments,
        m.request, m.numa_ids,
    )  # fmt: skip
    assert got == row.expected


@pytest.mark.parametrize("row", PROVIDER_ROWS, ids=lambda r: r.name)
def test_provider_hints(row) -> None:  # type: ignore[no-untyped-def]
    fn = cpu_hints if row.kind == "cpu" else device_hints
    got = fn(*row.args)
    assert (None if got is None else tuple(got)) == row.hints
