"""The extender's HTTP/1.1 server: small and strict, on `asyncio.Protocol` (I/O).

kube-scheduler calls the extender twice per scheduling cycle over one keep-alive
connection, and each call's own work is about a millisecond. A general web framework's
request machinery (aiohttp: about 0.35 ms of CPU per request, measured) was a third of
the cycle; this reads exactly what kube-scheduler sends and no more:

  * a request line and at most `MAX_HEADERS` headers within `MAX_HEAD_BYTES`, else
    431 (or 400 for a malformed line), and the connection closes;
  * a body by `Content-Length` only: `Transfer-Encoding` is answered 411 (Go's client
    sends a length for the bodies it marshals); a body above `MAX_BODY_BYTES` is not
    read, the verb answers that it is too large (its own shape), and the connection
    closes; no length is an empty body;
  * keep-alive (HTTP/1.1 unless `Connection: close`; HTTP/1.0 only when asked), and
    pipelined requests answered in order, one at a time: reading pauses while the
    buffered input or the unsent answers grow past their bounds;
  * a request must arrive whole within `request_seconds` of its first byte (a client
    that trickles bytes is cut off, 408), and an idle connection closes after
    `idle_seconds`.

TLS is the listening socket's (`extender_tls.RotatingContext.listening`): asyncio does
the handshake before the first byte reaches this protocol. What each request means is
`extender.Extender.answer`'s: this module knows nothing of the verbs.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from numatopo_operator.extender_wire import MAX_BODY_BYTES

__all__ = ["MAX_HEADERS", "MAX_HEAD_BYTES", "Answer", "ExtenderServer", "Limits"]

logger = logging.getLogger(__name__)

MAX_HEADERS = 100
MAX_HEAD_BYTES = 16 << 10
"""The request line and headers together (kube-scheduler sends a few hundred bytes)."""

_REASONS = {
    100: "Continue", 200: "OK", 400: "Bad Request", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 411: "Length Required",
    413: "Content Too Large", 431: "Request Header Fields Too Large",
    500: "Internal Server Error", 503: "Service Unavailable",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Answer:
    """One response: its status, its JSON body and, for a 405, the methods allowed."""

    status: int
    body: bytes
    allow: str = ""


Respond = Callable[[str, str, bytes | None], Awaitable[Answer]]
"""(method, path, body) -> the answer; body None: it was above `MAX_BODY_BYTES`."""


@dataclass(frozen=True, slots=True)
class Limits:
    """How long a request may take to arrive, and an idle connection may stay."""

    request_seconds: float = 30.0
    linger_seconds: float = 2.0
    """After an answer that leaves input unread (a refused head, a body too large), how
    long the rest is read and dropped before the connection closes: closing at once
    would reset it, and the client could lose the answer."""
    idle_seconds: float = 300.0
    """Longer than Go's http.Transport keeps an idle connection (90 s): the client, not
    the server, should end it, or a POST sent as the server closes would fail."""


def _error(status: int, text: str) -> Answer:
    body = b'{"Error":"%d %s: %s"}' % (status, _REASONS[status].encode(), text.encode())
    return Answer(status, body)


def _head(answer: Answer, close: bool) -> bytes:
    lines = [
        b"HTTP/1.1 %d %s" % (answer.status, _REASONS.get(answer.status, "Error").encode()),
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(answer.body),
    ]
    if answer.allow:
        lines.append(b"Allow: " + answer.allow.encode())
    if close:
        lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


@dataclass(slots=True)
class _Request:
    method: str
    path: str
    length: int
    keep_alive: bool
    expect: bool
    """The client waits for `100 Continue` before it sends the body."""


class _RefusedError(Exception):
    """The request cannot be read: answer this, then close."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.status)
        self.answer = answer


def _parse_head(head: bytes) -> _Request:
    """The request line and headers (`head` without its blank line)."""
    lines = head.split(b"\r\n")
    if len(lines) - 1 > MAX_HEADERS:
        raise _RefusedError(_error(431, f"more than {MAX_HEADERS} headers"))
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0") or not parts[1]:
        raise _RefusedError(_error(400, "not an HTTP/1.1 request line"))
    method, target, version = parts
    if not method.isalpha() or not method.isupper() or not target.startswith(b"/"):
        raise _RefusedError(_error(400, "not an HTTP/1.1 request line"))
    keep_alive = version == b"HTTP/1.1"
    length: int | None = None
    expect = False
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or b" " in name:
            raise _RefusedError(_error(400, "malformed header"))
        name, value = name.lower(), value.strip()
        if name == b"content-length":
            if not value.isdigit() or (length is not None and int(value) != length):
                raise _RefusedError(_error(400, "invalid Content-Length"))
            length = int(value)
        elif name == b"transfer-encoding":
            raise _RefusedError(_error(411, "send the body with a Content-Length, not chunked"))
        elif name == b"connection":
            tokens = {t.strip() for t in value.lower().split(b",")}
            keep_alive = b"keep-alive" in tokens if not keep_alive else b"close" not in tokens
        elif name == b"expect":
            expect = value.lower() == b"100-continue"
    path = target.split(b"?", 1)[0].decode("latin-1")
    return _Request(method.decode("ascii"), path, length or 0, keep_alive, expect)


