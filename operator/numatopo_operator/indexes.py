"""kopf indexes: Numatopology specs by node, booked pods by node, waiting pods by node.

kopf lists every pod and every Numatopology into its indexes before it calls any
other handler. That is what makes a restart safe: these index functions are also the
ledger's feed, so the ledger holds every existing assignment before the first decision.
They run for every event except deletions (kopf drops deleted objects from indexes on
its own; `handlers` then frees their bookings). They return `{}`, never None, for an
object that no longer belongs in the index: kopf keeps an object's old entries when a
function returns None.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

import kopf
import pydantic

from numatopo_engine import annotations as keys
from numatopo_engine.model import NumatopologySpec
from numatopo_operator import translate
from numatopo_operator.errors import BookingError
from numatopo_operator.runtime import Runtime

__all__ = ["booked_pods", "heartbeat_of", "numatopologies", "stale_reason", "waiting_pods"]


def heartbeat_of(body: kopf.Body) -> float | None:
    """`status.heartbeat` as Unix seconds; None when absent or unreadable (an exporter
    older than the field writes none: such a node is never called stale for it)."""
    text = (body.get("status") or {}).get("heartbeat")
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def stale_reason(body: kopf.Body) -> str | None:
    """Why a Numatopology cannot be trusted now: its exporter says it is not current."""
    conditions = (body.get("status") or {}).get("conditions") or []
    for condition in conditions:
        if (
            isinstance(condition, dict)
            and condition.get("type") == "Exported"
            and condition.get("status") != "True"
        ):
            why = condition.get("message") or condition.get("reason") or "no reason given"
            state = condition.get("status")
            return f"Numatopology/{body.metadata.name} is stale (Exported={state}: {why})"
    return None


def numatopologies(
    *, body: kopf.Body, memo: Runtime, logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any
) -> dict[str, NumatopologySpec]:
    """node name -> its validated spec; an invalid spec is logged and the node left out."""
    node = body.metadata.name
    try:
        spec = NumatopologySpec.model_validate(body.get("spec") or {})
    except pydantic.ValidationError as exc:
        logger.error("Numatopology/%s has an invalid spec, ignoring the node: %s", node, exc)
        memo.ledger.drop_topology(node)
        return {}
    reason = stale_reason(body)
    if reason is None:
        memo.stale.pop(node, None)
    else:
        memo.stale[node] = reason
    beat = heartbeat_of(body)
    if beat is None:
        memo.heartbeats.pop(node, None)
    else:
        memo.heartbeats[node] = beat
    memo.ledger.set_topology(node, spec)
    return {node: spec}


def booked_pods(*, body: kopf.Body, memo: Runtime, **_: Any) -> dict[str, str]:
    """node name -> keys of pods whose assignment is booked there."""
    key = translate.pod_key(body)
    if memo.written.get(key) == body.metadata.annotations.get(keys.STATE):
        memo.written.pop(key, None)
    try:
        booking = translate.booking_from_pod(body)
    except BookingError as exc:
        memo.unreadable[key] = str(exc)
        memo.ledger.observe_absent(key)
        return {}
    memo.unreadable.pop(key, None)
    if booking is None:
        if translate.is_finished(body):
            memo.ledger.forget(key, uid=translate.pod_uid(body))
        else:
            memo.ledger.observe_absent(key)
        return {}
    memo.ledger.observe(booking)
    return {booking.node: key}


def waiting_pods(*, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
    """node name -> pods bound there that want a policy and have no assignment yet."""
    node = translate.pod_node(body)
    if node is None or not translate.is_waiting(body):
        return {}
    return {node: dict(body)}


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.index("numatopo.io", "v1alpha1", "numatopologies", registry=registry)(numatopologies)
    kopf.index("pods", registry=registry)(booked_pods)
    kopf.index("pods", registry=registry)(waiting_pods)
