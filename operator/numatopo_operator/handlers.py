"""kopf's handlers (`build_registry`: the login, NetworkTopologies), and the thin logic the
feeds call for each event (`pod_seen`, `topology_seen`; docs/DESIGN.md, "Kubernetes
client"). The pod's own `numatopo.io/state` says whether it was decided, so handling is
idempotent. Retries follow the events that can change an answer, not timers: a pod waiting
for a Numatopology is retried when it appears, an Unsatisfiable pod when a pod on its node
releases CPUs or GPUs; what no event re-drives waits in the retry queue
(`assigning.settle`). The ledger is fed here and nowhere else on the watch side
(`_observe_pod`, `observe_topology`, deleted objects included).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import kopf

from numatopo_engine.model import GROUP, VERSION
from numatopo_engine.network_topology import NETWORK_TOPOLOGY_PLURAL
from numatopo_operator import assigning, dra, indexes, translate
from numatopo_operator.errors import BookingError, kept_serving
from numatopo_operator.groups import indexes as group_indexes
from numatopo_operator.groups import worker as group_worker
from numatopo_operator.pod_view import PodView
from numatopo_operator.runtime import Runtime

Logger = logging.Logger | logging.LoggerAdapter[Any]

logger = logging.getLogger(__name__)


async def login(*, memo: Runtime, logger: Logger, **kwargs: Any) -> kopf.ConnectionInfo:
    """Fixed credentials, else the service account, else `KUBECONFIG`, for kopf's watches;
    `memo.kube` connects from the same sources by itself, again at each re-login."""
    info = (
        memo.connection
        or kopf.login_with_service_account(logger=logger, **kwargs)
        or kopf.login_with_kubeconfig(logger=logger, **kwargs)
    )
    if info is None:
        raise kopf.LoginError(
            "no Kubernetes credentials: run in a pod with a service account, or set KUBECONFIG"
        )
    await memo.kube.reconnect(memo.connection.server if memo.connection else "")
    return info


def observe_topology(memo: Runtime, node: str, reading: indexes.TopologyReading | None) -> None:
    """Give the ledger the node's Numatopology as read now; None: deleted or invalid."""
    if reading is None:
        memo.ledger.drop_topology(node)
        memo.statuses.pop(node, None)
        memo.dra_holds.reported.pop(node, None)
        return
    if memo.statuses.get(node) != reading.status:
        # Another's write, or ours seen out of order: compared with the ledger again.
        memo.statuses[node] = reading.status
        memo.ledger.mark_dirty(node)
    memo.ledger.see_freshness(
        node, stale=reading.stale, heartbeat=reading.heartbeat, gpu_mode=reading.gpu_mode
    )
    # The ledger's spec object when equal: its DRA join (cached per object) is kept.
    known = memo.ledger.topology(node)
    spec = known if known is not None and known == reading.spec else reading.spec
    unhealthy = memo.dra_holds.unhealthy(node, spec, reading.unhealthy)
    memo.ledger.set_topology(node, spec, unhealthy)
    memo.dra_holds.sync(memo.ledger, node)  # the join depends on the spec


def _observe_pod(memo: Runtime, pod: PodView) -> None:
    """Give the ledger what a live pod's annotation books now (perhaps nothing)."""
    key, record = pod.key, memo.pods.get(pod.key)
    if record is not None and record.written == translate.state_of(pod):
        record.written = None
    try:
        booking = translate.booking_from_pod(pod, memo.verifier)
    except BookingError as exc:
        memo.pods.of(key).unreadable = str(exc)
        memo.ledger.observe_absent(key)
        return
    if record is not None:
        record.unreadable = None
    if booking is None:
        memo.ledger.observe_absent(key)
    else:
        memo.ledger.observe(booking)


async def _report_others(memo: Runtime, pod: PodView, logger: Logger) -> None:
    """Mark Invalid, once each, the other bookings on the node now overlapping earlier
    claims (their own events may never come again)."""
    key = pod.key
    node = memo.ledger.node_of(key) or pod.node
    if node is None:
        return
    for other, why in sorted(memo.ledger.untrusted(node).items()):
        record = memo.pods.get(other)
        if other == key or (record is not None and why in record.reported):
            continue
        namespace, _, name = other.partition("/")
        with kept_serving(logger, f"pod {other}", memo.metrics):
            named = PodView({"metadata": {"namespace": namespace, "name": name}})
            await assigning.mark_invalid(memo, named, why, event_reason=translate.UNTRUSTED)
            memo.pods.tell_once(other, why)


