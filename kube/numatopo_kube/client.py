"""`KubeClient`: the typed calls numatopo makes to the Kubernetes API, over lightkube, on
plain dicts (generic resources: no model parsing, no unknown field dropped). docs/DESIGN.md,
"Kubernetes client": connecting (a rotated service-account token is read again on 401), the
errors, the one retry policy (`_call`), the RBAC permissions each helper declares
(`@api_call`, read by the chart's RBAC test), and why `lean_writes` (the operator) sends
per-pod writes over `write_transport`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, Self, TypeVar

import httpx2
import lightkube
import yaml
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.config.models import Cluster, User
from lightkube.core.resource import ApiInfo, ResourceDef
from lightkube.generic_resource import (
    GenericNamespacedStatus,
    create_global_resource,
    create_namespaced_resource,
)
from lightkube.types import PatchType

from numatopo_engine import kube_names
from numatopo_engine.exports import nrt, volcano
from numatopo_engine.model import API_VERSION, GROUP, KIND, VERSION, Numatopology
from numatopo_engine.network_topology import NETWORK_TOPOLOGY_KIND, NETWORK_TOPOLOGY_PLURAL
from numatopo_kube.errors import (
    KubeConfigError,
    KubeError,
    KubeInvalidNameError,
    KubeNotFoundError,
    KubePodReplacedError,
    error_for,
    parse_retry_after,
)

if TYPE_CHECKING:
    from numatopo_kube.write_transport import WriteTransport

APPLY = PatchType.APPLY.value
JSON_PATCH = PatchType.JSON.value
MERGE_PATCH = PatchType.MERGE.value
STRATEGIC_MERGE_PATCH = PatchType.STRATEGIC.value

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
REQUEST_TIMEOUT_SECONDS = 30.0
# Pauses before each retry of an idempotent call: all of one call's retries stay well
# below the scheduler's extender timeout (10 s by default), which a bind runs within.
RETRY_DELAYS_SECONDS = (0.2, 0.5, 1.0)
# The most we wait for one `Retry-After`: three still fit in the extender timeout, and a
# server asking for minutes is better failed fast.
RETRY_AFTER_CAP_SECONDS = 2.0
# Objects per page when listing: bounded memory per answer on large clusters.
LIST_PAGE_SIZE = 500
# How often a list restarts from its first page when its continue token expired (410).
LIST_RESTARTS = 3
# The API server ends a watch after this long and lightkube resumes it from the last
# version seen: a silently dead connection is noticed within this time.
WATCH_TIMEOUT_SECONDS = 300
# The API server rejects Event messages above 1 KiB on some versions; cut ours below that.
EVENT_MESSAGE_CHARS = 1000

Body = dict[str, Any]
Permission = tuple[str, str, str]  # (API group, resource[/subresource], verb)

P = ParamSpec("P")
T = TypeVar("T")

logger = logging.getLogger(__name__)

_Pod: Any = create_namespaced_resource("", "v1", "Pod", "pods")
_Node: Any = create_global_resource("", "v1", "Node", "nodes")
_Event: Any = create_namespaced_resource("", "v1", "Event", "events")
_ConfigMap: Any = create_namespaced_resource("", "v1", "ConfigMap", "configmaps")
_CustomResourceDefinition: Any = create_global_resource(
    "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions"
)
_Lease: Any = create_namespaced_resource("coordination.k8s.io", "v1", "Lease", "leases")
_Numatopology: Any = create_global_resource(GROUP, VERSION, KIND, Numatopology.plural)
# Dynamic Resource Allocation (numatopo_engine.dra): read, and claims allocated.
_ResourceClaim: Any = create_namespaced_resource(
    "resource.k8s.io", "v1", "ResourceClaim", "resourceclaims"
)
_ResourceSlice: Any = create_global_resource(
    "resource.k8s.io", "v1", "ResourceSlice", "resourceslices"
)
_DeviceClass: Any = create_global_resource("resource.k8s.io", "v1", "DeviceClass", "deviceclasses")
# The formats numatopo exports for other schedulers (numatopo_engine.exports).
_NodeResourceTopology: Any = create_global_resource(
    nrt.GROUP, nrt.VERSION, nrt.KIND, nrt.NodeResourceTopology.plural
)
_VolcanoNumatopology: Any = create_global_resource(
    volcano.GROUP, volcano.VERSION, volcano.KIND, volcano.VolcanoNumatopology.plural
)
_NetworkTopology: Any = create_global_resource(
    GROUP, VERSION, NETWORK_TOPOLOGY_KIND, NETWORK_TOPOLOGY_PLURAL
)


class _PodBinding(GenericNamespacedStatus):
    """POST pods/<name>/binding, answered as a plain dict: the API server answers a
    `Status`, which lightkube's `PodBinding` would fail to read as a Binding."""

    _api_info = ApiInfo(
        resource=ResourceDef("", "v1", "Binding"),
        parent=ResourceDef("", "v1", "Pod"),
        plural="pods",
        verbs=["post"],
        action="binding",
    )


