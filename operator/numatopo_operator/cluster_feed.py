"""Every Numatopology, and with groups every Node, from a list and a watch of our own
(`list_watch`), handed to `handlers.topology_seen` and the group worker's Node views (I/O;
the parsing is `indexes` and `groups.indexes`). Why not kopf indexes, the first list before
`Runtime.indexed`, and the spec kept for a Numatopology of the generation last parsed (a
status-only change, as every status PATCH of the holder's comes back; one without a
generation, an emulator's, is parsed every time): docs/DESIGN.md, "Kubernetes client".
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

from numatopo_engine.model import NumatopologySpec
from numatopo_operator import handlers, indexes, list_watch
from numatopo_operator.background import supervised
from numatopo_operator.groups import indexes as group_indexes
from numatopo_operator.runtime import Runtime

logger = logging.getLogger(__name__)

Body = dict[str, Any]


def _name_and_version(body: Body) -> tuple[str, str]:
    metadata = body.get("metadata") or {}
    return str(metadata.get("name") or ""), str(metadata.get("resourceVersion") or "")


def _generation(body: Body) -> int | None:
    found = (body.get("metadata") or {}).get("generation")
    return found if isinstance(found, int) and not isinstance(found, bool) else None


class _Kind:
    """One kind followed; `known`: name -> resourceVersion last handed over (a replay or not)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.known: dict[str, str] = {}

    def _take(self, body: Body) -> None:
        """`_read` the object unless it is the version last handed over (a replay)."""
        name, version = _name_and_version(body)
        if not version or self.known.get(name) != version:
            self.known[name] = version
            self._read(body)

    def _read(self, body: Body) -> None:
        raise NotImplementedError

    def _gone(self, name: str) -> None:
        raise NotImplementedError

    def _all_listed(self) -> None:
        raise NotImplementedError

    async def listed(self, items: list[Body]) -> None:
        await list_watch.in_turns(items, self._take)
        listed = {_name_and_version(body)[0] for body in items}
        for name in [name for name in self.known if name not in listed]:
            del self.known[name]
            self._gone(name)
        self._all_listed()

    def seen(self, type: str, body: Body) -> None:
        if type != "DELETED":
            self._take(body)
            return
        name = _name_and_version(body)[0]
        self.known.pop(name, None)
        self._gone(name)


class _Topologies(_Kind):
    def __init__(self, runtime: Runtime) -> None:
        super().__init__(runtime)
        self.workers = list_watch.KeyedWorkers()
        self.parsed: dict[str, tuple[int, NumatopologySpec]] = {}
        """node -> (generation, parsed spec) a status-only change reuses; the ledger's own
        object where equal (nothing held twice)."""

    def _hand_over(self, node: str, reading: indexes.TopologyReading | None) -> None:
        follow_up = handlers.topology_seen(self.runtime, node, reading, logger)
        if follow_up is not None:
            self.workers.run(f"Numatopology/{node}", follow_up)

    def _read(self, body: Body) -> None:
        node, generation = _name_and_version(body)[0], _generation(body)
        kept = self.parsed.get(node)
        if generation is not None and kept is not None and kept[0] == generation:
            self._hand_over(node, indexes.reading_with(indexes.kopf_body(body), kept[1], logger))
            return
        # An invalid spec gives no reading: the node is decided on no more.
        reading = indexes.numatopologies(body=indexes.kopf_body(body), logger=logger).get(node)
        self._hand_over(node, reading)
        if generation is None or reading is None:
            self.parsed.pop(node, None)
            return
        held = self.runtime.ledger.topology(node)
        same = held is not None and (held is reading.spec or held == reading.spec)
        self.parsed[node] = (generation, held if same and held is not None else reading.spec)

    def _gone(self, name: str) -> None:
        self.parsed.pop(name, None)
        self._hand_over(name, None)

    def _all_listed(self) -> None:
        self.runtime.indexed.set()


class _Nodes(_Kind):
    def __init__(self, runtime: Runtime) -> None:
        super().__init__(runtime)
        self.views: dict[str, list[group_indexes.NodeView]] = {}

    def _read(self, body: Body) -> None:
        for name, view in group_indexes.node_views(body=indexes.kopf_body(body)).items():
            self.views[name] = [view]

    def _gone(self, name: str) -> None:
        self.views.pop(name, None)

    def _all_listed(self) -> None:
        self.runtime.groups.attach({"node_views": self.views})


async def follow_cluster(runtime: Runtime) -> None:
    """Follow Numatopologies (and Nodes, with groups) until cancelled."""
    kube = runtime.kube
    topologies = _Topologies(runtime)

    # The lists called here by name, so that the chart's RBAC test finds every call.
    followed = [
        list_watch.Followed(
            "Numatopologies",
            lambda: kube.list_numatopologies(),  # noqa: PLW0108
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
                lambda: kube.list_nodes(),  # noqa: PLW0108
                lambda version: kube.watch_nodes(resource_version=version),
                nodes.listed,
                nodes.seen,
            )
        )
    tasks = [
        asyncio.create_task(
            supervised(runtime.metrics, f"{kind.name} feed", partial(list_watch.follow, kind)),
            name=f"numatopo {kind.name}",
        )
        for kind in followed
    ]
    try:
        await asyncio.gather(*tasks)
    finally:
        await list_watch.stop_all(tasks)
        await topologies.workers.stop()
