"""Which replica decides under kopf peering: kopf's own pause rule, read from its peering object."""

from __future__ import annotations

import datetime

import pytest

from numatopo_operator.leadership import is_active

NOW = datetime.datetime(2024, 5, 1, 10, 0, 0, tzinfo=datetime.UTC)


def peer(priority: int, seconds_ago: int = 5, lifetime: int = 60) -> dict:
    seen = NOW - datetime.timedelta(seconds=seconds_ago)
    return {"priority": priority, "lastseen": seen.isoformat(), "lifetime": lifetime}


@pytest.mark.parametrize(
    ("peers", "expected"),
    [
        pytest.param({"me": peer(50)}, True, id="alone"),
        pytest.param({"me": peer(50), "other": peer(10)}, True, id="highest-priority-decides"),
        pytest.param({"me": peer(50), "other": peer(90)}, False, id="a-higher-peer-decides"),
        pytest.param(
            {"me": peer(50), "other": peer(50)},
            False,
            id="equal-priorities-pause-both-as-kopf-does",
        ),
        pytest.param(
            {"me": peer(50), "other": peer(90, seconds_ago=120)},
            True,
            id="a-dead-higher-peer-is-ignored",
        ),
        pytest.param(
            {"me": peer(50), "other": {"priority": 90}}, True, id="a-peer-never-seen-is-ignored"
        ),
    ],
)
def test_is_active(peers, expected):
    assert expected == is_active(peers, identity="me", priority=50, now=NOW)
