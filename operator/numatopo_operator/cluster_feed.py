"""Every Numatopology, and with groups every Node, from a list and a watch of our own
(`list_watch`), handed to `handlers.topology_seen` and the group worker's Node views
(I/O; the parsing is `indexes` and `groups.indexes`).

They were kopf indexes. kopf lists every indexed object before it calls any handler,
and in kopf 1.45 each listed object wakes every worker waiting at that gate: at 2,000
nodes most of a start-up went there. Here the first list of Numatopologies goes into
the ledger at once, and only then is `Runtime.indexed` set, so no decision or extender
answer ever sees a half-listed cluster; the group worker decides once the first list of
Nodes is in (`GroupState.nodes`).

An object listed or watched again with the resourceVersion last seen is skipped: the
API server gives every write a new one, so it is the same object (a relist, or a watch
that replays what a list gave), and a relist of a large cluster parses nothing again.

A Numatopology whose `metadata.generation` is the one of the spec last parsed for its
node has only a new status (the API server counts generations of spec changes only, the
status being a subresource): its spec is not parsed again. Every status PATCH the
holder writes comes back so; a burst of decisions on 300 nodes parsed 300 specs again
for nothing, a tenth of the operator's CPU. An object without a generation (an
emulator's) is parsed every time.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import kopf

from numatopo_engine.model import NumatopologySpec
from numatopo_kube import Listing
from numatopo_operator import handlers, indexes, list_watch
from numatopo_operator.groups import indexes as group_indexes
from numatopo_operator.runtime import Runtime

__all__ = ["follow_cluster"]

logger = logging.getLogger(__name__)

Body = dict[str, Any]


def _kopf_body(body: Body) -> kopf.Body:
    """The object as the parsing functions (once kopf index functions) read it."""
    return kopf.Body(cast(kopf.RawBody, body))


def _name_and_version(body: Body) -> tuple[str, str]:
    metadata = body.get("metadata") or {}
    return str(metadata.get("name") or ""), str(metadata.get("resourceVersion") or "")


def _generation(body: Body) -> int | None:
    found = (body.get("metadata") or {}).get("generation")
    return found if isinstance(found, int) and not isinstance(found, bool) else None


class _Versions:
    """name -> resourceVersion last handed over: what tells a replay from a change."""

    def __init__(self) -> None:
        self.known: dict[str, str] = {}

    def changed(self, body: Body) -> bool:
        name, version = _name_and_version(body)
        if version and self.known.get(name) == version:
            return False
        self.known[name] = version
        return True

    def vanished(self, listed: set[str]) -> list[str]:
        """The names known and not in `listed` (forgotten here)."""
        gone = [name for name in self.known if name not in listed]
        for name in gone:
            del self.known[name]
        return gone


class _Topologies:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.versions = _Versions()
        self.workers = list_watch.KeyedWorkers()
        self.parsed: dict[str, tuple[int, NumatopologySpec]] = {}
        """node -> (generation, its spec as parsed): what a status-only change reuses. The
        spec is the ledger's own object where the two are equal (nothing held twice)."""

    def _hand_over(self, node: str, reading: indexes.TopologyReading | None) -> None:
        follow_up = handlers.topology_seen(self.runtime, node, reading, logger)
        if follow_up is not None:
            self.workers.run(f"Numatopology/{node}", follow_up)

    def _read(self, body: Body) -> None:
        if not self.versions.changed(body):
            return
        node, generation = _name_and_version(body)[0], _generation(body)
        kept = self.parsed.get(node)
        if generation is not None and kept is not None and kept[0] == generation:
            self._hand_over(node, indexes.reading_with(_kopf_body(body), kept[1], logger))
            return
        # An invalid spec gives no reading: the node is decided on no more.
        reading = indexes.numatopologies(body=_kopf_body(body), logger=logger).get(node)
        self._hand_over(node, reading)
        if generation is None or reading is None:
            self.parsed.pop(node, None)
            return
        held = self.runtime.ledger.topology(node)
        same = held is not None and (held is reading.spec or held == reading.spec)
        self.parsed[node] = (generation, held if same and held is not None else reading.spec)

    async def listed(self, items: list[Body]) -> None:
        await list_watch.in_turns(items, self._read)
        for node in self.versions.vanished({_name_and_version(body)[0] for body in items}):
            self.parsed.pop(node, None)
            self._hand_over(node, None)
        self.runtime.indexed.set()

    def seen(self, type: str, body: Body) -> None:
        if type != "DELETED":
            self._read(body)
            return
        node = _name_and_version(body)[0]
        self.versions.known.pop(node, None)
        self.parsed.pop(node, None)
        self._hand_over(node, None)


class _Nodes:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.versions = _Versions()
        self.views: dict[str, list[group_indexes.NodeView]] = {}

    def _read(self, body: Body) -> None:
        if self.versions.changed(body):
            for name, view in group_indexes.node_views(body=_kopf_body(body)).items():
                self.views[name] = [view]

    async def listed(self, items: list[Body]) -> None:
        await list_watch.in_turns(items, self._read)
        for name in self.versions.vanished({_name_and_version(body)[0] for body in items}):
            self.views.pop(name, None)
        self.runtime.groups.attach({"node_views": self.views})

    def seen(self, type: str, body: Body) -> None:
        if type != "DELETED":
            self._read(body)
            return
        name = _name_and_version(body)[0]
        self.versions.known.pop(name, None)
        self.views.pop(name, None)


async def follow_cluster(runtime: Runtime) -> None:
    """Follow Numatopologies (and Nodes, with groups) until cancelled."""
    kube = runtime.kube
    topologies = _Topologies(runtime)

    # Called here by name, so that the chart's RBAC test finds every call of the client.
    async def list_topologies() -> Listing:
        return await kube.list_numatopologies()

    async def list_nodes() -> Listing:
        return await kube.list_nodes()

    followed = [
        list_watch.Followed(
            "Numatopologies",
            list_topologies,
            lambda version: kube.watch_numatopologies(resource_version=version),
            topologies.listed,
            topologies.seen,
        )
    ]
    if runtime.settings.groups:
        nodes = _Nodes(runtime)
        followed.append(
            list_watch.Followed(
                "Nodes",
                list_nodes,
                lambda version: kube.watch_nodes(resource_version=version),
                nodes.listed,
                nodes.seen,
            )
        )
    tasks = [
        asyncio.create_task(list_watch.follow(kind), name=f"numatopo {kind.name}")
        for kind in followed
    ]
    try:
        await asyncio.gather(*tasks)
    finally:
        await list_watch.stop_all(tasks)
        await topologies.workers.stop()
