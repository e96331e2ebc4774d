"""Kubernetes resource quantities ("500m", "2Gi", "1e3") as exact integers."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["QuantityError", "parse_bytes", "parse_milli"]

_SUFFIX: dict[str, int | Decimal] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)
# 2**63: the Kubernetes API itself caps quantities around int64.
_LIMIT = Decimal(2**63)


class QuantityError(ValueError):
    """Not a Kubernetes quantity."""


def _parse(text: str | int | float) -> Decimal:
    raw = str(text).strip()
    match = _QUANTITY.match(raw)
    if match is None:
        raise QuantityError(f"{raw!r} is not a Kubernetes quantity (e.g. '4', '500m', '16Gi')")
    try:
        value = Decimal(match.group(1)) * Decimal(_SUFFIX[match.group(2) or ""])
    except InvalidOperation:
        raise QuantityError(f"{raw!r} is not a Kubernetes quantity") from None
    if value < 0:
        raise QuantityError(f"{raw!r} is negative")
    if value >= _LIMIT:
        raise QuantityError(f"{raw!r} is too large")
    return value


def parse_milli(text: str | int | float) -> int:
    """CPU quantity in millicores, rounded up like the API server ("0.5" -> 500)."""
    return int((_parse(text) * 1000).to_integral_value(rounding="ROUND_CEILING"))


def parse_bytes(text: str | int | float) -> int:
    """Memory/hugepages quantity (or a page size such as "2Mi") in bytes, rounded up."""
    return int(_parse(text).to_integral_value(rounding="ROUND_CEILING"))
