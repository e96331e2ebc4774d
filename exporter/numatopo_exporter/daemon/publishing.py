"""Publishing `Numatopology/<node>`: the object to write (pure) and the publisher (API I/O).

1. Every publish GETs the object and compares the hash of the spec stored there with the scanned
   one's: hashing what is stored, not remembering what was sent, also catches a hand edit or a
   deletion, so a resync repairs both without a watch (the watch only makes the repair prompt).
2. Only when they differ: server-side apply of the whole object (field manager
   `numatopo-exporter`, forced: this process owns the spec), with an ownerReference to the Node
   so that it is garbage-collected with its node.
3. Server-side apply of the status with only the exporter's fields, its conditions (`Exported`,
   `Degraded`) and `heartbeat` (each writer applies only its own: docs/DESIGN.md, "The CRD"),
   when a condition would change or after a new scan (the heartbeat: every resync). A republish
   that finds nothing new (the watch saw our own write, or the operator's) writes nothing, which
   matters on large clusters.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from pydantic import ValidationError

from numatopo_engine.model import API_VERSION, KIND, NumatopologySpec
from numatopo_exporter.agent.feedback import MESSAGE_LIMIT, now_text
from numatopo_exporter.node_process import check_node, watch_own_numatopology
from numatopo_kube import KubeClient
from numatopo_kube.backoff import Backoff

FIELD_MANAGER = "numatopo-exporter"
HASH_ANNOTATION = "numatopo.io/spec-hash"
EXPORTED = "Exported"
DEGRADED = "Degraded"

logger = logging.getLogger("numatopo.exporter")


def spec_hash(spec: NumatopologySpec) -> str:
    """A short, stable content hash of the spec's wire form (key order does not matter)."""
    canonical = json.dumps(spec.to_wire(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def build_object(*, node_name: str, node_uid: str | None, spec: NumatopologySpec) -> dict[str, Any]:
    """The whole object to apply; `node_uid` None leaves out the ownerReference (dry runs)."""
    metadata: dict[str, Any] = {
        "name": node_name,
        "annotations": {HASH_ANNOTATION: spec_hash(spec)},
    }
    if node_uid is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}
        ]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec.to_wire()}


def published_hash(obj: dict[str, Any], *, node_uid: str) -> str | None:
    """The hash of the spec stored in `obj`; None if it is not a valid spec or not owned by the
    node (both mean: publish again)."""
    owners = obj.get("metadata", {}).get("ownerReferences") or []
    if not any(o.get("kind") == "Node" and o.get("uid") == node_uid for o in owners):
        return None
    try:
        return spec_hash(NumatopologySpec.model_validate(obj.get("spec") or {}))
    except ValidationError:
        return None


def _condition(
    old: dict[str, Any] | None, *, type_: str, status: str, reason: str, message: str, now: float
) -> dict[str, Any]:
    """A condition, keeping the stored transition time while the status stays the same."""
    kept = old is not None and old.get("status") == status and old.get("lastTransitionTime")
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": old["lastTransitionTime"] if kept and old else now_text(now),
    }


def plan_exported_condition(
    conditions: list[dict[str, Any]], *, digest: str, scanned_at: float, now: float
) -> dict[str, Any] | None:
    """The `Exported` condition for spec `digest`; None when the stored one already says that."""
    old = next((c for c in conditions if c.get("type") == EXPORTED), None)
    if old is not None and old.get("status") == "True" and digest in str(old.get("message")):
        return None
    message = f"spec {digest} published from the scan at {now_text(scanned_at)}"
    return _condition(
        old, type_=EXPORTED, status="True", reason="Published", message=message, now=now
    )


def degraded_condition(
    conditions: list[dict[str, Any]], *, ignored: Sequence[str], now: float
) -> dict[str, Any]:
    """`Degraded`: True naming what discovery ignored to publish the rest, else False; always
    present, so that `kubectl wait` and alerts can tell "read cleanly" from "not reported yet"."""
    old = next((c for c in conditions if c.get("type") == DEGRADED), None)
    status, reason = ("True", "IgnoredInput") if ignored else ("False", "AllInputRead")
    message = "published what could be read; ignored: " + "; ".join(ignored)
    if not ignored:
        message = "discovery used every topology input it found"
    elif len(message) > MESSAGE_LIMIT:
        message = message[: MESSAGE_LIMIT - 25] + " ... (see exporter log)"
    return _condition(old, type_=DEGRADED, status=status, reason=reason, message=message, now=now)


