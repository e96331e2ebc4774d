"""Discovery errors: every message names the file or source and what was wrong with it."""

from __future__ import annotations

from pathlib import Path


class DiscoveryError(Exception):
    """Input could not be read or makes no sense; the message names the file."""

    def __init__(self, message: str, path: Path | str | None = None) -> None:
        super().__init__(f"{path}: {message}" if path is not None else message)
        self.path = None if path is None else Path(path)


class SourceUnavailableError(DiscoveryError):
    """An optional source is absent (no NVIDIA driver, no kubelet config); not an error
    for the node as a whole: the other sources are still published."""
