"""Kubernetes timestamps read one way everywhere (`numatopo_kube.timestamps`): a time
without a zone is UTC whatever the host's zone, as the operator's stale-node rule, the
steering queue's order and `numatopo selftest`'s Lease age all assume."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from numatopo_exporter.steering.choice import InFlight
from numatopo_kube.timestamps import unix_seconds
from numatopo_operator.indexes import heartbeat_of

UTC_SECONDS = 1767323045.0  # 2026-01-02T03:04:05Z


@pytest.fixture
def far_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process in UTC+10, where reading a zoneless time as local moves it 10 hours."""
    monkeypatch.setenv("TZ", "Australia/Brisbane")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    "text",
    ["2026-01-02T03:04:05Z", "2026-01-02T03:04:05", "2026-01-02T13:04:05+10:00"],
)
def test_every_form_reads_as_the_same_moment(far_from_utc: None, text: str) -> None:
    assert unix_seconds(text) == UTC_SECONDS
    assert heartbeat_of({"status": {"heartbeat": text}}) == UTC_SECONDS
    flight = InFlight("uid", "ns/pod", text, "main", 0, ("GPU-1",), (1,))
    assert flight.order() == (UTC_SECONDS, "uid", 0)


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01T00:00:00Z"])
def test_what_is_no_timestamp_reads_as_none(text: str) -> None:
    assert unix_seconds(text) is None
    assert heartbeat_of({"status": {"heartbeat": text}}) is None
    # Unreadable sorts last: a malformed creation time cannot jump the steering queue.
    assert InFlight("uid", "ns/pod", text, "main", 0, (), ()).order()[0] == float("inf")