def plan_status(
    stored: dict[str, Any],
    *,
    digest: str,
    scanned_at: float,
    ignored: Sequence[str],
    heartbeat: str | None,
    now: float,
) -> dict[str, Any] | None:
    """The status fields the exporter owns, to apply; None when nothing would change. `heartbeat`
    is the new beat after a scan, or None (a republish: no beat due). Every apply carries all the
    exporter's fields, beat included: server-side apply removes a field its manager leaves out."""
    conditions = [c for c in stored.get("conditions") or [] if isinstance(c, dict)]
    exported = plan_exported_condition(conditions, digest=digest, scanned_at=scanned_at, now=now)
    degraded = degraded_condition(conditions, ignored=ignored, now=now)
    old_degraded = next((c for c in conditions if c.get("type") == DEGRADED), None)
    stored_beat = str(stored.get("heartbeat") or "")
    if exported is None and degraded == old_degraded and heartbeat is None:
        return None
    if exported is None:
        exported = next(c for c in conditions if c.get("type") == EXPORTED)
    return {
        "conditions": [exported, degraded],
        "heartbeat": heartbeat or stored_beat or now_text(now),
    }


@dataclass(eq=False)
class PrintingSink:
    """`--no-publish`: print the object that would be applied, once per distinct spec."""

    node_name: str
    out: TextIO = field(default_factory=lambda: sys.stdout)
    """sys.stdout as it is when made, not at import: callers (and tests) may redirect it."""
    _last: str | None = field(default=None, init=False)

    async def publish(
        self, spec: NumatopologySpec, *, scanned_at: float, ignored: Sequence[str] = ()
    ) -> bool:
        digest = spec_hash(spec)
        if digest == self._last:
            return False
        self._last = digest
        obj = build_object(node_name=self.node_name, node_uid=None, spec=spec)
        self.out.write(json.dumps(obj, indent=2) + "\n")
        self.out.flush()
        return True


@dataclass(eq=False)
class Publisher:
    """Keeps `Numatopology/<node_name>` equal to the last scan, through `client`."""

    client: KubeClient
    node_name: str
    clock: Callable[[], float]
    _node_uid: str | None = field(default=None, init=False)
    _beat_scanned_at: float | None = field(default=None, init=False)

    async def node_uid(self) -> str:
        if self._node_uid is None:
            node = await check_node(self.client, self.node_name)
            self._node_uid = str(node["metadata"]["uid"])
        return self._node_uid

    async def publish(
        self, spec: NumatopologySpec, *, scanned_at: float, ignored: Sequence[str] = ()
    ) -> bool:
        """Make the published spec equal `spec` (`ignored`: the input discovery left out to
        publish the rest, for Degraded); True if something was written."""
        uid = await self.node_uid()
        digest = spec_hash(spec)
        current = await self.client.get_numatopology(self.node_name)
        wrote = False
        if current is None or published_hash(current, node_uid=uid) != digest:
            wanted = build_object(node_name=self.node_name, node_uid=uid, spec=spec)
            current = await self.client.apply_numatopology(wanted, field_manager=FIELD_MANAGER)
            wrote = True
            logger.info("published %s/%s spec %s", KIND, self.node_name, digest)
        now = self.clock()
        # A beat per scan, not per publish: the watch's republish after our own write
        # must not write again (that would be a write loop).
        beat = now_text(now) if scanned_at != self._beat_scanned_at else None
        planned = plan_status(
            current.get("status") or {},
            digest=digest,
            scanned_at=scanned_at,
            ignored=ignored,
            heartbeat=beat,
            now=now,
        )
        if planned is not None:
            await self.client.apply_numatopology_status(
                self.node_name, planned, field_manager=FIELD_MANAGER
            )
            self._beat_scanned_at = scanned_at
            wrote = True
        return wrote

    async def watch(self, on_change: Callable[[], None], *, backoff: Backoff) -> None:
        """Call `on_change` whenever our object is modified or deleted; runs until cancelled."""

        def seen(event_type: str, _: Mapping[str, Any]) -> None:
            if event_type in ("MODIFIED", "DELETED"):
                on_change()

        await watch_own_numatopology(self.client, self.node_name, backoff, seen, logger)


Sink = PrintingSink | Publisher
"""Where a scanned spec goes: stdout (`--no-publish`) or the API."""
