"""The only module of the node side that talks to the Kubernetes API (I/O).

A small asyncio client over aiohttp: the exporter and the agent make a dozen kinds of
calls, and the official `kubernetes` client would cost more resident memory than the
whole process is allowed (DaemonSet budget: 80 MiB). `KubeClient.connect` picks the
credentials: an explicit URL without auth (`kubectl proxy`, tests), else the pod's
service account (`from_cluster`), else the file `$KUBECONFIG` names (`from_kubeconfig`:
a developer's machine; bearer token or client certificate, no credential plugins).

Writes use these content types:
  apply     `application/apply-patch+yaml` (server-side apply, field manager per process)
  merge     `application/merge-patch+json` (status of custom resources, annotations)
  strategic `application/strategic-merge-patch+json` (pod status: conditions merge by type)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import datetime
import json
import os
import secrets
import ssl
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import aiohttp
import yaml

from numatopo_engine.model import API_VERSION, KIND, Numatopology

__all__ = [
    "APPLY",
    "MERGE",
    "STRATEGIC",
    "ApiError",
    "KubeClient",
    "apply_numatopology_status",
    "numatopology_path",
    "pod_path",
]

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")

# The API server ends a watch after this many seconds; we then list again. Shorter than
# the server's own 30-60 min default so that a silently dead connection is noticed.
WATCH_TIMEOUT_SECONDS = 300

Body = dict[str, Any]


def numatopology_path(name: str | None = None, *, subresource: str = "") -> str:
    base = f"/apis/{API_VERSION}/{Numatopology.plural}"
    if name is None:
        return base
    return f"{base}/{name}" + (f"/{subresource}" if subresource else "")


async def apply_numatopology_status(
    client: KubeClient, node_name: str, status: Body, *, field_manager: str
) -> Body:
    """Server-side apply `status` (only the fields `field_manager` owns) to the status
    subresource of `Numatopology/<node_name>`; returns the stored object.

    The exporter and the agent write conditions of the same object. `conditions` is a
    map list keyed by `type` in the CRD, so the API server merges each applied entry by
    its type and keeps the entries other managers own: no GET, no resourceVersion
    check, no read-modify-write race in which one writer's list replaces the other's.
    An entry this manager applied before and leaves out now is removed by the server.

    `force`: each condition type has exactly one writer, so a conflict can only be an
    older version of the same process (or a hand edit) holding the field. Unlike
    `KubeClient.apply` this never creates the object: a status subresource cannot, and
    the exporter creates the object with its spec; an absent object is `ApiError` 404.
    """
    body = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": node_name},
        "status": status,
    }
    return await client.request(
        "PATCH",
        numatopology_path(node_name, subresource="status"),
        body=body,
        params={"fieldManager": field_manager, "force": "true"},
        content_type=APPLY,
    )


def pod_path(namespace: str, name: str, *, subresource: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}" + (
        f"/{subresource}" if subresource else ""
    )


class ApiError(Exception):
    """The API server answered with an error status (or could not be reached: status 0)."""

    def __init__(self, status: int, message: str, *, method: str = "", path: str = "") -> None:
        where = f"{method} {path}: " if method else ""
        super().__init__(f"{where}HTTP {status}: {message}" if status else f"{where}{message}")
        self.status = status
        self.message = message

    @property
    def transient(self) -> bool:
        """Worth retrying as is: unreachable, throttled, conflicting, or a server error."""
        return self.status in (0, 408, 409, 429) or self.status >= 500

    @property
    def not_found(self) -> bool:
        return self.status == 404


@dataclass(frozen=True)
class WatchEvent:
    type: str
    object: Body


class KubeClient:
    """One HTTP session to the API server. Use as `async with KubeClient(url) as client`."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        request_timeout_seconds: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_seconds)
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_cluster(cls, account_dir: Path = SERVICE_ACCOUNT) -> KubeClient:
        """The in-cluster client: `KUBERNETES_SERVICE_HOST` and the pod's service account."""
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise ApiError(
                0,
                "not running in a cluster (KUBERNETES_SERVICE_HOST is unset); "
                "pass --api-url (e.g. the address of `kubectl proxy`)",
            )
        try:
            token = (account_dir / "token").read_text().strip()
            context = ssl.create_default_context(cafile=str(account_dir / "ca.crt"))
        except OSError as exc:
            raise ApiError(0, f"cannot read the service account in {account_dir}: {exc}") from None
        if ":" in host:  # an IPv6 address
            host = f"[{host}]"
        return cls(f"https://{host}:{port}", token=token, ssl_context=context)

    @classmethod
    def from_kubeconfig(cls, path: Path) -> KubeClient:
        """The client for the current context of the kubeconfig file at `path`."""
        return _client_from_kubeconfig(cls, path)

    @classmethod
    def connect(cls, api_url: str = "", *, environ: Mapping[str, str] = os.environ) -> KubeClient:
        """`api_url` if given, else in-cluster, else `$KUBECONFIG` (its first file)."""
        if api_url:
            return cls(api_url)
        if environ.get("KUBERNETES_SERVICE_HOST"):
            return cls.from_cluster()
        kubeconfig = environ.get("KUBECONFIG", "").split(os.pathsep)[0]
        if kubeconfig:
            return cls.from_kubeconfig(Path(kubeconfig))
        raise ApiError(
            0,
            "no Kubernetes credentials: pass --api-url (e.g. the address of "
            "`kubectl proxy`), run in a pod with a service account, or set KUBECONFIG",
        )

    async def __aenter__(self) -> Self:
        self._session = aiohttp.ClientSession(headers=self._headers)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("KubeClient used outside `async with`")
        return self._session

    # -- raw verbs -------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Body:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else {}
        try:
            async with self.session.request(
                method,
                self.base_url + path,
                data=data,
                params=dict(params or {}),
                headers=headers,
                ssl=self._ssl,
                timeout=self._timeout,
            ) as response:
                text = await response.text()
                if response.status >= 400:
                    raise ApiError(response.status, _status_message(text), method=method, path=path)
                parsed: Body = json.loads(text) if text else {}
                return parsed
        except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError) as exc:
            raise ApiError(0, f"{type(exc).__name__}: {exc}", method=method, path=path) from None

    async def get(self, path: str, *, params: Mapping[str, str] | None = None) -> Body:
        return await self.request("GET", path, params=params)

    async def get_optional(self, path: str) -> Body | None:
        try:
            return await self.get(path)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    async def create(self, path: str, body: Body) -> Body:
        return await self.request("POST", path, body=body)

    async def patch(self, path: str, body: Body, *, content_type: str = MERGE) -> Body:
        return await self.request("PATCH", path, body=body, content_type=content_type)

    async def apply(self, path: str, body: Body, *, field_manager: str) -> Body:
        """Server-side apply; creates the object if it does not exist."""
        params = {"fieldManager": field_manager, "force": "true"}
        try:
            return await self.request("PATCH", path, body=body, params=params, content_type=APPLY)
        except ApiError as exc:
            # A real API server creates on apply; simpler servers (and emulators) answer
            # 404 for a PATCH of an absent object, so create it the classic way.
            if not exc.not_found:
                raise
        collection = path.rsplit("/", 1)[0]
        return await self.create(collection, body)

    async def watch(
        self, path: str, *, params: Mapping[str, str] | None = None
    ) -> AsyncIterator[WatchEvent]:
        """Stream watch events until the server closes the stream; ERROR events raise."""
        query = {"watch": "true", "timeoutSeconds": str(WATCH_TIMEOUT_SECONDS), **(params or {})}
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._timeout.total)
        try:
            async with self.session.get(
                self.base_url + path, params=query, ssl=self._ssl, timeout=timeout
            ) as response:
                if response.status >= 400:
                    text = await response.text()
                    raise ApiError(
                        response.status, _status_message(text), method="WATCH", path=path
                    )
                async for line in response.content:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object", {})
                        raise ApiError(
                            int(status.get("code", 500)),
                            str(status.get("message", "watch error")),
                            method="WATCH",
                            path=path,
                        )
                    yield WatchEvent(type=str(event.get("type")), object=event.get("object", {}))
        except (aiohttp.ClientError, json.JSONDecodeError) as exc:
            raise ApiError(0, f"{type(exc).__name__}: {exc}", method="WATCH", path=path) from None

    async def check_node(self, node_name: str) -> Body:
        """The Node `node_name`, read once at start so that a wrong URL, missing
        credentials or a wrong node name end the process with a clear message."""
        try:
            return await self.get(f"/api/v1/nodes/{node_name}")
        except ApiError as exc:
            if exc.not_found:
                raise ApiError(
                    404, f"no node named {node_name!r} (check --node-name or NODE_NAME)"
                ) from None
            if exc.status == 0:
                raise ApiError(
                    0, f"cannot reach the API server at {self.base_url}: {exc.message}"
                ) from None
            raise

    # -- events ------------------------------------------------------------------------

    async def post_event(
        self,
        *,
        regarding: Body,
        reason: str,
        message: str,
        warning: bool = False,
        component: str,
        host: str,
    ) -> None:
        """Record a core/v1 Event about `regarding` (a pod or node body); never raises."""
        meta = regarding.get("metadata", {})
        namespace = meta.get("namespace") or "default"
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.get('name', 'unknown')}.{secrets.token_hex(8)}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": regarding.get("apiVersion", "v1"),
                "kind": regarding.get("kind", "Pod"),
                "name": meta.get("name", ""),
                "namespace": meta.get("namespace", ""),
                "uid": meta.get("uid", ""),
            },
            "reason": reason,
            # The API server refuses messages over 1 KiB.
            "message": message[:1000],
            "type": "Warning" if warning else "Normal",
            "source": {"component": component, "host": host},
            "reportingComponent": component,
            "reportingInstance": host,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        # Events are best effort: losing one must never stop enforcement or publishing.
        with contextlib.suppress(ApiError, asyncio.TimeoutError):
            await self.create(f"/api/v1/namespaces/{namespace}/events", event)