class _Connection(asyncio.Protocol):
    """One client connection: requests read, answered in order, one at a time."""

    def __init__(self, server: ExtenderServer) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.busy = False
        self.paused_reading = False
        self.can_write = True
        self.closing = False
        self.continued = False
        self.lingering = False
        self.timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.connections.add(self)
        self._wait(self.server.limits.idle_seconds)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.closing = True
        self._wait(None)

    def data_received(self, data: bytes) -> None:
        if self.closing or self.lingering:
            return  # a lingering connection drops what still comes
        if not self.buffer and not self.busy:
            # The first byte of a request: it has `request_seconds` to arrive whole.
            self._wait(self.server.limits.request_seconds)
        self.buffer += data
        if len(self.buffer) > MAX_BODY_BYTES + MAX_HEAD_BYTES and not self.paused_reading:
            assert self.transport is not None
            self.transport.pause_reading()
            self.paused_reading = True
        if not self.busy:
            self._next()

    def eof_received(self) -> bool:
        # A client that half-closes after its request still gets the answer.
        if self.lingering and not self.busy:
            self._close()
        return self.busy

    def pause_writing(self) -> None:
        self.can_write = False

    def resume_writing(self) -> None:
        self.can_write = True
        if not self.busy:
            self._next()

    # -- requests ---------------------------------------------------------------------

    def _wait(self, seconds: float | None) -> None:
        """Close the connection after `seconds` unless called again first (None: never)."""
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_later(seconds, self._expire) if seconds else None

    def _expire(self) -> None:
        self.timer = None
        if self.lingering:
            self._close()
            return
        if self.busy or self.closing:
            return
        if self.buffer:  # a request began and did not arrive in time
            self._send(_error(408, "the request did not arrive in time"), close=True)
        else:
            self._close()

    def _next(self) -> None:
        """Answer the next request in the buffer once it is whole."""
        if self.closing or not self.can_write:
            return
        buffer = self.buffer
        end = buffer.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
        if end < 0:
            if len(buffer) > MAX_HEAD_BYTES:
                self._refuse(_error(431, f"headers above {MAX_HEAD_BYTES} bytes"))
            elif self.paused_reading:
                self._resume()
            return
        try:
            request = _parse_head(bytes(buffer[:end]))
        except _RefusedError as refused:
            self._refuse(refused.answer)
            return
        except UnicodeDecodeError:
            self._refuse(_error(400, "not an HTTP/1.1 request line"))
            return
        start = end + 4
        if request.length > MAX_BODY_BYTES:
            # Not read: the answer says so, and the body is dropped until the connection ends.
            self.buffer.clear()
            self.lingering = True
            self._run(request, None, close=True)
            return
        if len(buffer) < start + request.length:
            if request.expect and not self.continued:
                assert self.transport is not None
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                self.continued = True
            if self.paused_reading:
                self._resume()
            return
        body = bytes(buffer[start : start + request.length])
        del buffer[: start + request.length]
        self.continued = False
        self._run(request, body, close=not request.keep_alive)

    def _resume(self) -> None:
        assert self.transport is not None
        self.paused_reading = False
        self.transport.resume_reading()

    def _run(self, request: _Request, body: bytes | None, *, close: bool) -> None:
        self.busy = True
        self._wait(None)
        task = self.loop.create_task(self._answer(request, body, close))
        self.server.tasks.add(task)
        task.add_done_callback(self.server.tasks.discard)

    async def _answer(self, request: _Request, body: bytes | None, close: bool) -> None:
        try:
            answer = await self.server.respond(request.method, request.path, body)
        except Exception:
            # `Extender.answer` shapes every failure itself; this is the last resort.
            logger.exception("extender %s %s failed", request.method, request.path)
            answer = _error(500, "numatopo extender internal error; see the operator log")
        self.busy = False
        self._send(answer, close=close)
        if not self.closing and not self.lingering:
            if self.buffer:
                self._wait(self.server.limits.request_seconds)
                self._next()
            else:
                self._wait(self.server.limits.idle_seconds)
            if self.paused_reading and len(self.buffer) <= MAX_BODY_BYTES + MAX_HEAD_BYTES:
                self._resume()

    def _refuse(self, answer: Answer) -> None:
        """Answer a request that cannot be read, then drop input until the connection ends."""
        self.buffer.clear()
        self.lingering = True
        self._send(answer, close=True)

    def _send(self, answer: Answer, *, close: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            self.closing = True
            return
        self.transport.write(_head(answer, close) + answer.body)
        if not close:
            return
        if not self.lingering:
            self._close()
            return
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._wait(self.server.limits.linger_seconds)

    def _close(self) -> None:
        self.closing = True
        self._wait(None)
        if self.transport is not None:
            self.transport.close()


class ExtenderServer:
    """The listening socket and its connections; `respond` answers each request."""

    def __init__(self, respond: Respond, limits: Limits | None = None) -> None:
        self.respond = respond
        self.limits = limits or Limits()
        self.connections: set[_Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> int:
        """Listen on `host`:`port` (0: any free port); the port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), host, port, ssl=tls, reuse_address=True
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop listening, end the requests in flight and close every connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self.tasks):
            task.cancel()
        for connection in list(self.connections):
            connection._close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
