"""Taking over as the active replica: make the ledger current, then judge (I/O).

A standby follows the pods as the holder does (`pod_feed`; the Lease decides, not kopf
peering), but its watch may lag behind the holder it replaces. On each acquisition
(`leadership` clears `Runtime.ledger_current` then, and when the Lease is lost):

1. No grace period: fencing by expiry (`leadership`) has the previous holder silent at
   least `lease_duration - renew_deadline` before we could acquire: its writes have landed.
2. Once `pod_feed` has listed: the Lease's first holder ever (it created the Lease, or runs
   standalone) does nothing more (`take_over(relist=False)`); else the watch catches up
   (`CatchUp`: our token, written on our own pod and seen on our watch within
   `CATCH_UP_SECONDS`, proves every earlier pod write was handed over; needs our pod in a
   watched namespace); else `Ledger.begin_resync`, a LIST of the annotated pods,
   `Ledger.end_resync` with their bookings, retried until it succeeds.
3. Set `Runtime.ledger_current`: decisions resume (until then the assigner skips pods, the
   extender answers "not ready, retry", `/readyz` says so).
4. Judge every annotated pod (listed, or deferred meanwhile: `PodRecord.deferred`) in
   `judging_order` (`assigning.judge_pod`); a moment without a fresh Lease defers the rest.

Why no booking is lost or double-booked. A caught-up watch handed over every write stored
before our token, all of the previous holder's among them (fencing), deletions included.
After a list, take a pod P assigned when step 3 opens the gate: written before the list was
served, the list has it, and only a journaled end of that very pod (same uid) removes it;
written after, the watch delivers it (during the list the journal keeps it over the list's
older answer). Only a previous holder writing after our list could reach us later, which
fencing forbids (bar a write on the wire longer than `lease_duration - renew_deadline`, as
with any lease). A release before `begin_resync` is older than the list; one during it is
journaled as an end and wins; one after applies to the rebuilt ledger. Pods that vanished
while we stood by are not listed: their bookings go. In-flight reservations are kept.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Iterable
from typing import Any

from numatopo_engine import annotations as keys
from numatopo_operator import dra, translate
from numatopo_operator.errors import BookingError, KubeError
from numatopo_operator.pod_view import PodView, slim_pod
from numatopo_operator.runtime import CAUGHT_UP, Runtime
from numatopo_operator.translate import Booking, RawPod

logger = logging.getLogger(__name__)

# How long a new holder waits for its pod watch to hand over its token before it lists
# the pods instead: a watch that lags further behind is not worth waiting for.
CATCH_UP_SECONDS = 5.0
# Pause between attempts to list pods when the API refuses (or login is pending).
LIST_RETRY_SECONDS = 1.0
# How long step 4 may hold the event loop before it lets everything else run once.
JUDGE_SLICE_SECONDS = 0.02


def listed_bookings(runtime: Runtime, pods: Iterable[RawPod]) -> list[Booking]:
    """Listed pods' bookings, as on the watch (an unreadable assignment: none, reported)."""
    bookings: list[Booking] = []
    for pod in pods:
        view = PodView.of(pod)
        try:
            booking = translate.booking_from_pod(view, runtime.verifier)
        except BookingError as exc:
            runtime.pods.of(view.key).unreadable = str(exc)
            continue
        if booking is not None:
            bookings.append(booking)
    return bookings


async def _resync(runtime: Runtime) -> list[dict[str, Any]]:
    """One list of the annotated pods (their slim views) applied to the ledger, retried
    until it works; returns the pods. Waits for `pod_feed`'s first list, which would
    otherwise be journaled as newer."""
    await runtime.pods_listed.wait()
    ledger, namespaces = runtime.ledger, runtime.settings.namespaces
    while True:
        async with runtime.pod_lists:
            ledger.begin_resync()
            try:
                listing = await runtime.kube.list_pods(namespaces=namespaces, keep=_annotated)
            except KubeError as exc:
                ledger.abort_resync()
                level = logging.DEBUG if exc.reason == "NotLoggedIn" else logging.WARNING
                logger.log(level, "cannot list pods to rebuild the ledger (retrying): %s", exc)
            except BaseException:
                ledger.abort_resync()
                raise
            else:
                untrusted = ledger.end_resync(listed_bookings(runtime, listing.items))
                if untrusted:
                    logger.warning(
                        "bookings that overlap earlier claims after the resync: %s", untrusted
                    )
                return listing.items
        await asyncio.sleep(LIST_RETRY_SECONDS)


