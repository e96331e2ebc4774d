from __future__ import annotations

import json
import time

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from numatopo_engine.annotations import Assignment
from numatopo_engine.cpuset import CPUSet, CPUSetParseError


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        pytest.param("", set(), id="empty"),
        pytest.param("0-3,8-11\n", {0, 1, 2, 3, 8, 9, 10, 11}, id="sysfs-with-newline"),
        pytest.param("5", {5}, id="single"),
        pytest.param("0,2,4", {0, 2, 4}, id="list"),
        pytest.param(
            "0-2,5-6,10-12,15-16,40-42",
            {0, 1, 2, 5, 6, 10, 11, 12, 15, 16, 40, 41, 42},
            id="non-contiguous-nfd-local-cpulist",
        ),
    ],
)
def test_parse(text: str, ids: set[int]) -> None:
    assert frozenset(ids) == CPUSet.parse(text).ids


@pytest.mark.parametrize(
    ("text", "why"),
    [
        pytest.param("0-", "is not N or N-M", id="open-range"),
        pytest.param("a-b", "is not N or N-M", id="letters"),
        pytest.param("3-1", "reversed", id="reversed"),
        pytest.param("0,,1", "is not N or N-M", id="empty-element"),
        pytest.param("-1", "is not N or N-M", id="negative"),
        pytest.param("0-99999999", "above", id="absurd"),
        pytest.param("0x3", "is not N or N-M", id="hex"),
    ],
)
def test_parse_rejects_malformed_with_clear_message(text: str, why: str) -> None:
    with pytest.raises(CPUSetParseError, match=why) as info:
        CPUSet.parse(text)

    assert repr(text) in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("\u00b2", id="superscript-two"),  # isdigit() says yes, int() says no
        pytest.param("\u0663", id="arabic-indic-three"),  # int() reads it as 3
        pytest.param("1" * 5000, id="more-digits-than-int-reads"),
        pytest.param("0-" + "1" * 5000, id="a-range-ending-in-them"),
    ],
)
def test_ids_are_ascii_digits_refused_as_a_parse_error(text: str) -> None:
    with pytest.raises(CPUSetParseError, match="is not N or N-M"):
        CPUSet.parse(text)


def test_a_list_naming_ids_over_and_over_is_refused_before_the_work() -> None:
    """Whoever may write an annotation may write this one (32 KiB, 4,000 times every id):
    read, it took seconds of the reader's CPU per copy, on the operator's event loop."""
    text = ",".join(["0-65535"] * 4000)

    with pytest.raises(CPUSetParseError, match="names more than 65536 CPUs") as info:
        CPUSet.parse(text)

    assert len(str(info.value)) < 200  # the message quotes the start of the list only
    assert len(CPUSet.parse("0-65535")) == 65536
    assert len(CPUSet.parse("0-3,2-5")) == 6


def test_format_is_kernel_list() -> None:
    assert "0-3,8-11,13" == str(CPUSet([0, 1, 2, 3, 8, 9, 10, 11, 13]))


def test_parse_mask() -> None:
    """The hex bitmap sysfs writes in `local_cpus` (comma-separated 32-bit words)."""
    assert CPUSet.parse("0-2,5-6,10-12,15-16,40-42,45-46,50-52,55-56") == CPUSet.parse_mask(
        "0000,019c6700,00019c67"
    )


@given(st.frozensets(st.integers(min_value=0, max_value=512)))
def test_roundtrip(ids: frozenset[int]) -> None:
    assert CPUSet(ids) == CPUSet.parse(str(CPUSet(ids)))


def test_set_algebra() -> None:
    a, b = CPUSet.parse("0-7"), CPUSet.parse("4-11")

    assert "0-11" == str(a | b)
    assert "4-7" == str(a & b)
    assert "0-3" == str(a - b)
    assert CPUSet.parse("4-5") <= a


def test_fields_parse_equal_cpulists_into_one_shared_set() -> None:
    """Every assignment and spec parses its CPU lists through `parsed_shared`: equal
    texts give one immutable object, not a hash table each (the operator keeps tens of
    thousands)."""
    first = Assignment.model_validate(
        {"node": "a", "containers": {"m": {"cpus": "0-3", "mems": "0"}}}
    )
    second = Assignment.model_validate(
        {"node": "b", "containers": {"m": {"cpus": "0-3", "mems": "0"}}}
    )
    other = Assignment.model_validate({"node": "b", "containers": {"m": {"cpus": "4-7"}}})

    assert first.containers["m"].cpus is second.containers["m"].cpus
    assert first.containers["m"].mems is second.containers["m"].mems
    assert str(other.containers["m"].cpus) == "4-7"
    assert CPUSet.parsed_shared("0-3") is first.containers["m"].cpus


def test_an_assignment_naming_too_many_ids_in_all_is_refused_before_its_lists_are_read() -> None:
    """Each list is within bounds, but 300 containers each naming every id again took
    seconds to read (3,000 of them, in a 128 KiB annotation, a minute): the assignment
    is refused from what its lists name, before any is read."""
    containers = {f"c{i}": {"cpus": f"0-{65535 - i}", "mems": "0"} for i in range(300)}
    text = json.dumps({"v": 1, "node": "n", "containers": containers})
    started = time.perf_counter()

    with pytest.raises(pydantic.ValidationError, match="more than the 262144 an assignment may"):
        Assignment.model_validate_json(text)

    assert time.perf_counter() - started < 1.0
    busy = {f"c{i}": {"cpus": "0-4095", "mems": "0-7"} for i in range(60)}
    read = Assignment.model_validate_json(json.dumps({"v": 1, "node": "n", "containers": busy}))
    assert 60 * 4096 == sum(len(c.cpus) for c in read.containers.values())
