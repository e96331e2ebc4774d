"""Taking over as the active replica: rebuild the ledger from a fresh list, then decide (I/O).

A standby replica's kopf is paused: it watches nothing, so its ledger stops at what it
saw before it stood by, while the active peer goes on booking CPUs and GPUs. When it
becomes active again, kopf resumes and re-lists, but it does not gate its indexes a
second time, so handlers and the extender would decide against the old bookings until
that re-list has been processed, and could hand out what the peer booked meanwhile.
Hence, on every transition to active (`leadership` clears `Runtime.ledger_current`
first, and clears it again when standing by):

1. Wait `grace` seconds if a live peer may still be deciding (it stops at its next poll
   of the peering object), so that its last writes land before our list.
2. `Ledger.begin_resync`, then LIST every pod (`KubeClient.list_pods`), then
   `Ledger.end_resync` with the bookings of that list. The list is retried until it
   succeeds; a replica that stands down meanwhile cancels it.
3. Set `Runtime.ledger_current`: decisions resume (until then the assigner skips pods and
   the extender answers "not ready, retry", and `/readyz` says so).
4. Retry the pods that wait for an assignment: those of the list, and those whose events
   arrived while the gate was closed (`Runtime.deferred`), oldest first.

Why no booking is lost or double-booked. Take any pod P whose assignment exists when
step 3 opens the gate. Either its annotation was written before the list was served:
then the list has it, and only a journaled end of that very pod (same uid) removes it,
which is right, since P is gone. Or it was written after: then the watch stream delivers
it, and if that event is processed during the list, the journal keeps it over the list's
older answer; if after, the ledger observes it as usual. The only writes that can reach
us after the gate opened are those of a peer still deciding after our list, which is
what the grace of step 1 is for (and in-flight writes slower than it remain a window).
A release is not lost either: one processed before `begin_resync` is older than the list,
which no longer shows the pod (or shows it finished, which books nothing); one processed
during the list is journaled as an end and wins over the list; one processed after is
applied to the rebuilt ledger as usual. Pods that vanished while we stood by, whose
deletion kopf never replays, are simply not in the list, so their bookings go.
In-flight reservations (our writes not yet seen) are kept across the resync.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from numatopo_operator import assigning, translate
from numatopo_operator.errors import BookingError, KubeError, kept_serving
from numatopo_operator.runtime import Runtime
from numatopo_operator.translate import Booking, RawPod

__all__ = ["listed_bookings", "take_over"]

logger = logging.getLogger(__name__)

# Pause between attempts to list pods when the API refuses (or login is pending).
LIST_RETRY_SECONDS = 1.0


def listed_bookings(runtime: Runtime, pods: Iterable[RawPod]) -> list[Booking]:
    """The bookings of listed pods, as the index would observe them one by one; a pod
    whose assignment cannot be read books nothing (and is reported as the index does)."""
    bookings: list[Booking] = []
    for pod in pods:
        key = translate.pod_key(pod)
        try:
            booking = translate.booking_from_pod(pod)
        except BookingError as exc:
            runtime.unreadable[key] = str(exc)
            continue
        if booking is not None:
            bookings.append(booking)
    return bookings


async def _resync(runtime: Runtime) -> list[dict[str, Any]]:
    """One list of pods applied to the ledger; returns the pods. Retried until it works."""
    ledger = runtime.ledger
    while True:
        ledger.begin_resync()
        try:
            pods = await runtime.kube.list_pods(namespaces=runtime.settings.namespaces)
        except KubeError as exc:
            ledger.abort_resync()
            level = logging.DEBUG if exc.reason == "NotLoggedIn" else logging.WARNING
            logger.log(level, "cannot list pods to rebuild the ledger (retrying): %s", exc)
            await asyncio.sleep(LIST_RETRY_SECONDS)
            continue
        except BaseException:
            ledger.abort_resync()
            raise
        untrusted = ledger.end_resync(listed_bookings(runtime, pods))
        if untrusted:
            logger.warning("bookings that overlap older ones after the resync: %s", untrusted)
        return pods


async def take_over(runtime: Runtime, *, grace: float = 0.0) -> None:
    """Steps 1-4 of the module docstring; cancelled when this replica stands down."""
    if grace > 0:
        logger.info("waiting %.1f s for the previous active replica to stop deciding", grace)
        await asyncio.sleep(grace)
    pods = await _resync(runtime)
    runtime.metrics.ledger_pods.set(len(runtime.ledger))
    waiting = {translate.pod_key(pod): pod for pod in pods}
    waiting.update(runtime.deferred)
    runtime.deferred.clear()
    runtime.ledger_current.set()
    logger.info("ledger rebuilt from %d listed pods (%d booked)", len(pods), len(runtime.ledger))
    for pod in sorted(
        waiting.values(), key=lambda pod: (pod.get("metadata") or {}).get("creationTimestamp", "")
    ):
        if not runtime.deciding:
            return  # kopf's first pass (or a later activation) handles them instead
        if not translate.is_waiting(pod):
            continue
        with kept_serving(logger, f"pod {translate.pod_key(pod)}", runtime.metrics):
            await assigning.assign_bound_pod(runtime, pod)