API_CALLS: dict[str, frozenset[Permission]] = {}
"""`KubeClient` helper name -> the RBAC permissions one call of it needs."""


def api_call(*permissions: Permission) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Declare what a helper asks of the API server, for the chart's RBAC test."""

    def register(function: Callable[P, T]) -> Callable[P, T]:
        API_CALLS[function.__name__] = frozenset(permissions)
        return function

    return register


@dataclass(frozen=True)
class WatchEvent:
    type: str
    object: Body


@dataclass
class Listing:
    """The objects of a list, and the version to watch from so that nothing is missed."""

    items: list[Body] = field(default_factory=list)
    resource_version: str | None = None


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    """lightkube's and httpx's exceptions as our `KubeError`s, named after the call."""
    try:
        yield
    except lightkube.ApiError as exc:
        status = exc.status
        raise error_for(
            int(status.code or exc.response.status_code),
            str(status.reason or ""),
            f"{what}: {status.message or exc}",
            retry_after=parse_retry_after(exc.response.headers.get("Retry-After")),
        ) from None
    except (httpx2.HTTPStatusError, KeyError) as raised:
        # An answer that is not a JSON `Status`: lightkube reads its Content-Type unguarded,
        # so one without it (a proxy's) surfaces as a KeyError raised while handling it.
        failed = raised if isinstance(raised, httpx2.HTTPStatusError) else raised.__context__
        if not isinstance(failed, httpx2.HTTPStatusError):
            raise
        response = failed.response
        try:
            text = response.text[:200]
        except httpx2.ResponseNotRead:  # a watch refused: its answer was opened as a stream
            text = response.reason_phrase
        raise error_for(
            response.status_code,
            response.reason_phrase,
            f"{what}: {text}",
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
        ) from None
    except (httpx2.TransportError, httpx2.StreamError) as exc:
        raise error_for(0, type(exc).__name__, f"{what}: {exc}") from None
    except lightkube.ConfigError as exc:
        raise KubeConfigError(f"{what}: {exc}") from None


def _path_names(namespace: str | None, *names: str) -> None:
    """Refuse a namespace or name no API object can have before it goes into a URL path
    (`/pods/../../apis/...` would address another object with our credentials)."""
    problem = (
        "" if namespace is None else kube_names.name_problem("namespace", namespace, label=True)
    )
    for name in names:
        problem = problem or kube_names.name_problem("name", name)
    if problem:
        raise KubeInvalidNameError(problem)


def _uid_precondition(uid: str) -> Body:
    """`metadata.uid` for a merge patch (refused with 409 unless the stored object has that
    uid) or a Binding: a late write cannot land on a namesake."""
    return {"uid": uid} if uid else {}


def _uid_test(uid: str) -> list[Body]:
    """The same precondition as a JSON patch's first operation."""
    return [{"op": "test", "path": "/metadata/uid", "value": uid}] if uid else []


def _load_config(api_url: str, environ: Mapping[str, str], service_account: Path) -> SingleConfig:
    """`api_url` if given, else in-cluster, else `$KUBECONFIG` (its first file)."""
    if api_url:
        if not api_url.startswith(("http://", "https://")):
            raise KubeConfigError(f"the API URL {api_url!r} is not an http(s) URL")
        return _single(KubeConfig.from_one(cluster=Cluster(server=api_url), user=User()), api_url)
    if environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            return _single(KubeConfig.from_service_account(service_account), service_account)
        except (lightkube.ConfigError, OSError) as exc:
            raise KubeConfigError(
                f"cannot read the service account in {service_account}: {exc}"
            ) from None
    kubeconfig = environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if not kubeconfig:
        raise KubeConfigError(
            "no Kubernetes credentials: pass --api-url (e.g. the address of "
            "`kubectl proxy`), run in a pod with a service account, or set KUBECONFIG"
        )
    path = Path(kubeconfig)
    try:
        config = _single(KubeConfig.from_file(path), path)
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())  # PyYAML's message spans lines
        raise KubeConfigError(f"{path}: not a kubeconfig (invalid YAML: {problem})") from None
    except (lightkube.ConfigError, OSError, TypeError, KeyError, AttributeError) as exc:
        raise KubeConfigError(f"{path}: not a usable kubeconfig: {exc}") from None
    if not config.cluster.server.startswith(("http://", "https://")):
        raise KubeConfigError(
            f"{path}: the cluster's server {config.cluster.server!r} is not an http(s) URL"
        )
    return config


def _single(config: KubeConfig, where: object) -> SingleConfig:
    found = config.get()
    if found is None:
        raise KubeConfigError(f"{where}: no current context")
    return found


