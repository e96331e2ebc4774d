"""Discovery errors: every message names the file or source and what was wrong with it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

Parsed = TypeVar("Parsed")


class DiscoveryError(Exception):
    """Input could not be read or makes no sense; the message names the file."""

    def __init__(self, message: str, path: Path | str | None = None) -> None:
        super().__init__(f"{path}: {message}" if path is not None else message)
        self.path = None if path is None else Path(path)


class SourceUnavailableError(DiscoveryError):
    """An optional source is absent (no NVIDIA driver, no kubelet config): the others are still
    published."""


def read_saved(path: Path, what: str, parse: Callable[[bytes], Parsed]) -> Parsed:
    """`parse` of a saved file's bytes (`what`: its kind); every error names the file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DiscoveryError(f"cannot read {what}: {exc.strerror}", path) from exc
    try:
        return parse(data)
    except DiscoveryError as exc:
        raise DiscoveryError(str(exc), path) from exc
