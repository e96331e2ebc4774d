"""The one rule for the operator's long-running tasks: `supervised`, `numatopo_kube.supervise`
counted in `numatopo_task_restarts_total{task}` (docs/operations.md, "Background tasks")."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from numatopo_kube.supervise import keep_running
from numatopo_operator.metrics import Metrics

logger = logging.getLogger(__name__)


def supervised(
    metrics: Metrics, name: str, loop: Callable[[], Awaitable[None]]
) -> Coroutine[Any, Any, None]:
    """`loop()` run again after each unexpected error, restarts counted as task `name`."""
    return keep_running(name, loop, crashed=metrics.task_restarts.labels(name).inc, log=logger)
