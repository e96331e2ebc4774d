"""The only module of the operator that calls the Kubernetes API (I/O).

kopf does the watching; the writes kopf's `patch` cannot express (patching a pod we
are not handling right now, Bindings, Events with names, Numatopology status) go
through `KubeClient`, an aiohttp session built from the `kopf.ConnectionInfo` that our
login handler resolved. So both use the same credentials, and on a re-login (an
expired service-account token) `KubeClient.use` gets the new ones too.

Client-library exceptions never leave this module: API errors become
`numatopo_operator.errors.KubeError` and its subclasses.

Idempotent calls (GETs and merge patches: sending one twice leaves the object as sending
it once) are retried a few times, with growing pauses, when the API server is briefly
unable to answer (429, 5xx, a dropped connection); when the answer carries `Retry-After`
(API Priority and Fairness sends it with 429), the pause is at least that long, capped
so that a bind still answers within the scheduler's extender timeout. Creating a
Binding is not retried:
after a lost answer a second POST would fail as "already bound" although the first one
bound the pod. Events are best-effort: a failed Event is logged, never raised.
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import aiohttp
import kopf

from numatopo_engine.model import API_VERSION, Numatopology
from numatopo_operator import errors

__all__ = ["COMPONENT", "KubeClient", "PodRef"]

MERGE_PATCH = "application/merge-patch+json"
COMPONENT = "numatopo-operator"
# The API server rejects Event messages above 1 KiB on some versions; cut ours below that.
EVENT_MESSAGE_CHARS = 1000
REQUEST_TIMEOUT_SECONDS = 30
# Pauses before each retry of an idempotent call. Short on purpose: the extender's bind
# runs within the scheduler's extender timeout (10 s by default), so all retries of one
# call must stay well below it.
RETRY_DELAYS_SECONDS = (0.2, 0.5, 1.0)
# Statuses that say "try again": throttled, or the server (or a proxy before it) failing.
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
# The most we wait for one `Retry-After`: three of these still fit in the scheduler's
# 10 s extender timeout, and a server asking for minutes is better failed fast.
RETRY_AFTER_CAP_SECONDS = 2.0
# Pods per page when listing: bounded memory per answer on large clusters.
LIST_PAGE_SIZE = 500
# How often a list restarts from its first page when its continue token expired (410).
LIST_RESTARTS = 3

logger = logging.getLogger(__name__)

PodRef = Mapping[str, str]  # namespace, name, uid


class KubeClient:
    """A few typed calls over one aiohttp session; `use()` before the first call."""

    def __init__(
        self,
        *,
        retry_delays: Sequence[float] = RETRY_DELAYS_SECONDS,
        retry_after_cap: float = RETRY_AFTER_CAP_SECONDS,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self._info: kopf.ConnectionInfo | None = None
        self._session: aiohttp.ClientSession | None = None
        self._retry_delays = tuple(retry_delays)
        self._retry_after_cap = retry_after_cap
        self._sleep = sleep

    async def use(self, info: kopf.ConnectionInfo) -> None:
        """Talk to the server and with the credentials of `info` from now on."""
        old, self._session, self._info = self._session, None, info
        if old is not None:
            await old.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _open(self) -> tuple[aiohttp.ClientSession, str]:
        info = self._info
        if info is None:
            raise errors.KubeError(0, "NotLoggedIn", "no credentials yet (login pending)")
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=info.as_ssl_context()),
                headers=info.as_http_headers(),
                timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS),
            )
        return self._session, info.server.rstrip("/")

    async def _call(
        self,
        method: str,
        path: str,
        body: object,
        *,
        content_type: str = "application/json",
        idempotent: bool = False,
        params: Mapping[str, str] | None = None,
    ) -> Any:
        """One API call; an idempotent one is retried on transient failures."""
        delays = self._retry_delays if idempotent else ()
        for attempt in range(len(delays) + 1):
            try:
                return await self._call_once(
                    method, path, body, content_type=content_type, params=params
                )
            except errors.KubeError as exc:
                if attempt == len(delays) or not _transient(exc):
                    raise
                pause = delays[attempt]
                if exc.retry_after is not None:
                    pause = max(pause, min(exc.retry_after, self._retry_after_cap))
                logger.info("%s %s: %s; retrying in %.1f s", method, path, exc, pause)
                await self._sleep(pause)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _call_once(
        self,
        method: str,
        path: str,
        body: object,
        *,
        content_type: str,
        params: Mapping[str, str] | None,
    ) -> Any:
        session, server = self._open()
        try:
            async with session.request(
                method,
                server + path,
                params=None if params is None else dict(params),
                data=None if body is None else json.dumps(body),
                headers={"Content-Type": content_type},
            ) as response:
                text = await response.text()
                if response.status >= 400:
                    error = _api_error(response.status, text)
                    error.retry_after = _retry_after(response.headers.get("Retry-After"))
                    raise error
                return json.loads(text) if text else None
        except aiohttp.ClientError as exc:
            raise errors.KubeError(0, type(exc).__name__, f"{method} {path}: {exc}") from exc

    # -- pods ----------------------------------------------------------------------

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        found = await self._call(
            "GET", f"/api/v1/namespaces/{namespace}/pods/{name}", None, idempotent=True
        )
        if not isinstance(found, dict):
            raise errors.KubeError(200, "BadResponse", f"pod {namespace}/{name}: not an object")
        return found

    async def list_pods(self, *, namespaces: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Every pod in `namespaces` (all namespaces when empty), page by page.

        A continue token that expired between pages (410) restarts that namespace's list
        from its first page, so the answer never mixes two snapshots of one namespace.
        """
        found: list[dict[str, Any]] = []
        for namespace in namespaces or (None,):
            path = "/api/v1/pods"
            if namespace is not None:
                path = f"/api/v1/namespaces/{namespace}/pods"
            for restart in range(LIST_RESTARTS + 1):
                items: list[dict[str, Any]] = []
                params = {"limit": str(LIST_PAGE_SIZE)}
                try:
                    while True:
                        page = await self._call("GET", path, None, idempotent=True, params=params)
                        if not isinstance(page, dict) or not isinstance(page.get("items"), list):
                            raise errors.KubeError(200, "BadResponse", f"GET {path}: not a list")
                        items += [item for item in page["items"] if isinstance(item, dict)]
                        token = (page.get("metadata") or {}).get("continue")
                        if not token:
                            break
                        params["continue"] = str(token)
                except errors.KubeError as exc:
                    if exc.status != 410 or "continue" not in params or restart == LIST_RESTARTS:
                        raise
                    logger.info("GET %s: the continue token expired; listing again", path)
                    continue
                found += items
                break
        return found

    async def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> None:
        """Merge `annotations` into the pod's; a None value removes that key."""
        await self._call(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            {"metadata": {"annotations": dict(annotations)}},
            content_type=MERGE_PATCH,
            idempotent=True,
        )

    async def patch_pod_labels(
        self, namespace: str, name: str, labels: Mapping[str, str | None]
    ) -> None:
        """Merge `labels` into the pod's; a None value removes that key (the operator
        labels its own pod while it is the active replica)."""
        await self._call(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            {"metadata": {"labels": dict(labels)}},
            content_type=MERGE_PATCH,
            idempotent=True,
        )

    async def create_binding(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind the pod to `node`, as kube-scheduler does (the uid guards against a new pod
        of the same name)."""
        metadata: dict[str, str] = {"name": name, "namespace": namespace}
        if uid:
            metadata["uid"] = uid
        await self._call(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods/{name}/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": metadata,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            },
        )

    async def post_event(self, pod: PodRef, *, warning: bool, reason: str, message: str) -> bool:
        """A core/v1 Event about the pod, named as client-go names them (`<pod>.<hex time>`).

        Best-effort: False (and a log line) when the API refuses it. An Event only tells
        a person what happened; the pod's annotations already hold the outcome.
        """
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace, name = pod["namespace"], pod["name"]
        if len(message) > EVENT_MESSAGE_CHARS:
            message = message[: EVENT_MESSAGE_CHARS - 3] + "..."
        try:
            await self._call(
                "POST",
                f"/api/v1/namespaces/{namespace}/events",
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": namespace},
                    "involvedObject": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "namespace": namespace,
                        "name": name,
                        "uid": pod.get("uid", ""),
                    },
                    "type": "Warning" if warning else "Normal",
                    "reason": reason,
                    "message": message,
                    "source": {"component": COMPONENT},
                    "reportingComponent": COMPONENT,
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "count": 1,
                },
            )
        except errors.KubeError as exc:
            logger.warning("Event %s about pod %s/%s not posted: %s", reason, namespace, name, exc)
            return False
        return True

    # -- leases (leadership) -----------------------------------------------------------

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any]:
        """The Lease object; `KubeNotFoundError` when it does not exist yet."""
        found = await self._call(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", None
        )
        if not isinstance(found, dict):
            raise errors.KubeError(200, "BadResponse", f"lease {namespace}/{name}: not an object")
        return found

    async def create_lease(
        self, namespace: str, name: str, spec: Mapping[str, object]
    ) -> dict[str, Any]:
        """Create the Lease held as `spec` says; `KubeConflictError` if another replica
        created it first. Not retried here: the leadership loop tries again anyway."""
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": dict(spec),
        }
        found = await self._call(
            "POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", body
        )
        return found if isinstance(found, dict) else {}

    async def patch_lease(
        self,
        namespace: str,
        name: str,
        spec: Mapping[str, object],
        *,
        resource_version: str | None,
    ) -> dict[str, Any]:
        """Merge `spec` into the Lease's. With `resource_version`, the API server applies it
        only to that version of the object (409 otherwise): the compare-and-swap that
        makes two replicas unable to acquire one Lease at once."""
        metadata = {"resourceVersion": resource_version} if resource_version else {}
        found = await self._call(
            "PATCH",
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
            {"metadata": metadata, "spec": dict(spec)},
            content_type=MERGE_PATCH,
        )
        return found if isinstance(found, dict) else {}

    # -- numatopologies ----------------------------------------------------------------

    async def patch_numatopology_status(self, node: str, status: Mapping[str, object]) -> None:
        """Merge `status` into `Numatopology/<node>.status` (the exporter's conditions stay)."""
        await self._call(
            "PATCH",
            f"/apis/{API_VERSION}/{Numatopology.plural}/{node}/status",
            {"status": dict(status)},
            content_type=MERGE_PATCH,
            idempotent=True,
        )


def _transient(exc: errors.KubeError) -> bool:
    """True for failures that a later identical call may not meet: throttling, a failing
    server, no connection (status 0). A login still pending is not one of them."""
    if exc.status == 0:
        return exc.reason != "NotLoggedIn"
    return exc.status in RETRIED_STATUSES


def _retry_after(header: str | None) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or an HTTP date); None if absent
    or unreadable."""
    if header is None:
        return None
    text = header.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        moment = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return max((moment - datetime.datetime.now(datetime.UTC)).total_seconds(), 0.0)


def _api_error(status: int, text: str) -> errors.KubeError:
    """Our error for an API failure, from the `Status` object it sends (or the raw text)."""
    reason, message = "", text[:256]
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        reason = str(body.get("reason", ""))
        message = str(body.get("message", message))[:256]
    kind: type[errors.KubeError] = {
        403: errors.KubeForbiddenError,
        404: errors.KubeNotFoundError,
        409: errors.KubeConflictError,
    }.get(status, errors.KubeError)
    return kind(status, reason, message)
