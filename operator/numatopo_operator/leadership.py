"""Which replica decides, with kopf peering, and how the scheduler finds it (pure + loop).

kopf peering keeps every replica's `{priority, lastseen, lifetime}` in the status of a
`ClusterKopfPeering` (cluster-wide) or `KopfPeering` (namespaced) object, and pauses
a replica while a live peer has a higher priority, or the same one. kopf does not tell
its handlers whether it is paused, so `watch_leadership` reads the same object and
applies the same rule to set `Runtime.active`, which decides whether the extender
answers and which replica carries the `ACTIVE_LABEL` on its own pod.

Every replica is Ready (see `health`), so rolling updates and PodDisruptionBudgets work;
the extender Service selects on `ACTIVE_LABEL` instead, so it reaches the active one.
The order of the two steps keeps a handover safe: a replica that becomes active sets
`Runtime.active` before it labels its pod (traffic never reaches a replica that would
refuse it for that reason), and one that stands down clears `Runtime.active` before it
removes the label. Becoming active also clears `Runtime.ledger_current` and starts
`handover.take_over`, which rebuilds the ledger from a fresh list of pods before this
replica decides again (kopf's paused watches missed what the peer booked meanwhile);
standing down cancels it. While two pods carry the label (a handover, a label write that
failed), the Service may send a call to the one that is not active: it answers with an
Error, which the scheduler treats as a failed attempt and retries, and it never binds.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from numatopo_operator import handover
from numatopo_operator.errors import KubeError
from numatopo_operator.runtime import Runtime

__all__ = [
    "ACTIVE_LABEL",
    "ACTIVE_VALUE",
    "PodLabel",
    "is_active",
    "label_patch",
    "live_peers",
    "own_pod",
    "stand_down",
    "watch_leadership",
]

logger = logging.getLogger(__name__)

POLL_SECONDS = 5.0
ACTIVE_LABEL = "numatopo.io/extender-active"
ACTIVE_VALUE = "true"
# Removing the label on shutdown must not hold up the pod's termination for long.
SHUTDOWN_LABEL_SECONDS = 5.0


def _parse_time(text: object) -> datetime.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def live_peers(
    peers: Mapping[str, Any], *, identity: str, now: datetime.datetime
) -> dict[str, int]:
    """Other peers that kopf counts as alive: identity -> priority."""
    alive: dict[str, int] = {}
    for peer_id, info in peers.items():
        if peer_id == identity or not isinstance(info, Mapping):
            continue
        lastseen = _parse_time(info.get("lastseen"))
        lifetime = info.get("lifetime", 60)
        if lastseen is None or not isinstance(lifetime, int | float):
            continue
        if lastseen + datetime.timedelta(seconds=lifetime) < now:
            continue  # dead: kopf cleans it up
        alive[peer_id] = int(info.get("priority", 0))
    return alive


def is_active(
    peers: Mapping[str, Any], *, identity: str, priority: int, now: datetime.datetime
) -> bool:
    """True unless another live peer has a priority at least ours (kopf's pause rule)."""
    alive = live_peers(peers, identity=identity, now=now)
    return all(other < priority for other in alive.values())


def handover_grace() -> float:
    """How long a replica that becomes active waits while a live peer may still decide:
    that peer stops at its next poll of the peering object, two polls at the latest."""
    return 2 * POLL_SECONDS


def label_patch(*, active: bool, labelled: bool | None) -> dict[str, str | None] | None:
    """The label merge patch that makes our pod say `active`, or None when it already does.

    `labelled` is what we last wrote successfully; None means unknown (at start, after a
    failed write): then the patch is sent either way, because a restarted container finds
    its pod still labelled by the process before it.
    """
    if labelled is not None and labelled == active:
        return None
    return {ACTIVE_LABEL: ACTIVE_VALUE if active else None}


@dataclass
class PodLabel:
    """This replica's own pod and what its `ACTIVE_LABEL` says, as far as we know."""

    namespace: str
    name: str
    labelled: bool | None = None

    async def sync(self, runtime: Runtime, *, active: bool) -> None:
        """Make the label say `active`; on an API error, log it and try on the next call."""
        patch = label_patch(active=active, labelled=self.labelled)
        if patch is None:
            return
        try:
            await runtime.kube.patch_pod_labels(self.namespace, self.name, patch)
        except KubeError as exc:
            self.labelled = None
            logger.warning(
                "cannot %s label %s on pod %s/%s: %s",
                "set" if active else "remove",
                ACTIVE_LABEL,
                self.namespace,
                self.name,
                exc,
            )
        else:
            self.labelled = active


def own_pod(runtime: Runtime) -> PodLabel | None:
    """Our pod, from the downward API settings; None outside a pod (nothing to label)."""
    settings = runtime.settings
    if settings.pod_name is None or settings.pod_namespace is None:
        return None
    return PodLabel(settings.pod_namespace, settings.pod_name)


async def _poll_active(
    runtime: Runtime, *, identity: str, priority: int
) -> tuple[bool, bool] | None:
    """(whether kopf keeps us active now, whether another live peer exists); None when
    the peering object cannot be read."""
    settings = runtime.settings
    if settings.peering_name is None:
        return True, False
    namespace = settings.namespaces[0] if settings.namespaces else None
    try:
        peers = await runtime.kube.get_peering(settings.peering_name, namespace=namespace)
    except KubeError as exc:
        # Right after start kopf has not logged in yet: expected, and retried next poll.
        level = logging.DEBUG if exc.reason == "NotLoggedIn" else logging.WARNING
        logger.log(level, "cannot read peering %s: %s", settings.peering_name, exc)
        return None
    now = datetime.datetime.now(datetime.UTC)
    alive = live_peers(peers, identity=identity, now=now)
    return all(other < priority for other in alive.values()), bool(alive)


async def watch_leadership(
    runtime: Runtime,
    *,
    identity: str,
    priority: int,
    label: PodLabel | None,
) -> None:
    """Forever: keep `runtime.active` equal to "kopf would not pause us" (always, when
    standalone), and our pod's label equal to `runtime.active`; rebuild the ledger on
    every transition to active (`handover`)."""
    taking_over: asyncio.Task[None] | None = None
    try:
        while True:
            polled = await _poll_active(runtime, identity=identity, priority=priority)
            if polled is not None:
                active, others_alive = polled
                if active and not runtime.active.is_set():
                    logger.info("this replica (%s) is now the active one", identity)
                    runtime.ledger_current.clear()
                    runtime.active.set()
                    taking_over = asyncio.create_task(
                        handover.take_over(
                            runtime, grace=handover_grace() if others_alive else 0.0
                        ),
                        name="numatopo take-over",
                    )
                elif not active and runtime.active.is_set():
                    logger.info("this replica (%s) stands by: a peer has priority", identity)
                    runtime.active.clear()
                    runtime.ledger_current.clear()
                    if taking_over is not None:
                        taking_over.cancel()
                runtime.role_known.set()
            if label is not None and runtime.role_known.is_set():
                await label.sync(runtime, active=runtime.active.is_set())
            await asyncio.sleep(POLL_SECONDS)
    finally:
        if taking_over is not None:
            taking_over.cancel()
            await asyncio.gather(taking_over, return_exceptions=True)


async def stand_down(runtime: Runtime, label: PodLabel | None) -> None:
    """On shutdown: stop answering as the active replica, then take the label away, so
    the Service stops sending calls here before the process is gone."""
    runtime.active.clear()
    runtime.ledger_current.clear()
    if label is None:
        return
    label.labelled = None  # whatever we last wrote, remove it
    try:
        await asyncio.wait_for(label.sync(runtime, active=False), SHUTDOWN_LABEL_SECONDS)
    except TimeoutError:
        logger.warning("gave up removing label %s on shutdown", ACTIVE_LABEL)
