"""Exports: each node's NodeResourceTopology and Volcano Numatopology, kept current (I/O;
built by the pure `numatopo_engine.exports`). The rules of writing (the holder only, with a
fresh Lease, from its ledger, coalesced per period, not forced): docs/DESIGN.md, "Exports".
Each term starts with a list of what numatopo wrote: unknown nodes' objects are deleted,
and a new holder writes only objects that differ from its ledger (no storm at takeover).
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from numatopo_engine.dra.join import DeviceId, DraNode
from numatopo_engine.exports.nrt import NodeResourceTopology, node_resource_topology
from numatopo_engine.exports.volcano import VolcanoNumatopology, volcano_numatopology
from numatopo_engine.exports.zones import MANAGED_BY, MANAGED_LABEL, DeviceNames
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.state import NodeState
from numatopo_kube.backoff import Backoff
from numatopo_operator.errors import (
    KubeConflictError,
    KubeError,
    KubeForbiddenError,
    KubeNotFoundError,
)
from numatopo_operator.runtime import COMPONENT, Runtime

logger = logging.getLogger(__name__)


class ExportFormat(enum.StrEnum):
    """An exported format; the value is its `format` label in the metrics."""

    NRT = "nrt"
    VOLCANO = "volcano"

    @property
    def kind(self) -> str:
        return (
            "NodeResourceTopology"
            if self is ExportFormat.NRT
            else "Numatopology.nodeinfo.volcano.sh"
        )

    @property
    def model(self) -> type[NodeResourceTopology] | type[VolcanoNumatopology]:
        return NodeResourceTopology if self is ExportFormat.NRT else VolcanoNumatopology

    def build(
        self,
        node: str,
        spec: NumatopologySpec,
        state: NodeState,
        dra: DraNode | None = None,
        extended: Mapping[DeviceId, tuple[str, ...]] | None = None,
    ) -> NodeResourceTopology | VolcanoNumatopology:
        """`node`'s object; with `dra` (joined slices), the NRT names DRA devices by `dra_names`."""
        if self is ExportFormat.NRT:
            return node_resource_topology(node, spec, state, dra_names(dra, extended or {}))
        return volcano_numatopology(node, spec, state)


def dra_names(
    dra: DraNode | None, extended: Mapping[DeviceId, tuple[str, ...]]
) -> DeviceNames | None:
    """For each GPU and NIC a DRA driver publishes, the extended resources DeviceClasses
    serve it as (what a pod asks to get it without a claim), else `<driver>/<pool>` (as
    `status.dra` sums them up): names no device plugin advertises."""
    if dra is None:
        return None
    names = {d.id: extended.get(d.id) or (f"{d.id.driver}/{d.id.pool}",) for d in dra.devices}
    gpus = {d.gpu: names[d.id] for d in dra.devices if d.gpu is not None}
    nics = {d.nic: names[d.id] for d in dra.devices if d.nic is not None}
    return DeviceNames(gpus, nics) if gpus or nics else None


# The `reason` label of a failed call, and what to do about it.
_FAILURES: dict[type[KubeError], tuple[str, str]] = {
    KubeNotFoundError: ("not_found", "is its CRD installed?"),
    KubeConflictError: (
        "conflict",
        "another writer owns it (NFD's topology-updater, Volcano's resource-exporter?): run "
        "one of them for this format",
    ),
    KubeForbiddenError: (
        "forbidden",
        "the operator's account may not write it (chart value exports.*)",
    ),
}


_SWEEP = ""
"""The `failing` key of the list at the start of a term (no node has an empty name)."""


def content_digest(built: NodeResourceTopology | VolcanoNumatopology) -> bytes:
    """An object's JSON (field order: equal objects, equal digests) hashed to 16 bytes."""
    wire = built.model_dump_json(by_alias=True, exclude_none=True).encode()
    return hashlib.blake2b(wire, digest_size=16).digest()


