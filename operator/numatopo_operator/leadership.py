"""Which replica decides, with kopf peering: the same rule kopf uses to pause (pure + loop).

kopf peering keeps every replica's `{priority, lastseen, lifetime}` in the status of a
`ClusterKopfPeering` (cluster-wide) or `KopfPeering` (namespaced) object, and pauses
a replica while a live peer has a higher priority, or the same one. kopf does not tell
its handlers whether it is paused, so `watch_leadership` reads the same object and
applies the same rule to set `Runtime.active`, which drives `/readyz` (and through it
which replica the scheduler's Service reaches) and whether the extender answers.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Mapping
from typing import Any

from numatopo_operator.errors import KubeError
from numatopo_operator.runtime import Runtime

__all__ = ["is_active", "watch_leadership"]

logger = logging.getLogger(__name__)

POLL_SECONDS = 5.0


def _parse_time(text: object) -> datetime.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def is_active(
    peers: Mapping[str, Any], *, identity: str, priority: int, now: datetime.datetime
) -> bool:
    """True unless another live peer has a priority at least ours (kopf's pause rule)."""
    for peer_id, info in peers.items():
        if peer_id == identity or not isinstance(info, Mapping):
            continue
        lastseen = _parse_time(info.get("lastseen"))
        lifetime = info.get("lifetime", 60)
        if lastseen is None or not isinstance(lifetime, int | float):
            continue
        if lastseen + datetime.timedelta(seconds=lifetime) < now:
            continue  # dead: kopf cleans it up
        if int(info.get("priority", 0)) >= priority:
            return False
    return True


async def watch_leadership(runtime: Runtime, *, identity: str, priority: int) -> None:
    """Forever: keep `runtime.active` equal to "kopf would not pause us"."""
    settings = runtime.settings
    assert settings.peering_name is not None
    namespace = settings.namespaces[0] if settings.namespaces else None
    while True:
        try:
            peers = await runtime.kube.get_peering(settings.peering_name, namespace=namespace)
        except KubeError as exc:
            logger.warning("cannot read peering %s: %s", settings.peering_name, exc)
        else:
            now = datetime.datetime.now(datetime.UTC)
            active = is_active(peers, identity=identity, priority=priority, now=now)
            if active and not runtime.active.is_set():
                logger.info("this replica (%s) is now the active one", identity)
                runtime.active.set()
            elif not active and runtime.active.is_set():
                logger.info("this replica (%s) stands by: a peer has priority", identity)
                runtime.active.clear()
        await asyncio.sleep(POLL_SECONDS)
