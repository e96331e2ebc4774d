"""Kubernetes resource quantities ("500m", "2Gi", "1e3") as exact integers."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIX: dict[str, int | Decimal] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip
# The mantissa's optional fraction is one group so long inputs cannot backtrack.
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,4})?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)
# Longer than any real quantity ("9223372036854775807" is 19 characters).
_MAX_LENGTH = 64
# 2**63: the Kubernetes API itself caps quantities around int64.
_LIMIT = Decimal(2**63)


class QuantityError(ValueError):
    """Not a Kubernetes quantity."""


def _shown(raw: str) -> str:
    return repr(raw if len(raw) <= 40 else raw[:37] + "...")


def _parse(text: str | int | float) -> Decimal:
    raw = str(text).strip()
    if len(raw) > _MAX_LENGTH:
        raise QuantityError(f"{_shown(raw)} is too long to be a Kubernetes quantity")
    match = _QUANTITY.match(raw)
    if match is None:
        raise QuantityError(
            f"{_shown(raw)} is not a Kubernetes quantity (e.g. '4', '500m', '16Gi')"
        )
    try:
        value = Decimal(match.group(1)) * Decimal(_SUFFIX[match.group(2) or ""])
    except (InvalidOperation, ArithmeticError):
        raise QuantityError(f"{_shown(raw)} is not a Kubernetes quantity") from None
    if value < 0:
        raise QuantityError(f"{_shown(raw)} is negative")
    if value >= _LIMIT:
        raise QuantityError(f"{_shown(raw)} is too large")
    return value


def parse_milli(text: str | int | float) -> int:
    """CPU quantity in millicores, rounded up like the API server ("0.5" -> 500)."""
    return int((_parse(text) * 1000).to_integral_value(rounding="ROUND_CEILING"))


def parse_bytes(text: str | int | float) -> int:
    """Memory/hugepages quantity (or a page size such as "2Mi") in bytes, rounded up."""
    return int(_parse(text).to_integral_value(rounding="ROUND_CEILING"))


def page_bytes(size: str, *, longest: int = 16) -> int:
    """Bytes per page size ("2Mi"), else 0; keys over `longest` never reach the quantity regex."""
    try:
        return parse_bytes(size) if len(size) <= longest else 0
    except QuantityError:
        return 0
