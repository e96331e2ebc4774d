"""`CPUSet`: a set of logical CPU ids that reads and prints the kernel's list format.

The kernel writes CPU and NUMA-node sets as comma-separated ranges (`0-3,8-11`), in sysfs
(`cpulist`, `local_cpulist`, `online`), in cgroup `cpuset.cpus`, and in kubelet state files. Every
set that crosses a wire in numatopo uses that format.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from itertools import groupby
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

# Far above any real machine (Linux NR_CPUS tops out at 8192), low enough that a typo such as
# "0-40000000" is refused instead of allocating a huge set.
MAX_CPU_ID = 65535

CPULIST_PATTERN = r"^\s*(\d+(-\d+)?(,\d+(-\d+)?)*)?\s*$"


# A CPU id or range as the kernel writes it: ASCII digits (`str.isdigit` takes other scripts' digits
# too, and superscripts that `int` refuses); ten digits read any id refused above.
_RANGE = re.compile(r"([0-9]{1,10})(?:-([0-9]{1,10}))?")
# How much of a refused list a message quotes (messages become Events and annotations).
SHOWN_CHARS = 60


def ids_named(cpulist: str) -> int:
    """How many ids `cpulist` names, counting repeats: what reading it costs, found without reading
    it (a list that does not parse costs what its ranges name)."""
    named = 0
    for found in _RANGE.finditer(cpulist):
        lo, hi = found.group(1), found.group(2)
        named += max(1, int(hi) - int(lo) + 1) if hi else 1
    return named


def _shown(text: str) -> str:
    if len(text) <= SHOWN_CHARS:
        return repr(text)
    return f"{text[:SHOWN_CHARS]!r}... ({len(text)} characters)"


# Distinct cpulist texts whose parse `CPUSet.parsed_shared` keeps at most.
PARSED_KEPT = 4096


class CPUSetParseError(ValueError):
    """A string is not a valid kernel cpulist; the message quotes it and says why."""


class CPUSet:
    """An immutable set of logical CPU ids. `str()` gives the kernel cpulist, e.g. `0-3,8`."""

    __slots__ = ("_ids",)
    _ids: frozenset[int]

    def __init__(self, ids: Iterable[int] = ()) -> None:
        frozen = frozenset(ids)
        for cpu in frozen:
            if not 0 <= cpu <= MAX_CPU_ID:
                raise CPUSetParseError(f"CPU id {cpu} is outside 0..{MAX_CPU_ID}")
        object.__setattr__(self, "_ids", frozen)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("CPUSet is immutable")

    @classmethod
    def parse(cls, cpulist: str) -> CPUSet:
        """Parse `0-3,8,10-11` (blank: the empty set; a trailing newline as sysfs writes it);
        anything else is refused with a message naming the bad part."""
        text = cpulist.strip()
        if not text:
            return cls()
        shown = _shown(cpulist)
        ids: set[int] = set()
        # Whoever writes an annotation writes a list: its work is bounded by the ids, each once.
        listed = 0
        for chunk in text.split(","):
            part = chunk.strip()
            found = _RANGE.fullmatch(part)
            if found is None:
                raise CPUSetParseError(
                    f"invalid cpulist {shown}: {_shown(part)} is not N or N-M "
                    "(expected the kernel list format, e.g. '0-3,8-11')"
                )
            lo, hi = int(found[1]), int(found[2] or found[1])
            if hi < lo:
                raise CPUSetParseError(f"invalid cpulist {shown}: range {part!r} is reversed")
            if hi > MAX_CPU_ID:
                raise CPUSetParseError(
                    f"invalid cpulist {shown}: CPU id {hi} is above {MAX_CPU_ID}"
                )
            listed += hi - lo + 1
            if listed > MAX_CPU_ID + 1:
                raise CPUSetParseError(
                    f"invalid cpulist {shown}: it names more than {MAX_CPU_ID + 1} CPUs "
                    "(its ranges repeat ids)"
                )
            ids.update(range(lo, hi + 1))
        return cls(ids)

    @classmethod
    def parsed_shared(cls, cpulist: str) -> CPUSet:
        """`parse`, the (immutable) set shared with earlier parses of the same text: a small set is
        a 216-byte hash table, and the operator's texts repeat across pods and nodes."""
        found = _PARSED.get(cpulist)
        if found is None:
            found = cls.parse(cpulist)
            if len(_PARSED) >= PARSED_KEPT:
                _PARSED.clear()  # costs memory only: a later parse makes its own set
            _PARSED[cpulist] = found
        return found

    @classmethod
    def parse_mask(cls, mask: str) -> CPUSet:
        """Parse the kernel's hex bitmap format (`cpumap`, `local_cpus`): `ff,00000001`."""
        text = mask.strip().replace(",", "")
        if not text:
            return cls()
        try:
            value = int(text, 16)
        except ValueError:
            raise CPUSetParseError(f"invalid CPU mask {mask!r}: not hexadecimal") from None
        return cls(i for i in range(value.bit_length()) if value >> i & 1)

    @property
    def ids(self) -> frozenset[int]:
        return self._ids

    def sorted(self) -> list[int]:
        return sorted(self._ids)

    def __str__(self) -> str:
        ranges: list[str] = []
        # Consecutive ids share their id minus their place in the sorted order.
        for _, run in groupby(enumerate(sorted(self._ids)), lambda pair: pair[1] - pair[0]):
            ids = [cpu for _, cpu in run]
            ranges.append(str(ids[0]) if len(ids) == 1 else f"{ids[0]}-{ids[-1]}")
        return ",".join(ranges)

    def __repr__(self) -> str:
        return f"CPUSet('{self}')"

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._ids))

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, cpu: object) -> bool:
        return cpu in self._ids

    def __bool__(self) -> bool:
        return bool(self._ids)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CPUSet) and self._ids == other._ids

    def __hash__(self) -> int:
        return hash(self._ids)

    def __or__(self, other: CPUSet) -> CPUSet:
        return CPUSet(self._ids | other._ids)

    def __and__(self, other: CPUSet) -> CPUSet:
        return CPUSet(self._ids & other._ids)

    def __sub__(self, other: CPUSet) -> CPUSet:
        return CPUSet(self._ids - other._ids)

    def __le__(self, other: CPUSet) -> bool:
        return self._ids <= other._ids

    def isdisjoint(self, other: CPUSet) -> bool:
        return self._ids.isdisjoint(other._ids)

    # A pydantic CPUSet field takes a cpulist (or a CPUSet or ints) and serialises as a cpulist.
    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        def from_any(value: Any) -> CPUSet:
            if isinstance(value, CPUSet):
                return value
            if isinstance(value, str):
                return cls.parsed_shared(value)
            if isinstance(value, list | tuple | set | frozenset) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in value
            ):
                return cls(value)
            raise CPUSetParseError(
                f"expected a cpulist string such as '0-3,8-11', got {type(value).__name__}"
            )

        return core_schema.no_info_plain_validator_function(
            from_any, serialization=core_schema.plain_serializer_function_ser_schema(str)
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {
            "type": "string",
            "pattern": CPULIST_PATTERN,
            "description": "Kernel cpulist format, e.g. '0-3,8-11'.",
        }


_PARSED: dict[str, CPUSet] = {}