FollowUp = Callable[[], Awaitable[None]]


def pod_seen(
    memo: Runtime, type: str | None, body: dict[str, Any], logger: Logger
) -> FollowUp | None:
    """The bookkeeping of one pod as `pod_feed` saw it (`type`: the watch event's, None
    when listed), at once, in watch order. Returns what is left while deciding (API calls)
    for the pod's own worker: it never holds up the watch whose events it may await."""
    pod = PodView(body)
    key = pod.key
    with kept_serving(logger, f"pod {key}", memo.metrics):
        if memo.settings.groups:
            group_worker.observe_pod(memo, type or "ADDED", pod)
        if type == "DELETED" or pod.finished:
            node = memo.forget_pod(key, uid=pod.uid) or pod.node
            if node is not None and memo.deciding:
                return functools.partial(_redrive_kept, memo, node, logger)
            return None
        memo.waiting.observe(pod)
        annotated = translate.is_annotated(pod)
        record = memo.pods.of(key) if annotated else memo.pods.get(key)
        if record is not None:
            record.annotated = pod if annotated else None
        _observe_pod(memo, pod)
        memo.workload.observe_pod(key, pod, memo.settings.resources)
        if translate.is_admitted(pod):
            memo.gpu_admissions.admitted(key)
        memo.retries.refresh(key, pod)
        if not memo.deciding:
            if memo.active.is_set() and (annotated or dra.is_gated(pod)):
                memo.pods.of(key).deferred = pod  # judged once it decides (`handover.judge`)
            elif record is not None:
                record.deferred = None
            return None
        return functools.partial(_decide, memo, pod, logger)
    return None  # kept_serving logged what failed


async def _redrive_kept(memo: Runtime, node: str, logger: Logger) -> None:
    """Retry the pods waiting on `node`, oldest first."""
    with kept_serving(logger, f"pods waiting on {node}", memo.metrics):
        for pod in memo.waiting.on(node):
            await assigning.settle(memo, pod)


async def _decide(memo: Runtime, pod: PodView, logger: Logger) -> None:
    with kept_serving(logger, f"pod {pod.key}", memo.metrics):
        await _report_others(memo, pod, logger)
        await dra.settle_pod(memo, pod)


def topology_seen(
    memo: Runtime, node: str, reading: indexes.TopologyReading | None, logger: Logger
) -> FollowUp | None:
    """A node's Numatopology as `cluster_feed` read it (None: deleted or invalid), into the
    ledger at once; returns, while deciding, the re-judging of its waiting pods for the
    node's own worker."""
    with kept_serving(logger, f"Numatopology/{node}", memo.metrics):
        observe_topology(memo, node, reading)
        if reading is None:
            memo.redriven.pop(node, None)
            return None
        topology = memo.ledger.topology(node)
        # Our own status writes change the object too; only a new spec can change answers.
        if topology is None or memo.redriven.get(node) is topology or not memo.deciding:
            return None
        memo.redriven[node] = topology
        memo.groups.capacity_changed()
        return functools.partial(_redrive_kept, memo, node, logger)
    return None  # kept_serving logged what failed


async def network_topology_changed(*, memo: Runtime, **kwargs: Any) -> None:
    """New levels, or a topology that groups name appeared: every group looks again."""
    memo.groups.attach(kwargs)
    memo.groups.touch(memo.groups.book.groups())


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf's diff base for an operator with no change handlers. For change handlers kopf
    deep-copies every watched body into an "essence", then once per progress storage (a
    fifth of the operator's CPU in a 1,000-node burst). numatopo's event and index handlers
    never read that diff, so the essence is empty and nothing is stored on objects; a change
    handler added later needs kopf's storage back (a test checks for none)."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[kopf.FieldSpec] | None = None
    ) -> kopf.BodyEssence:
        del body, extra_fields  # kopf's signature; nothing of the object is kept
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        del body, patch, essence  # nothing to keep: no handler reads it back


def build_registry(*, groups: bool = True) -> kopf.OperatorRegistry:
    """A registry (not kopf's global) with the login and, with `groups`, NetworkTopologies."""
    registry = kopf.OperatorRegistry()
    if groups:
        group_indexes.register(registry)
        kopf.on.event(GROUP, VERSION, NETWORK_TOPOLOGY_PLURAL, registry=registry)(
            network_topology_changed
        )
    kopf.on.login(registry=registry)(login)
    return registry
