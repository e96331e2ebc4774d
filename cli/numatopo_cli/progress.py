"""Progress of long work on a terminal: one line on stderr, redrawn in place, and only
when stderr is a terminal or the user forces it, so that stdout is the same answer either
way (the convention of every long-running command and benchmark: README, "Commands")."""

from __future__ import annotations

import sys
import time
from typing import IO

# Redraw at most this often: a bar redrawn per pod would cost more than the pods.
REDRAW_SECONDS = 0.1
WIDTH = 30


class ProgressBar:
    """`bar(done, total)`: the bar at `done` of `total` `unit`; a newline when done."""

    def __init__(self, stream: IO[str], unit: str = "") -> None:
        self.stream = stream
        self.unit = unit
        self.started = time.monotonic()
        self._drawn = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        finished = done >= total
        if not finished and now - self._drawn < REDRAW_SECONDS:
            return
        self._drawn = now
        share = done / total if total else 1.0
        filled = int(WIDTH * share)
        unit = f" {self.unit}" if self.unit else ""
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (WIDTH - filled)}] {100 * share:5.1f}% "
            f"{done}/{total}{unit} {now - self.started:5.1f}s"
        )
        if finished:
            self.stream.write("\n")
        self.stream.flush()


def progress_bar(
    unit: str = "", *, force: bool = False, stream: IO[str] | None = None
) -> ProgressBar | None:
    """A bar on `stream` (stderr) when it is a terminal or `force`; else None (quiet)."""
    target = sys.stderr if stream is None else stream
    if not (force or target.isatty()):
        return None
    return ProgressBar(target, unit)
