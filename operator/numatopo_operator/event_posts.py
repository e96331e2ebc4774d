"""The Events of decisions, posted off the decision's path (`numatopo_kube.event_posts`).

A decision is done once its pod's annotations are written; its Event only tells a
person what happened, so a slow or refusing Events API must never hold a pod's worker
or the extender's bind answer. The bounded queue and what is dropped, counted and
logged: docs/operations.md, "Status freshness".
"""

from __future__ import annotations

from numatopo_kube import event_posts
from numatopo_operator.metrics import Metrics

# Events waiting at most: a minute of a 180-pods/s burst with the Events API gone slow
# is still queued, and a few hundred bytes each bound the memory.
QUEUE_SIZE = 10_000
# Posts in flight at once: one at a time is a few hundred Events a second over a
# millisecond's round trip, below a burst's rate on a farther API server.
POSTERS = 4


class EventPosts(event_posts.EventPosts):
    """The operator's queue: its size and posters, counted in its metric."""

    def __init__(self, metrics: Metrics, *, size: int = QUEUE_SIZE) -> None:
        super().__init__(
            metrics.events_dropped.inc,
            size=size,
            posters=POSTERS,
            metric="numatopo_events_dropped_total",
            process="the operator",
            crashed=metrics.task_restarts.labels("events poster").inc,
        )
