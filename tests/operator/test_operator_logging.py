"""Per-event log lines (kopf's handler successes, each HTTP request) go out at DEBUG."""

from __future__ import annotations

import logging

from numatopo_operator.main import PerEventAtDebug


def record(name: str, level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, None, None)


def test_per_event_lines_are_debug_and_everything_else_passes():
    root = logging.getLogger()
    before = root.level
    root.setLevel(logging.INFO)  # setLevel, not the attribute: it clears the level cache
    kept = PerEventAtDebug()
    lines = [
        record("kopf.objects", logging.INFO, "Handler 'pod_changed' succeeded."),
        record("httpx2", logging.INFO, 'HTTP Request: PATCH http://api/x "HTTP/1.1 200 OK"'),
        record("kopf.objects", logging.INFO, "Handler 'pod_changed' is invoked."),
        record("kopf.objects", logging.ERROR, "Handler 'pod_changed' failed."),
    ]

    try:
        at_info = [kept.filter(line) for line in lines]
        root.setLevel(logging.DEBUG)
        debug = record("kopf.objects", logging.INFO, "Handler 'pod_changed' succeeded.")
        at_debug = (kept.filter(debug), debug.levelname)
    finally:
        root.setLevel(before)

    assert [False, False, True, True] == at_info
    assert (True, "DEBUG") == at_debug
