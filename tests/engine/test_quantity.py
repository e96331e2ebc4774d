from __future__ import annotations

import time

import pytest

from numatopo_engine.quantity import QuantityError, parse_bytes, parse_milli


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        pytest.param("4", 4000, id="integer"),
        pytest.param("500m", 500, id="millicores"),
        pytest.param("0.5", 500, id="decimal"),
        pytest.param("1e3", 1_000_000, id="exponent"),
        pytest.param("1.0001", 1001, id="rounds-up-like-the-api-server"),
    ],
)
def test_parse_milli(text: str, milli: int) -> None:
    assert milli == parse_milli(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("2Mi", 2 * 2**20, id="binary-suffix"),
        pytest.param("16Gi", 16 * 2**30, id="gibibytes"),
        pytest.param("1G", 10**9, id="decimal-suffix"),
        pytest.param("128974848", 128974848, id="plain-bytes"),
    ],
)
def test_parse_bytes(text: str, value: int) -> None:
    assert value == parse_bytes(text)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("-1", id="negative"),
        pytest.param("4 cores", id="words"),
        pytest.param("1e99999999", id="exponent-overflow"),
        pytest.param("9" * 30, id="above-int64"),
        pytest.param("1" * 10_000, id="ten-thousand-digits"),
        pytest.param("", id="empty"),
    ],
)
def test_invalid_quantities_raise_quantity_error_with_short_message(text: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_bytes(text)

    assert len(str(info.value)) < 120


@pytest.mark.alone
def test_hostile_input_is_rejected_fast() -> None:
    """A long near-match must not backtrack for seconds."""
    start = time.perf_counter()
    with pytest.raises(QuantityError):
        parse_milli("1" * 60 + ".x")

    assert time.perf_counter() - start < 0.1