@dataclass
class ExportWriter:
    """One format's writer: what it last wrote per node, and which nodes to try later."""

    runtime: Runtime
    format: ExportFormat
    written: dict[str, bytes] = field(default_factory=dict)
    """node -> digest of the object last written (an unchanged one is not written again);
    not the object: a 208-CPU node's Volcano object is ~60 KB of dicts."""
    seen: dict[str, tuple[NumatopologySpec, NodeState, int, DraNode | None, object]] = field(
        default_factory=dict
    )
    """node -> (topology, state, version, joined slices, extended names) of its last
    write: unchanged ones are skipped."""
    failing: dict[str, Backoff] = field(default_factory=dict)
    swept: bool = False

    def _failed(self, node: str, exc: KubeError, doing: str) -> None:
        settings = self.runtime.settings
        backoff = self.failing.setdefault(
            node, Backoff(settings.retry_base_seconds, settings.retry_max_seconds)
        )
        pause = backoff.schedule(time.monotonic())
        default = ("unavailable" if exc.transient else "refused", "")
        reason, hint = next((f for k, f in _FAILURES.items() if isinstance(exc, k)), default)
        self.runtime.metrics.export_errors.labels(self.format.value, reason).inc()
        # A node's first failure is a warning; repeats are counted, logged at debug only.
        level = logging.WARNING if backoff.attempts == 1 else logging.DEBUG
        what, hint = self.format.kind + (f"/{node}" if node else ""), f"; {hint}" if hint else ""
        logger.log(level, "%s %s failed (again in %.1f s)%s: %s", doing, what, pause, hint, exc)

    def _due(self, node: str) -> bool:
        backoff = self.failing.get(node)
        return backoff is None or time.monotonic() >= backoff.due

    async def _apply(self, body: dict[str, Any]) -> None:
        kube = self.runtime.kube
        if self.format is ExportFormat.NRT:
            await kube.apply_node_resource_topology(body, field_manager=COMPONENT)
        else:
            await kube.apply_volcano_numatopology(body, field_manager=COMPONENT)

    async def _delete(self, node: str) -> None:
        kube = self.runtime.kube
        if self.format is ExportFormat.NRT:
            await kube.delete_node_resource_topology(node)
        else:
            await kube.delete_volcano_numatopology(node)

    def _held(self, item: dict[str, Any]) -> bytes:
        """A listed object's `content_digest` over the metadata we write only (the server
        adds uid, versions, managed fields); b"" when it does not read as our model."""
        metadata = item.get("metadata") or {}
        ours = {"name": metadata.get("name"), "labels": metadata.get("labels") or {}}
        try:
            return content_digest(self.format.model.model_validate({**item, "metadata": ours}))
        except ValidationError:
            return b""

    async def _listed(self) -> list[dict[str, Any]]:
        """The objects of this format that numatopo wrote."""
        kube = self.runtime.kube
        if self.format is ExportFormat.NRT:
            listing = await kube.list_node_resource_topologies(label_selector=MANAGED_LABEL)
        else:
            listing = await kube.list_volcano_numatopologies(label_selector=MANAGED_LABEL)
        # Checked here too: a server ignoring the selector must not make us delete others'.
        return [
            item
            for item in listing.items
            if (item["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by")
            == MANAGED_BY
        ]

    async def _sweep(self, known: set[str]) -> None:
        """Take what numatopo's listed objects hold as last written (an equal one is not
        written again); those of nodes without a Numatopology are deleted."""
        if not self._due(_SWEEP):
            return
        try:
            items = await self._listed()
        except KubeError as exc:
            self._failed(_SWEEP, exc, "listing")
            return
        self.failing.pop(_SWEEP, None)
        for item in items:
            name = str(item["metadata"]["name"])
            if name in self.written:
                continue
            # b"" for a node that went away: deleted below, as a node we wrote.
            self.written[name] = self._held(item) if name in known else b""
            # One object's parse at a time between turns of the loop, as in `sync`.
            await asyncio.sleep(0)
        self.swept = True

    async def sync(self) -> None:
        """Write every node that changed since its last write; delete the ones gone."""
        ledger, runtime = self.runtime.ledger, self.runtime
        records = list(ledger.records())
        nodes = {record.name for record in records}
        if not self.swept:
            await self._sweep(nodes)
            if not self.swept:
                # No list (no CRD, RBAC or API): one call per back-off, not one per node.
                return
        for record in records:
            node, topology, state = record.name, record.topology, record.state
            if topology is None or state is None:
                continue
            # Both cached: new when the node's slices (or the DeviceClasses) change.
            dra = runtime.dra_holds.joined(node, topology)
            extended = runtime.dra_holds.extended(node, topology)
            mark = (topology, state, state.version, dra, extended)
            last = self.seen.get(node)
            if last and last[2] == mark[2] and all(last[i] is mark[i] for i in (0, 1, 3, 4)):
                continue
            if not self._due(node):
                continue
            built = self.format.build(node, topology, state, dra, extended)
            digest = content_digest(built)
            # One node's translation (tens of ms at 64 NUMA) per loop turn: renewals never wait.
            await asyncio.sleep(0)
            if self.written.get(node) == digest:
                self.seen[node] = mark
                continue
            if not runtime.lease_fresh():
                return  # fenced: the next holder writes it
            try:
                await self._apply(built.to_wire())
            except KubeError as exc:
                self._failed(node, exc, "writing")
                if isinstance(exc, KubeNotFoundError):
                    self.swept = False  # the CRD went away: back to one list per back-off
                    return
                continue
            self.written[node] = digest
            self.seen[node] = mark
            self.failing.pop(node, None)
            runtime.metrics.exports_written.labels(self.format.value).inc()
        for node in sorted(set(self.written) - nodes):
            if not self._due(node):
                continue
            if not runtime.lease_fresh():
                return
            try:
                await self._delete(node)
            except KubeError as exc:
                self._failed(node, exc, "deleting")
                continue
            del self.written[node]
            self.seen.pop(node, None)
            self.failing.pop(node, None)
            runtime.metrics.exports_deleted.labels(self.format.value).inc()


def enabled_formats(runtime: Runtime) -> list[ExportFormat]:
    settings = runtime.settings
    wanted = {ExportFormat.NRT: settings.export_nrt, ExportFormat.VOLCANO: settings.export_volcano}
    return [fmt for fmt, on in wanted.items() if on]


async def write_exports(runtime: Runtime) -> None:
    """Forever, when a format is on: every period, bring each node's objects up to date."""
    writers = [ExportWriter(runtime, fmt) for fmt in enabled_formats(runtime)]
    if not writers:
        return
    logger.info("exporting %s", ", ".join(w.format.kind for w in writers))
    while True:
        await asyncio.sleep(runtime.settings.status_debounce_seconds)
        if not runtime.deciding:
            # The next term starts afresh, with a sweep (another may write meanwhile).
            writers = [ExportWriter(runtime, writer.format) for writer in writers]
            continue
        for writer in writers:
            try:
                await writer.sync()
            except Exception:
                # A bug in one pass must not end the writer: log it, count it, go on.
                runtime.metrics.handler_errors.inc()
                logger.exception("%s export pass failed", writer.format.kind)