class KubeClient:
    """One connection to the API server; `connect()` (or `reconnect()`) before a call."""

    def __init__(
        self,
        *,
        component: str = "numatopo",
        host: str = "",
        timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
        retry_delays: Sequence[float] = RETRY_DELAYS_SECONDS,
        retry_after_cap: float = RETRY_AFTER_CAP_SECONDS,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        lean_writes: bool = False,
    ) -> None:
        self.component = component
        """Named as the source of our Events."""
        self.host = host
        self._timeout = timeout_seconds
        self._retry_delays = tuple(retry_delays)
        self._retry_after_cap = retry_after_cap
        self._sleep = sleep
        self._client: lightkube.AsyncClient | None = None
        self._lean_writes = lean_writes
        self._writes: WriteTransport | None = None
        self.server = ""

    # -- connecting --------------------------------------------------------------------

    @classmethod
    def connect(
        cls,
        api_url: str = "",
        *,
        environ: Mapping[str, str] = os.environ,
        service_account: Path = SERVICE_ACCOUNT,
        **options: Any,
    ) -> KubeClient:
        """A client for `api_url` if given, else in-cluster, else `$KUBECONFIG`."""
        client = cls(**options)
        client._open(_load_config(api_url, environ, service_account))
        return client

    async def reconnect(self, api_url: str = "") -> None:
        """Talk to the server `connect` would choose from now on."""
        config = _load_config(api_url, os.environ, SERVICE_ACCOUNT)
        await self.close()
        self._open(config)

    def _open(self, config: SingleConfig) -> None:
        self.server = config.cluster.server.rstrip("/")
        try:
            with _translated(f"connecting to {self.server}"):
                self._client = lightkube.AsyncClient(
                    config, timeout=httpx2.Timeout(self._timeout), trust_env=False
                )
                if self._lean_writes:
                    # Imported here: aiohttp only in the processes that ask for it.
                    from numatopo_kube.write_transport import WriteTransport

                    self._writes = WriteTransport(config, timeout_seconds=self._timeout)
        except (OSError, TypeError, ValueError) as exc:
            # TLS credentials load here: a certificate without its key, bad PEM, a missing
            # file (ssl.SSLError is an OSError).
            raise KubeConfigError(
                f"{self.server}: cannot load the TLS credentials: {type(exc).__name__}: {exc}"
            ) from None

    @property
    def lightkube(self) -> lightkube.AsyncClient:
        if self._client is None:
            raise KubeError(0, "NotLoggedIn", "not connected yet (login pending)")
        return self._client

    async def _write(
        self,
        what: str,
        resource: Any,
        body: Body,
        *,
        name: str = "",
        namespace: str | None = None,
        path: str,
    ) -> None:
        """A merge patch of `name` (retried), or without a name the create of `body` (not),
        over `write_transport` with `lean_writes`, else lightkube."""
        writes = self._writes
        if writes is not None:
            method, content_type = ("PATCH", MERGE_PATCH) if name else ("POST", "application/json")
            await self._call(
                what,
                lambda: writes.send(what, method, path, body, content_type=content_type),
                idempotent=bool(name),
            )
        elif name:
            await self._patch(what, resource, name, body, namespace=namespace, idempotent=True)
        else:
            await self._create(what, resource(body))

    async def _patch(
        self,
        what: str,
        resource: Any,
        name: str,
        body: object,
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
        idempotent: bool = False,
        **options: Any,
    ) -> Body:
        """A patch of one object (names checked first); retried only when `idempotent`."""
        _path_names(namespace, name)
        return dict(
            await self._call(
                what,
                lambda: self.lightkube.patch(
                    resource, name, body, namespace=namespace, patch_type=patch_type, **options
                ),
                idempotent=idempotent,
            )
        )

    async def _create(self, what: str, obj: Any, **options: Any) -> Body:
        """Create `obj`; never retried: after a lost answer a second POST fails as "already
        exists" though the first worked (a Binding: "already bound")."""
        return dict(await self._call(what, lambda: self.lightkube.create(obj, **options)))

    async def close(self) -> None:
        if self._writes is not None:
            await self._writes.close()
            self._writes = None
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # -- the one retry policy ----------------------------------------------------------

    async def _call(
        self, what: str, call: Callable[[], Awaitable[T]], *, idempotent: bool = False
    ) -> T:
        """`call()`; an idempotent one (GETs, merge patches, server-side apply) is retried on
        429, 5xx or no connection, a `Retry-After` stretching a pause up to the cap."""
        delays = self._retry_delays if idempotent else ()
        for attempt in range(len(delays) + 1):
            try:
                with _translated(what):
                    return await call()
            except KubeError as exc:
                if attempt == len(delays) or not exc.transient:
                    raise
                pause = delays[attempt]
                if exc.retry_after is not None:
                    pause = max(pause, min(exc.retry_after, self._retry_after_cap))
                logger.info("%s: %s; retrying in %.1f s", what, exc, pause)
                await self._sleep(pause)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _list(
        self,
        what: str,
        resource: Any,
        *,
        namespace: str | None = None,
        keep: Callable[[Body], Body | None] = dict,
        **options: Any,
    ) -> Listing:
        """Every object as `keep` makes it while its page is read (None: left out): a caller
        keeping little never holds the whole answer, and pages of `LIST_PAGE_SIZE` keep the
        API server from building one answer of every object of a large cluster. A continue
        token expired between pages (410) lists again from the start (`keep` sees objects
        again): no mixed snapshots."""
        for restart in range(LIST_RESTARTS + 1):

            async def pages() -> Listing:
                iterable = self.lightkube.list(
                    resource, namespace=namespace, chunk_size=LIST_PAGE_SIZE, **options
                )
                items: list[Body] = []
                read = 0
                async for item in iterable:
                    if (kept := keep(item)) is not None:
                        items.append(kept)
                    read += 1
                    if read % LIST_PAGE_SIZE == 0:
                        # A server may answer in larger pages than asked (30,000 pods in
                        # one): `keep` of one would hold the loop past the renew deadline.
                        await asyncio.sleep(0)
                try:
                    version: str | None = iterable.resourceVersion
                except lightkube.NotReadyError:  # a list answer without a version
                    version = None
                return Listing(items, version)

            try:
                return await self._call(what, pages, idempotent=True)
            except KubeError as exc:
                if exc.status != 410 or restart == LIST_RESTARTS:
                    raise
                logger.info("%s: the continue token expired; listing again", what)
        raise AssertionError("unreachable: the last restart returns or raises")

    async def _watch(self, what: str, resource: Any, **options: Any) -> AsyncIterator[WatchEvent]:
        with _translated(what):
            try:
                async for kind, item in self.lightkube.watch(
                    resource, server_timeout=WATCH_TIMEOUT_SECONDS, **options
                ):
                    yield WatchEvent(type=str(kind), object=dict(item))
            except (ValueError, TypeError) as exc:
                # One watched object lightkube cannot parse ends the watch as a retriable
                # error, never a bare exception silently ending the watcher's task.
                raise error_for(
                    0, "UnreadableObject", f"{what}: unreadable object: {exc}"
                ) from None

    # -- nodes -------------------------------------------------------------------------

    @api_call(("", "nodes", "get"))
    async def get_node(self, name: str) -> Body:
        return await self._get(f"node {name}", _Node, name)

    @api_call(("", "nodes", "list"))
    async def list_nodes(self) -> Listing:
        return await self._list("list nodes", _Node)

    @api_call(("", "nodes", "watch"))
    def watch_nodes(self, *, resource_version: str | None = None) -> AsyncIterator[WatchEvent]:
        """Node events from `resource_version` on, until an error (410: too old) ends them."""
        return self._watch("watch nodes", _Node, resource_version=resource_version)

    # -- pods --------------------------------------------------------------------------

    @api_call(("", "pods", "get"))
    async def get_pod(self, namespace: str, name: str) -> Body:
        return await self._get(f"pod {namespace}/{name}", _Pod, name, namespace)

    @api_call(("", "pods", "list"))
    async def list_pods(
        self,
        *,
        namespaces: Sequence[str] = (),
        field_selector: Mapping[str, str] | None = None,
        keep: Callable[[Body], Body | None] = dict,
    ) -> Listing:
        """Every pod in `namespaces` (all when empty) matching `field_selector`, as `keep`
        makes it; the version is the last namespace's (none to watch after several)."""
        found = Listing()
        for namespace in namespaces:
            _path_names(namespace)
        for namespace in namespaces or ("*",):
            listing = await self._list(
                f"list pods in {namespace}",
                _Pod,
                namespace=namespace,
                keep=keep,
                fields=dict(field_selector) if field_selector else None,
            )
            found.items += listing.items
            found.resource_version = listing.resource_version
        return found

    @api_call(("", "pods", "create"))
    async def create_pod(self, namespace: str, body: Body) -> Body:
        """Create a pod (`numatopo selftest`'s example pod); not retried."""
        _path_names(namespace, str((body.get("metadata") or {}).get("name", "")))
        pod = _Pod({**body, "metadata": {**body["metadata"], "namespace": namespace}})
        return await self._create(f"create pod {namespace}/{body['metadata']['name']}", pod)

    @api_call(("", "pods", "delete"))
    async def delete_pod(self, namespace: str, name: str) -> bool:
        return await self._delete(f"pod {namespace}/{name}", _Pod, name, namespace)

    @api_call(("", "pods", "list"))
    async def probe_pods(self, *, field_selector: Mapping[str, str] | None = None) -> None:
        """A list of at most one pod: the cheapest way to ask whether the API answers."""
        iterable = self.lightkube.list(
            _Pod, namespace="*", chunk_size=1, fields=dict(field_selector or {}) or None
        )
        with _translated("list one pod"):
            async for _ in iterable:
                break

    @api_call(("", "pods", "watch"))
    def watch_pods(
        self,
        *,
        namespace: str = "*",
        field_selector: Mapping[str, str] | None = None,
        resource_version: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Pod events in `namespace` ("*": all) from `resource_version` on, until an error
        (410: too old) ends them."""
        if namespace != "*":
            _path_names(namespace)
        return self._watch(
            "watch pods",
            _Pod,
            namespace=namespace,
            fields=dict(field_selector) if field_selector else None,
            resource_version=resource_version,
        )

    async def _merge_pod_metadata(
        self, namespace: str, name: str, metadata: Body, *, uid: str = ""
    ) -> None:
        _path_names(namespace, name)
        await self._replaced_when_refused(
            namespace,
            name,
            uid,
            self._write(
                f"patch pod {namespace}/{name}",
                _Pod,
                {"metadata": {**metadata, **_uid_precondition(uid)}},
                name=name,
                namespace=namespace,
                path=f"/api/v1/namespaces/{namespace}/pods/{name}",
            ),
            read_back=False,
        )

    async def _replaced_when_refused(
        self, namespace: str, name: str, uid: str, write: Awaitable[object], *, read_back: bool
    ) -> None:
        """Await a pod write; with `uid`, its refusal for another pod as `KubePodReplacedError`:
        a merge patch's 409 (it sends no resourceVersion, so the uid is the one thing that can
        conflict), or with `read_back` (a JSON patch: a failed `test` answers 422 whichever one
        failed) a refusal after which the pod read back is gone or another."""
        try:
            await write
        except KubeError as exc:
            if not uid:
                raise
            if read_back:
                if isinstance(exc, KubeNotFoundError) or exc.transient:
                    raise
                found = await self._get_or_none(f"pod {namespace}/{name}", _Pod, name, namespace)
                if found is not None and (found.get("metadata") or {}).get("uid") == uid:
                    raise
            elif exc.status != 409:
                raise
            raise KubePodReplacedError(
                exc.status, exc.reason, f"pod {namespace}/{name} (uid {uid}) is gone: {exc}"
            ) from None

    @api_call(("", "pods", "patch"))
    async def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None], *, uid: str = ""
    ) -> None:
        """Merge `annotations` into the pod's; a None value removes that key. With `uid`,
        only into that pod: a namesake created since is refused (`KubePodReplacedError`)."""
        await self._merge_pod_metadata(namespace, name, {"annotations": dict(annotations)}, uid=uid)

    @api_call(("", "pods", "patch"))
    async def patch_pod_labels(
        self, namespace: str, name: str, labels: Mapping[str, str | None]
    ) -> None:
        """Merge `labels` into the pod's; a None value removes that key."""
        await self._merge_pod_metadata(namespace, name, {"labels": dict(labels)})

    @api_call(("", "pods", "patch"), ("", "pods", "get"))
    async def patch_pod_spec(
        self, namespace: str, name: str, operations: list[Body], *, uid: str = ""
    ) -> None:
        """A JSON patch guarded by `test` operations (removing one scheduling gate of
        several); not retried: after a lost answer the guard fails (the caller reads again).
        With `uid`, a `test` of it goes first; when the patch is refused and the pod read
        back is gone or another, `KubePodReplacedError`."""
        what = f"patch pod {namespace}/{name} spec"
        guarded = [*_uid_test(uid), *operations]
        patch = self._patch(
            what, _Pod, name, guarded, namespace=namespace, patch_type=PatchType.JSON
        )
        await self._replaced_when_refused(namespace, name, uid, patch, read_back=True)

    @api_call(("", "pods/status", "get"))
    async def get_pod_status(self, namespace: str, name: str) -> Body:
        return await self._get(f"pod {namespace}/{name} status", _Pod.Status, name, namespace)

    @api_call(("", "pods/status", "patch"))
    async def patch_pod_status(
        self,
        namespace: str,
        name: str,
        patch: Body | list[Body],
        *,
        content_type: str,
        uid: str = "",
    ) -> None:
        """A guarded JSON patch or a strategic merge patch of the pod's status. Not retried:
        a JSON patch adding to a list would add twice after a lost answer. With `uid`, only
        that pod's (`KubePodReplacedError` when refused for it; strategic patches only)."""
        if content_type not in (JSON_PATCH, STRATEGIC_MERGE_PATCH):
            raise ValueError(f"pod status patches are JSON or strategic, not {content_type}")
        what, kind = f"patch pod {namespace}/{name} status", PatchType(content_type)
        body: Body | list[Body] = patch
        if isinstance(patch, list):
            body = [*_uid_test(uid), *patch]
        elif uid:
            body = {**patch, "metadata": {**(patch.get("metadata") or {}), "uid": uid}}
        await self._replaced_when_refused(
            namespace,
            name,
            uid if not isinstance(patch, list) else "",
            self._patch(what, _Pod.Status, name, body, namespace=namespace, patch_type=kind),
            read_back=False,
        )

    @api_call(("", "pods/binding", "create"))
    async def create_binding(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind the pod to `node` as kube-scheduler does (the uid guards against a namesake)."""
        _path_names(namespace, name, node)
        metadata = {"name": name, "namespace": namespace, **_uid_precondition(uid)}
        binding = _PodBinding(  # type: ignore[call-overload]
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": metadata,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
        )
        what = f"bind pod {namespace}/{name} to {node}"
        await self._create(what, binding, name=name, namespace=namespace)

    # -- events ------------------------------------------------------------------------

    @api_call(("", "events", "create"))
    async def post_event(
        self, about: Mapping[str, str], *, warning: bool, reason: str, message: str
    ) -> bool:
        """A core/v1 Event about `about` (namespace, name, uid; kind and apiVersion default
        to a Pod's), named as client-go does (`<name>.<hex time>`). Best-effort: False (and
        a log line) when refused; annotations and conditions already hold the outcome."""
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        name, namespace = about.get("name", ""), about.get("namespace") or "default"
        if len(message) > EVENT_MESSAGE_CHARS:
            message = message[: EVENT_MESSAGE_CHARS - 3] + "..."
        source = {"component": self.component, **({"host": self.host} if self.host else {})}
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": about.get("apiVersion", "v1"),
                "kind": about.get("kind", "Pod"),
                "namespace": about.get("namespace", ""),
                "name": name,
                "uid": about.get("uid", ""),
            },
            "type": "Warning" if warning else "Normal",
            "reason": reason,
            "message": message,
            "source": source,
            "reportingComponent": self.component,
            "reportingInstance": self.host,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            _path_names(namespace, name)
            await self._write(
                f"post Event {reason}",
                _Event,
                event,
                path=f"/api/v1/namespaces/{namespace}/events",
            )
        except KubeError as exc:
            logger.warning("Event %s about %s/%s not posted: %s", reason, namespace, name, exc)
            return False
        return True

    # -- configuration (read by the admin commands) ----------------------------------------

    @api_call(("", "configmaps", "get"))
    async def get_configmap(self, namespace: str, name: str) -> Body | None:
        """The ConfigMap, or None when there is none."""
        return await self._get_or_none(f"configmap {namespace}/{name}", _ConfigMap, name, namespace)

    @api_call(("apiextensions.k8s.io", "customresourcedefinitions", "get"))
    async def get_crd(self, name: str) -> Body | None:
        """The CustomResourceDefinition `name` (`<plural>.<group>`), or None."""
        return await self._get_or_none(
            f"CustomResourceDefinition {name}", _CustomResourceDefinition, name
        )

    async def _get_or_none(
        self, what: str, resource: Any, name: str, namespace: str | None = None
    ) -> Body | None:
        """`_get`, None when the API server has no such object."""
        try:
            return await self._get(what, resource, name, namespace)
        except KubeNotFoundError:
            return None

    async def _get(
        self,
        what: str,
        resource: Any,
        name: str,
        namespace: str | None = None,
        *,
        idempotent: bool = True,
    ) -> Body:
        """GET one object (names checked first)."""
        _path_names(namespace, name)
        return dict(
            await self._call(
                f"get {what}",
                lambda: self.lightkube.get(resource, name, namespace=namespace),
                idempotent=idempotent,
            )
        )

    # -- leases (leadership) -----------------------------------------------------------

    @api_call(("coordination.k8s.io", "leases", "get"))
    async def get_lease(self, namespace: str, name: str) -> Body:
        """The Lease; `KubeNotFoundError` when absent. Not retried: leadership asks again."""
        return await self._get(
            f"lease {namespace}/{name}", _Lease, name, namespace, idempotent=False
        )

    @api_call(("coordination.k8s.io", "leases", "create"))
    async def create_lease(self, namespace: str, name: str, spec: Mapping[str, object]) -> Body:
        """Create the Lease as `spec` says; `KubeConflictError` if another replica was first."""
        _path_names(namespace, name)
        lease = _Lease({"metadata": {"name": name, "namespace": namespace}, "spec": dict(spec)})
        return await self._create(f"create lease {namespace}/{name}", lease)

    @api_call(("coordination.k8s.io", "leases", "patch"))
    async def patch_lease(
        self,
        namespace: str,
        name: str,
        spec: Mapping[str, object],
        *,
        resource_version: str | None,
    ) -> Body:
        """Merge `spec` into the Lease's, with `resource_version` only into that version
        (else 409): the compare-and-swap that keeps two replicas from acquiring at once."""
        metadata = {"resourceVersion": resource_version} if resource_version else {}
        body = {"metadata": metadata, "spec": dict(spec)}
        return await self._patch(
            f"patch lease {namespace}/{name}", _Lease, name, body, namespace=namespace
        )

    # -- numatopologies ----------------------------------------------------------------

    @api_call(("numatopo.io", "numatopologies", "get"))
    async def get_numatopology(self, name: str) -> Body | None:
        """`Numatopology/<name>`, or None when there is none."""
        return await self._get_or_none(f"{KIND}/{name}", _Numatopology, name)

    @api_call(("numatopo.io", "numatopologies", "list"))
    async def list_numatopologies(self) -> Listing:
        return await self._list(f"list {KIND}", _Numatopology)

    @api_call(
        # server-side apply: patch, and create when the object does not exist yet
        ("numatopo.io", "numatopologies", "patch"),
        ("numatopo.io", "numatopologies", "create"),
    )
    async def apply_numatopology(self, body: Body, *, field_manager: str) -> Body:
        """Server-side apply of a whole Numatopology (the fields `field_manager` owns)."""
        wanted = {"apiVersion": API_VERSION, "kind": KIND, **body}
        return await self._apply_global(_Numatopology, wanted, field_manager, force=True)

    async def _apply_global(
        self, resource: Any, wanted: Body, field_manager: str, *, force: bool
    ) -> Body:
        """Server-side apply of cluster-scoped `wanted`; `force` takes others' fields (else 409)."""
        kind, name = str(wanted["kind"]), str(wanted["metadata"]["name"])
        try:
            return await self._patch(
                f"apply {kind}/{name}",
                resource,
                name,
                wanted,
                patch_type=PatchType.APPLY,
                idempotent=True,
                field_manager=field_manager,
                force=force,
            )
        except KubeNotFoundError:
            pass  # a real API server creates on apply; simpler ones answer 404: create it
        return await self._create(
            f"create {kind}/{name}", resource(wanted), field_manager=field_manager
        )

    async def _delete(
        self, what: str, resource: Any, name: str, namespace: str | None = None
    ) -> bool:
        """Delete one object; False when there was none (a retry may find it gone)."""
        _path_names(namespace, name)
        try:
            await self._call(
                f"delete {what}",
                lambda: self.lightkube.delete(resource, name, namespace=namespace),
                idempotent=True,
            )
        except KubeNotFoundError:
            return False
        return True

    @api_call(("numatopo.io", "numatopologies/status", "patch"))
    async def apply_numatopology_status(
        self, name: str, status: Body, *, field_manager: str
    ) -> Body:
        """Server-side apply `status` (the fields `field_manager` owns) to `Numatopology/<name>`
        (a 404 when absent); returns the stored object. The exporter and the agent write
        conditions of one object: a map list keyed by `type`, merged by type keeping others'
        entries (no read-modify-write race). Forced: each type has one writer, so a conflict
        is an older version of it (or a hand edit)."""
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}}
        body["status"] = status
        return await self._patch(
            f"apply {KIND}/{name} status",
            _Numatopology.Status,
            name,
            body,
            patch_type=PatchType.APPLY,
            idempotent=True,
            field_manager=field_manager,
            force=True,
        )

    @api_call(("numatopo.io", "numatopologies/status", "patch"))
    async def patch_numatopology_status(self, name: str, status: Mapping[str, object]) -> None:
        """Merge `status` into `Numatopology/<name>.status` (others' fields stay)."""
        await self._merge_status(_Numatopology, KIND, Numatopology.plural, name, status)

    async def _merge_status(
        self, resource: Any, kind: str, plural: str, name: str, status: Mapping[str, object]
    ) -> None:
        """A merge patch of the cluster-scoped numatopo.io object's status subresource."""
        _path_names(None, name)
        await self._write(
            f"patch {kind}/{name} status",
            resource.Status,
            {"status": dict(status)},
            name=name,
            path=f"/apis/{GROUP}/{VERSION}/{plural}/{name}/status",
        )

    # -- dynamic resource allocation (resource.k8s.io/v1) -------------------------------

    @api_call(("resource.k8s.io", "resourceclaims", "get"))
    async def get_resource_claim(self, namespace: str, name: str) -> Body | None:
        """`ResourceClaim` namespace/name, or None when there is none."""
        return await self._get_or_none(
            f"resourceclaim {namespace}/{name}", _ResourceClaim, name, namespace
        )

    @api_call(("numatopo.io", "networktopologies", "list"))
    async def list_network_topologies(self) -> Listing:
        """Every NetworkTopology (`kubectl numatopo explain`'s group search)."""
        return await self._list("list networktopologies", _NetworkTopology)

    @api_call(("resource.k8s.io", "resourceclaims", "list"))
    async def list_resource_claims(self) -> Listing:
        return await self._list("list resourceclaims", _ResourceClaim, namespace="*")

    @api_call(("resource.k8s.io", "resourceclaims", "watch"))
    def watch_resource_claims(self, *, resource_version: str | None) -> AsyncIterator[WatchEvent]:
        """ResourceClaim events in every namespace from `resource_version` on (`dra_feed`)."""
        return self._watch(
            "watch resourceclaims", _ResourceClaim, namespace="*", resource_version=resource_version
        )

    @api_call(("resource.k8s.io", "resourceslices", "watch"))
    def watch_resource_slices(self, *, resource_version: str | None) -> AsyncIterator[WatchEvent]:
        """ResourceSlice events from `resource_version` on (`dra_feed`)."""
        return self._watch(
            "watch resourceslices", _ResourceSlice, resource_version=resource_version
        )

    @api_call(("resource.k8s.io", "deviceclasses", "watch"))
    def watch_device_classes(self, *, resource_version: str | None) -> AsyncIterator[WatchEvent]:
        """DeviceClass events from `resource_version` on (`dra_feed`)."""
        return self._watch("watch deviceclasses", _DeviceClass, resource_version=resource_version)

    @api_call(("resource.k8s.io", "resourceslices", "list"))
    async def list_resource_slices(self) -> Listing:
        return await self._list("list resourceslices", _ResourceSlice)

    @api_call(("resource.k8s.io", "deviceclasses", "list"))
    async def list_device_classes(self) -> Listing:
        return await self._list("list deviceclasses", _DeviceClass)

    @api_call(("resource.k8s.io", "resourceclaims", "patch"))
    async def patch_resource_claim(self, namespace: str, name: str, patch: Body) -> Body:
        """A merge patch (finalizers), conditional with `metadata.resourceVersion`; not retried."""
        what = f"patch resourceclaim {namespace}/{name}"
        return await self._patch(what, _ResourceClaim, name, patch, namespace=namespace)

    @api_call(("resource.k8s.io", "resourceclaims/status", "patch"))
    async def patch_resource_claim_status(self, namespace: str, name: str, patch: Body) -> Body:
        """The claim's status merge patch (allocation, reservedFor), conditional likewise."""
        what = f"patch resourceclaim {namespace}/{name} status"
        return await self._patch(what, _ResourceClaim.Status, name, patch, namespace=namespace)

    @api_call(("numatopo.io", "networktopologies/status", "patch"))
    async def patch_networktopology_status(self, name: str, status: Mapping[str, object]) -> None:
        """Merge `status` into `NetworkTopology/<name>.status` (others' fields stay)."""
        await self._merge_status(
            _NetworkTopology, NETWORK_TOPOLOGY_KIND, NETWORK_TOPOLOGY_PLURAL, name, status
        )

    @api_call(("numatopo.io", "numatopologies", "watch"))
    def watch_numatopologies(
        self, *, name: str | None = None, resource_version: str | None = None
    ) -> AsyncIterator[WatchEvent]:
        """Numatopology events (only `name`'s where field selectors are honoured) from
        `resource_version` on (None: now), until an error ends them."""
        return self._watch(
            f"watch {KIND}",
            _Numatopology,
            fields={"metadata.name": name} if name else None,
            resource_version=resource_version,
        )

    # -- exported formats (operator, when turned on) -----------------------------------

    @api_call(
        (nrt.GROUP, "noderesourcetopologies", "patch"),
        (nrt.GROUP, "noderesourcetopologies", "create"),
    )
    async def apply_node_resource_topology(self, body: Body, *, field_manager: str) -> Body:
        """Server-side apply of a NodeResourceTopology, not forced: NFD's fields are a 409."""
        return await self._apply_global(_NodeResourceTopology, body, field_manager, force=False)

    @api_call((nrt.GROUP, "noderesourcetopologies", "delete"))
    async def delete_node_resource_topology(self, name: str) -> bool:
        return await self._delete(f"{nrt.KIND}/{name}", _NodeResourceTopology, name)

    @api_call((nrt.GROUP, "noderesourcetopologies", "list"))
    async def list_node_resource_topologies(self, *, label_selector: Mapping[str, str]) -> Listing:
        return await self._list(
            f"list {nrt.KIND}",
            _NodeResourceTopology,
            labels=dict(label_selector),
        )

    @api_call(
        (volcano.GROUP, "numatopologies", "patch"),
        (volcano.GROUP, "numatopologies", "create"),
    )
    async def apply_volcano_numatopology(self, body: Body, *, field_manager: str) -> Body:
        """Server-side apply of a Volcano Numatopology, not forced (its resource-exporter: 409)."""
        return await self._apply_global(_VolcanoNumatopology, body, field_manager, force=False)

    @api_call((volcano.GROUP, "numatopologies", "delete"))
    async def delete_volcano_numatopology(self, name: str) -> bool:
        return await self._delete(
            f"{volcano.GROUP} {volcano.KIND}/{name}", _VolcanoNumatopology, name
        )

    @api_call((volcano.GROUP, "numatopologies", "list"))
    async def list_volcano_numatopologies(self, *, label_selector: Mapping[str, str]) -> Listing:
        return await self._list(
            f"list {volcano.GROUP} {volcano.KIND}",
            _VolcanoNumatopology,
            labels=dict(label_selector),
        )
