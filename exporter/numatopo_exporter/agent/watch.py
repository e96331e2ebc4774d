"""Watch: list, then watch, this node's pods into the pod records, each event made a `PodView`
once (API I/O; docs/DESIGN.md, "Node agent (enforcement)")."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from numatopo_exporter.agent.pod_records import PodRecords
from numatopo_exporter.agent.pod_view import PodView
from numatopo_kube import KubeClient, KubeError
from numatopo_kube.backoff import Backoff

logger = logging.getLogger("numatopo.agent")


def take_event(records: PodRecords, event_type: str, pod: dict[str, Any]) -> bool:
    """Take one watch event into the records; whether it changed anything."""
    if event_type == "DELETED":
        records.drop(str((pod.get("metadata") or {}).get("uid", "")))
    elif event_type in ("ADDED", "MODIFIED"):
        records.take(PodView.of(pod))
    else:
        return False
    return True


@dataclass
class PodWatch:
    client: KubeClient
    node_name: str
    records: PodRecords
    backoff: Backoff
    probe_seconds: float
    synced: asyncio.Event
    """Set once the first listing is in the records."""
    changed: asyncio.Event
    """Set on every listing and every event that changed the records."""

    async def run(self) -> None:
        selector = {"spec.nodeName": self.node_name}
        while True:
            try:
                listing = await self.client.list_pods(field_selector=selector)
                self.backoff.reset()
                self.records.replace(PodView.of(pod) for pod in listing.items)
                self.synced.set()
                self.changed.set()
                async for event in self.client.watch_pods(
                    field_selector=selector, resource_version=listing.resource_version
                ):
                    self.backoff.reset()
                    if take_event(self.records, event.type, event.object):
                        self.changed.set()
            except KubeError as exc:
                logger.warning("watching pods on %s: %s", self.node_name, exc)
            await self._wait_for_api(self.backoff.next_delay(), selector=selector)

    async def _wait_for_api(self, seconds: float, *, selector: dict[str, str]) -> None:
        """Sleep up to `seconds` (the backoff), but end as soon as a cheap probe (a list of at most
        one of this node's pods) succeeds: after an outage the agent is back within
        `probe_seconds`, not after the next backoff step (up to a minute)."""
        deadline = asyncio.get_running_loop().time() + seconds
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            await asyncio.sleep(min(self.probe_seconds, left))
            try:
                await self.client.probe_pods(field_selector=selector)
            except KubeError:
                continue
            self.backoff.reset()
            return
