"""The Events of decisions, posted off the decision's path (`numatopo_kube.event_posts`):
a slow Events API never holds a pod's worker or the extender's bind answer
(docs/operations.md, "Status freshness")."""

from __future__ import annotations

from numatopo_kube import event_posts
from numatopo_operator.metrics import Metrics

# A minute of a 180-pods/s burst with the Events API slow; a few hundred bytes each.
QUEUE_SIZE = 10_000
# One at a time is a few hundred Events a second at a millisecond's round trip, below a
# burst's rate on a farther API server.
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