# -- kubeconfig files ---------------------------------------------------------------------


def _named(config: Body, section: str, name: str, where: Path) -> Body:
    """The `section` entry (clusters, users, contexts) called `name`, unwrapped."""
    for entry in config.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            inner = entry.get(section[:-1])
            return inner if isinstance(inner, dict) else {}
    raise ApiError(0, f"{where}: no {section[:-1]} named {name!r}")


def _pem(entry: Body, key: str, base: Path, where: Path) -> tuple[Path | None, str | None]:
    """`<key>` (a file, relative to the kubeconfig) or `<key>-data` (base64 PEM)."""
    data = entry.get(f"{key}-data")
    if data:
        try:
            return None, base64.b64decode(str(data), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise ApiError(0, f"{where}: {key}-data is not base64-encoded PEM") from None
    name = entry.get(key)
    return (base / str(name), None) if name else (None, None)


def _client_from_kubeconfig(cls: type[KubeClient], path: Path) -> KubeClient:
    try:
        config = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ApiError(0, f"cannot read the kubeconfig {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())  # PyYAML's message spans lines
        raise ApiError(0, f"{path}: not a kubeconfig (invalid YAML: {problem})") from None
    if not isinstance(config, dict) or not config.get("current-context"):
        raise ApiError(0, f"{path}: no current-context (try `kubectl config use-context`)")
    context = _named(config, "contexts", str(config["current-context"]), path)
    cluster = _named(config, "clusters", str(context.get("cluster")), path)
    user = _named(config, "users", str(context.get("user")), path) if context.get("user") else {}
    server = str(cluster.get("server") or "")
    if not server.startswith(("http://", "https://")):
        raise ApiError(0, f"{path}: the cluster's server {server!r} is not an http(s) URL")
    for plugin in ("exec", "auth-provider"):
        if plugin in user:
            raise ApiError(
                0,
                f"{path}: the user logs in through `{plugin}`, which numatopo does not run; "
                "use a kubeconfig with a token or a client certificate",
            )
    base = path.parent
    token = user.get("token")
    if not token and user.get("tokenFile"):
        try:
            token = (base / str(user["tokenFile"])).read_text().strip()
        except OSError as exc:
            raise ApiError(0, f"{path}: cannot read tokenFile: {exc}") from None
    context_ssl = None
    if server.startswith("https://"):
        context_ssl = _ssl_context(cluster, user, base, path)
    return cls(server, token=str(token) if token else None, ssl_context=context_ssl)


def _ssl_context(cluster: Body, user: Body, base: Path, where: Path) -> ssl.SSLContext:
    ca_file, ca_data = _pem(cluster, "certificate-authority", base, where)
    cert_file, cert_data = _pem(user, "client-certificate", base, where)
    key_file, key_data = _pem(user, "client-key", base, where)
    try:
        context = ssl.create_default_context(
            cafile=None if ca_file is None else str(ca_file), cadata=ca_data
        )
        if cluster.get("insecure-skip-tls-verify"):
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if (cert_file or cert_data) and (key_file or key_data):
            # The ssl module loads a certificate chain from files only: PEM data goes
            # through a private temporary directory that is gone once loaded.
            with tempfile.TemporaryDirectory() as private:
                if cert_data is not None:
                    cert_file = Path(private, "client.crt")
                    cert_file.write_text(cert_data)
                if key_data is not None:
                    key_file = Path(private, "client.key")
                    key_file.write_text(key_data)
                context.load_cert_chain(str(cert_file), str(key_file))
        elif cert_file or cert_data or key_file or key_data:
            raise ApiError(0, f"{where}: a client certificate needs both its cert and its key")
    except (OSError, ssl.SSLError) as exc:
        raise ApiError(0, f"{where}: cannot load the TLS credentials: {exc}") from None
    return context


def _status_message(text: str) -> str:
    try:
        status = json.loads(text)
    except json.JSONDecodeError:
        return text[:200]
    if isinstance(status, dict) and status.get("message"):
        return str(status["message"])[:500]
    return text[:200]
