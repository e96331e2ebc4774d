"""Errors of the engine. Each subclasses the builtin closest to its meaning.

NumatopoError
├── InvalidRequestError (ValueError)   the pod's annotations/requests are wrong: fix the pod
├── UnsatisfiableError                 valid, but does not fit on this node now
└── OverlapError (ValueError)          an assignment double-books something already taken
"""

from __future__ import annotations


class NumatopoError(Exception):
    """Base of every error the engine raises on purpose."""


class InvalidRequestError(NumatopoError, ValueError):
    """A pod's annotation or resource request is invalid; `field` names which one."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class UnsatisfiableError(NumatopoError):
    """The request is valid but cannot be placed on this node under its policy."""

    def __init__(self, reason: str, summary: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        # The reason without this node's own amounts (what a scheduler counts nodes by).
        self.summary = reason if summary is None else summary


class OverlapError(NumatopoError, ValueError):
    """An assignment uses CPUs, GPUs or NICs that another assignment already holds."""
