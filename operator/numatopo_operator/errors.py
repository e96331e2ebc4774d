"""Errors of the operator, and the one boundary where unexpected ones stop.

OperatorError
├── BookingError (ValueError)   a pod's `numatopo.io/assignment` cannot be read
└── NotActiveError              this replica does not hold a fresh Lease (`leadership`)

API errors are `numatopo_kube`'s (re-exported here). Engine errors (`InvalidRequestError`,
`UnsatisfiableError`) are outcomes: `numatopo.io/state` values and Events, never
exceptions past `assigning`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from numatopo_kube import KubeConflictError, KubeError, KubeForbiddenError, KubeNotFoundError

if TYPE_CHECKING:
    from numatopo_operator.metrics import Metrics

__all__ = [
    "BookingError",
    "KubeConflictError",
    "KubeError",
    "KubeForbiddenError",
    "KubeNotFoundError",
    "NodeBusyError",
    "NotActiveError",
    "OperatorError",
    "kept_serving",
]


class OperatorError(Exception):
    """Base of every error the operator raises on purpose."""


class BookingError(OperatorError, ValueError):
    """A `numatopo.io/assignment` annotation that is not a valid assignment."""


class NotActiveError(OperatorError):
    """This replica does not hold a fresh Lease; it must not decide or write."""


class NodeBusyError(OperatorError):
    """The node kept changing while the engine decided: nothing booked; decide again later."""


@contextlib.contextmanager
def kept_serving(
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
    what: str,
    metrics: Metrics,
) -> Iterator[None]:
    """Handler boundary: log any error (bugs with traceback) and carry on; next event retries."""
    try:
        yield
    except KubeNotFoundError as exc:
        logger.info("%s: the object is gone (%s)", what, exc.message)
    except KubeError as exc:
        logger.warning("%s: the API refused: %s", what, exc)
    except Exception:
        logger.exception("%s: unexpected error; continuing with other objects", what)
        metrics.handler_errors.inc()
