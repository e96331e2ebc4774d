"""The extender's own HTTP/1.1 server (`extender_http`) at the edges of what it accepts.

The real `Extender` over an operator runtime that decides (no nodes known), served on a
loopback port; raw sockets send what no well-behaved client would: huge or too many
headers, chunked bodies, pipelined requests, a body above the bound, a request that
trickles in byte by byte, an idle connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

import pytest

from numatopo_operator.extender import Extender
from numatopo_operator.extender_http import MAX_HEAD_BYTES, MAX_HEADERS, ExtenderServer, Limits
from numatopo_operator.extender_wire import MAX_BODY_BYTES
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings

POD = {"metadata": {"name": "p", "namespace": "d", "uid": "u"}, "spec": {"containers": []}}
FILTER = json.dumps({"Pod": POD, "NodeNames": ["a", "b"]}).encode()


def post(path: str, body: bytes, *headers: str, version: str = "HTTP/1.1") -> bytes:
    lines = [f"POST {path} {version}", "Host: x", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def serving(limits: Limits | None = None) -> tuple[ExtenderServer, int]:
    runtime = Runtime(OperatorSettings())
    for event in (runtime.role_known, runtime.active, runtime.indexed, runtime.ledger_current):
        event.set()
    server = ExtenderServer(Extender(runtime).answer, limits)
    return server, await server.start("127.0.0.1", 0)


@pytest.fixture
async def port() -> AsyncIterator[int]:
    server, found = await serving()
    yield found
    await server.stop()


@contextlib.asynccontextmanager
async def connected(port: int) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response: status, headers (lower-case names), body by its Content-Length."""
    async with asyncio.timeout(10):
        head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    async with asyncio.timeout(10):
        body = await reader.readexactly(int(headers.get("content-length", 0)))
    return status, headers, body


async def closed(reader: asyncio.StreamReader) -> bool:
    """Whether the server ends the connection (within 10 s)."""
    try:
        async with asyncio.timeout(10):
            return await reader.read(1 << 16) == b""
    except ConnectionResetError:
        return True


async def test_keep_alive_answers_several_requests_on_one_connection(port):
    async with connected(port) as (reader, writer):
        for _ in range(3):
            writer.write(post("/filter", FILTER))
            status, headers, body = await read_answer(reader)
            assert (200, "application/json") == (status, headers["content-type"])
            assert ["a", "b"] == json.loads(body)["NodeNames"]
            assert "connection" not in headers


async def test_pipelined_requests_are_answered_in_order(port):
    async with connected(port) as (reader, writer):
        prioritize = json.dumps({"Pod": POD, "NodeNames": ["b"]}).encode()
        writer.write(post("/filter", FILTER) + post("/prioritize", prioritize) + post("/nope", b""))
        answers = [await read_answer(reader) for _ in range(3)]
        assert [200, 200, 404] == [status for status, _, _ in answers]
        assert ["a", "b"] == json.loads(answers[0][2])["NodeNames"]
        assert [{"Host": "b", "Score": 0}] == json.loads(answers[1][2])


async def test_http_1_0_closes_after_its_answer_unless_asked_to_keep_alive(port):
    async with connected(port) as (reader, writer):
        writer.write(post("/filter", FILTER, "Connection: keep-alive", version="HTTP/1.0"))
        assert 200 == (await read_answer(reader))[0]
        writer.write(post("/filter", FILTER, version="HTTP/1.0"))
        status, headers, _ = await read_answer(reader)
        assert (200, "close") == (status, headers["connection"])
        assert await closed(reader)


async def test_connection_close_is_honoured(port):
    async with connected(port) as (reader, writer):
        writer.write(post("/filter", FILTER, "Connection: close"))
        assert 200 == (await read_answer(reader))[0]
        assert await closed(reader)


async def test_a_chunked_body_is_refused_with_411(port):
    async with connected(port) as (reader, writer):
        writer.write(
            b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n%s\r\n0\r\n\r\n" % (len(FILTER), FILTER)
        )
        status, headers, body = await read_answer(reader)
        assert (411, "close") == (status, headers["connection"])
        assert json.loads(body)["Error"].startswith("411 ")
        assert await closed(reader)