def _annotated(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The slim view of a pod with a numatopo annotation; None (not kept) for any other."""
    return slim_pod(pod) if translate.is_annotated(PodView(pod)) else None


async def _caught_up(runtime: Runtime) -> bool:
    """Step 2 without a list (`CatchUp`): True once the feed handed over our token; False
    without a watched pod of our own, or when it does not come in `CATCH_UP_SECONDS`."""
    settings = runtime.settings
    namespace, name = settings.pod_namespace, settings.pod_name
    if namespace is None or name is None:
        return False
    if settings.namespaces and namespace not in settings.namespaces:
        return False
    await runtime.pods_listed.wait()
    token = secrets.token_hex(8)
    runtime.catch_up.expect(f"{namespace}/{name}", token)
    started = time.monotonic()
    try:
        await runtime.kube.patch_pod_annotations(namespace, name, {CAUGHT_UP: token})
        async with asyncio.timeout(CATCH_UP_SECONDS):
            await runtime.catch_up.seen.wait()
    except (KubeError, TimeoutError) as exc:
        logger.warning(
            "the pod watch did not catch up (%s): listing pods instead", exc or "timeout"
        )
        return False
    finally:
        runtime.catch_up.expect("", "")
    logger.info("the pod watch caught up with the API in %.2f s", time.monotonic() - started)
    return True


def judging_order(pod: RawPod | PodView) -> tuple[bool, bool, str]:
    """Step 4's order: waiting pods first (they are what is held up; a valid assignment is
    left as it is), those never answered before those the previous holder refused (their
    retries go on anyway), so a new pod does not wait behind every refusal; oldest first.
    Timings: docs/operations.md, "After a takeover"."""
    metadata = pod.get("metadata") or {}
    return (
        not translate.is_waiting(pod),
        keys.STATE in (metadata.get("annotations") or {}),
        str(metadata.get("creationTimestamp") or ""),
    )


async def take_over(runtime: Runtime, *, relist: bool = True) -> None:
    """Steps 2-4 (`relist=False`: the Lease's first holder); cancelled when the Lease is
    lost. Without a list, the pods judged are those the feed keeps (`PodRecord.annotated`)."""
    if relist and not await _caught_up(runtime):
        pods: list[RawPod] = list(await _resync(runtime))
        logger.info(
            "ledger rebuilt from %d listed pods (%d booked)", len(pods), len(runtime.ledger)
        )
    else:
        await runtime.pods_listed.wait()
        pods = list(runtime.pods.annotated())
        logger.info("the ledger as listed and watched is current (%d booked)", len(runtime.ledger))
    runtime.metrics.ledger_pods.set(len(runtime.ledger))
    # The nodes too (`cluster_feed`): no pod is judged against a half-listed cluster.
    await runtime.indexed.wait()
    views = (PodView.of(pod) for pod in pods)
    runtime.ledger_current.set()
    await judge(runtime, {view.key: view for view in views})


async def judge(runtime: Runtime, pods: dict[str, PodView] | None = None) -> None:
    """Step 4: judge `pods` (key -> view) and every deferred pod, in `judging_order`.

    A renewal sent after the renew deadline stops the replica deciding until its answer,
    while it still holds the Lease: what is not judged yet is deferred again, never dropped
    (pods pass here once). `leadership` calls this again when that late renewal succeeds;
    a lost Lease cancels it. Valid assignments need no API call, so the pass yields every
    `JUDGE_SLICE_SECONDS` to the watches, the renewal and the extender."""
    pending = dict(pods or {})
    while True:
        pending.update(runtime.pods.take_deferred())  # newer than what was listed
        if not pending:
            return
        slice_ends = time.monotonic() + JUDGE_SLICE_SECONDS
        for pod in sorted(pending.values(), key=judging_order):
            if time.monotonic() >= slice_ends:
                await asyncio.sleep(0)
                slice_ends = time.monotonic() + JUDGE_SLICE_SECONDS
            if not runtime.deciding:
                for key, left in pending.items():
                    record = runtime.pods.of(key)
                    record.deferred = record.deferred or left
                return
            del pending[pod.key]
            if translate.is_annotated(pod) or dra.is_gated(pod):
                await dra.settle_pod(runtime, pod)
