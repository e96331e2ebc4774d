"""Kubernetes timestamps (RFC 3339, "2026-01-02T03:04:05Z") as Unix seconds: one reading for
heartbeats, Lease renewals and pod creation times. A time without a zone is UTC, as the API
server writes every time; reading it as local time would move it by the host's offset."""

from __future__ import annotations

import datetime


def unix_seconds(text: str) -> float | None:
    """`text` as Unix seconds; None when it is no timestamp."""
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()
