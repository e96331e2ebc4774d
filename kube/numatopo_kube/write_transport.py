"""`WriteTransport`: the writes the operator sends for every decided pod, over aiohttp.

Why, and what it shares with the lightkube client: docs/DESIGN.md, "Kubernetes client".
lightkube's helpers make the TLS context (cluster CA, client certificate,
insecure-skip-verify) and the auth flow, run once per request as under httpx; retries stay
`KubeClient._call`'s. The session is made on the first request, on the loop that sends it.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import NamedTuple

import aiohttp
import httpx2
import msgspec
from lightkube.config.client_adapter import user_auth, verify_cluster
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User

from numatopo_kube.errors import KubeError, error_for, parse_retry_after

# As many connections as httpx's default pool: one per request in flight (HTTP/1.1).
MAX_CONNECTIONS = 100

_encode = msgspec.json.Encoder().encode
_decode_status = msgspec.json.Decoder(dict[str, object]).decode


class WriteTransport:
    """Sends a write, reads its status; parses the body only on an error (callers never use it)."""

    def __init__(self, config: SingleConfig, *, timeout_seconds: float) -> None:
        self.server = config.cluster.server.rstrip("/")
        user = config.user or User()  # lightkube's client beside this one needs one too
        self._ssl: ssl.SSLContext | bool = (
            verify_cluster(config.cluster, user, config.abs_file, trust_env=False)
            if self.server.startswith("https://")
            else False
        )
        self._auth = user_auth(user)
        # Like httpx.Timeout(t): each of connecting and each read within t, no total.
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=timeout_seconds, sock_read=timeout_seconds
        )
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def send(
        self, what: str, method: str, path: str, body: object, *, content_type: str
    ) -> None:
        """`method` `path` with JSON `body`; a `KubeError` named `what` on refusal or no answer."""
        url = self.server + path
        data = _encode(body)
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        try:
            if self._auth is None:
                status, answer = await self._request(method, url, data, headers)
            else:
                status, answer = await self._authenticated(self._auth, method, url, data, headers)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise error_for(0, type(exc).__name__, f"{what}: {exc}") from None
        if status >= 400:
            raise _refusal(what, status, answer)

    async def _authenticated(
        self, auth: httpx2.Auth, method: str, url: str, data: bytes, headers: dict[str, str]
    ) -> tuple[int, _Answer]:
        """The request with the Authorization lightkube's auth flow sets, sent again when
        the flow asks after a 401 (a token file read again, an `exec` plugin run again)."""
        flow = auth.async_auth_flow(httpx2.Request(method, url))
        try:
            request = await flow.__anext__()
            while True:
                found = request.headers.get("Authorization")
                login = {"Authorization": found} if found else {}
                status, answer = await self._request(method, url, data, {**headers, **login})
                if status != 401:
                    return status, answer
                try:
                    request = await flow.asend(httpx2.Response(status, request=request))
                except StopAsyncIteration:
                    return status, answer
        finally:
            await flow.aclose()

    async def _request(
        self, method: str, url: str, data: bytes, headers: Mapping[str, str]
    ) -> tuple[int, _Answer]:
        session = self._session
        if session is None:
            connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS, ssl=self._ssl)
            session = self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, trust_env=False
            )
        async with session.request(method, url, data=data, headers=headers) as response:
            body = await response.read()
            if response.status < 400:
                return response.status, _Answer()
            return response.status, _Answer(
                body, response.reason or "", response.headers.get("Retry-After")
            )


class _Answer(NamedTuple):
    """What an error answer said: its body, reason phrase and `Retry-After`."""

    body: bytes = b""
    reason: str = ""
    retry_after: str | None = None


def _refusal(what: str, status: int, answer: _Answer) -> KubeError:
    """The error a refusal maps to, worded as on the lightkube path: the `Status` reason
    and message when the answer is one, else its first bytes."""
    retry_after = parse_retry_after(answer.retry_after)
    try:
        parsed = _decode_status(answer.body)
    except msgspec.DecodeError:
        parsed = {}
    if parsed.get("kind") == "Status":
        reason, message = str(parsed.get("reason") or ""), str(parsed.get("message") or "")
        code = parsed.get("code")
        return error_for(
            code if isinstance(code, int) and code else status,
            reason,
            f"{what}: {message or answer.reason}",
            retry_after=retry_after,
        )
    text = answer.body[:200].decode(errors="replace")
    return error_for(status, answer.reason, f"{what}: {text}", retry_after=retry_after)