@pytest.mark.parametrize(
    ("head", "status"),
    [
        pytest.param(
            b"POST /filter HTTP/1.1\r\nX-Big: " + b"y" * MAX_HEAD_BYTES + b"\r\n\r\n",
            431,
            id="oversized-header",
        ),
        pytest.param(
            b"POST /filter HTTP/1.1\r\nX-Big: " + b"y" * (2 * MAX_HEAD_BYTES),
            431,
            id="endless-header",
        ),
        pytest.param(
            b"POST /filter HTTP/1.1\r\n"
            + b"".join(b"X-%d: 1\r\n" % i for i in range(MAX_HEADERS + 1))
            + b"\r\n",
            431,
            id="too-many-headers",
        ),
        pytest.param(b"POST /filter\r\n\r\n", 400, id="no-version"),
        pytest.param(b"POST /filter HTTP/2.0\r\n\r\n", 400, id="other-version"),
        pytest.param(b"post /filter HTTP/1.1\r\n\r\n", 400, id="lower-case-method"),
        pytest.param(b"POST filter HTTP/1.1\r\n\r\n", 400, id="not-a-path"),
        pytest.param(b"POST /filter HTTP/1.1\r\nNoColon\r\n\r\n", 400, id="header-no-colon"),
        pytest.param(b"POST /filter HTTP/1.1\r\nA : b\r\n\r\n", 400, id="space-before-colon"),
        pytest.param(
            b"POST /filter HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, id="negative-length"
        ),
        pytest.param(
            b"POST /filter HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
            400,
            id="two-lengths",
        ),
        pytest.param(b"POST /filter HTTP/1.1\r\nX: \xff\xfe\r\n\r\n", 200, id="latin-1-value"),
        pytest.param(b"\xff\xfe /filter HTTP/1.1\r\n\r\n", 400, id="binary-method"),
    ],
)
async def test_heads_it_cannot_read_are_answered_in_json_and_the_connection_closes(
    port, head, status
):
    async with connected(port) as (reader, writer):
        writer.write(head)
        found, headers, body = await read_answer(reader)
        assert (status, "application/json") == (found, headers["content-type"])
        if status != 200:
            assert json.loads(body)["Error"].startswith(f"{status} ")
            assert "close" == headers["connection"]
            assert await closed(reader)


async def test_a_body_above_the_bound_is_not_read_and_gets_the_verbs_answer(port):
    async with connected(port) as (reader, writer):
        writer.write(
            b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1)
            + b"x" * 1024
        )
        status, headers, body = await read_answer(reader)
        answer = json.loads(body)
        assert (200, "close") == (status, headers["connection"])
        assert f"request body is larger than {MAX_BODY_BYTES} bytes" == answer["Error"]
        assert None is answer["NodeNames"]
        assert await closed(reader)


async def test_expect_100_continue_is_answered_before_the_body(port):
    async with connected(port) as (reader, writer):
        head, _, body = post("/filter", FILTER, "Expect: 100-continue").partition(b"\r\n\r\n")
        writer.write(head + b"\r\n\r\n")
        async with asyncio.timeout(10):
            interim = await reader.readuntil(b"\r\n\r\n")
        assert interim.startswith(b"HTTP/1.1 100 ")
        writer.write(body)
        assert 200 == (await read_answer(reader))[0]


async def test_a_request_that_trickles_in_is_cut_off():
    """Slowloris: one byte at a time, never the whole head in time."""
    server, port = await serving(Limits(request_seconds=0.5))
    try:
        async with connected(port) as (reader, writer):
            started = time.monotonic()

            async def trickle() -> None:
                for byte in post("/filter", FILTER):
                    writer.write(bytes([byte]))
                    await asyncio.sleep(0.05)

            sending = asyncio.create_task(trickle())
            status, headers, body = await read_answer(reader)
            assert (408, "close") == (status, headers["connection"])
            assert json.loads(body)["Error"].startswith("408 ")
            assert time.monotonic() - started < 5
            assert await closed(reader)
            assert not sending.done()  # it was cut off, not answered once whole
            sending.cancel()
    finally:
        await server.stop()


async def test_an_idle_connection_is_closed_and_a_busy_one_is_not():
    server, port = await serving(Limits(idle_seconds=0.4))
    try:
        async with connected(port) as (reader, writer):
            for _ in range(4):  # each request restarts the idle clock
                await asyncio.sleep(0.2)
                writer.write(post("/filter", FILTER))
                assert 200 == (await read_answer(reader))[0]
            started = time.monotonic()
            assert await closed(reader)
            assert time.monotonic() - started < 5
    finally:
        await server.stop()


async def test_stop_closes_open_connections():
    server, port = await serving()
    async with connected(port) as (reader, _):
        await server.stop()
        assert await closed(reader)
