"""Slow and silent clients of the operator's two ports, over real sockets: a client that
sends half a request head, or a head whose body never comes, holds its connection no
longer than the deadline for it (aiohttp alone would wait an hour for the head, and for
a body without end)."""

from __future__ import annotations

import asyncio
import json
import time

from numatopo_operator import extender, health, main

# Timers of a loaded machine fire late; an hour is what the deadlines replace.
LATE = 10.0


async def _answer_within(
    port: int, sent: bytes, seconds: float, *, closed_within: float | None = None
) -> tuple[float, bytes]:
    """(seconds until the server answered, the answer) for a client that sends `sent`
    and then nothing; fails when the server neither answered nor closed within
    `seconds`, or has not closed `closed_within` seconds after it answered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(sent)
        await writer.drain()
        started, got = time.monotonic(), b""
        try:
            async with asyncio.timeout(seconds):
                got = await reader.read(1 << 16)
            took = time.monotonic() - started
            if got and closed_within is not None:
                async with asyncio.timeout(closed_within):
                    while more := await reader.read(1 << 16):
                        got += more
        except TimeoutError:
            raise AssertionError(f"the server still holds the connection ({got!r})") from None
        return took, got
    finally:
        writer.close()


async def test_half_a_head_on_the_metrics_port_holds_its_socket_only_until_the_deadline(env):
    start_operator = env.start_operator
    running = await start_operator()
    port = running.servers.metrics_port

    half_head, silent = await asyncio.gather(
        _answer_within(
            port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: 1", health.HEAD_SECONDS + LATE
        ),
        _answer_within(port, b"", health.HEAD_SECONDS + LATE),
    )

    for took, got in (half_head, silent):
        assert b"" == got
        assert health.HEAD_SECONDS - 1 <= took
    # Still serving.
    assert (200, "ok\n") == await running.get("/healthz")


async def test_a_body_that_never_comes_is_an_error_once_its_deadline_passed(env):
    """kube-scheduler sends its body at once; a caller that announces 100 bytes and sends
    one is answered (JSON, in the verb's shape) and its connection closed."""
    start_operator = env.start_operator
    running = await start_operator()
    await env.wait(lambda: running.runtime.deciding, what="the operator decides")
    port = running.servers.extender_port

    def stalled(verb: str) -> bytes:
        return (
            f"POST {verb} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Content-Length: 100\r\nConnection: close\r\n\r\n{"
        ).encode()

    answers = await asyncio.gather(
        *(
            # aiohttp reads what is left of a body for up to 10 s after the answer.
            _answer_within(
                port, stalled(verb), extender.BODY_SECONDS + LATE, closed_within=10 + LATE
            )
            for verb in ("/filter", "/bind")
        )
    )

    error = f"request body not received within {extender.BODY_SECONDS:g} s"
    for took, got in answers:
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 "), head
        assert error == json.loads(body)["Error"]
        assert extender.BODY_SECONDS - 1 <= took


async def test_connections_that_asked_once_and_stay_open_do_not_keep_a_probe_out(env):
    """As many connections as the metrics port holds, each asking `/healthz` once and
    kept open (keep-alive): the kubelet's next probe still gets in, the oldest of them
    shut down for it."""
    running = await env.start_operator()
    port = running.servers.metrics_port
    held = []
    try:
        for _ in range(main.METRICS_CONNECTIONS):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            async with asyncio.timeout(LATE):
                assert (await reader.readuntil(b"ok\n")).startswith(b"HTTP/1.1 200 ")
            held.append((reader, writer))

        assert (200, "ok\n") == await running.get("/healthz")

        oldest, _ = held[0]
        async with asyncio.timeout(LATE):
            assert await oldest.read() == b""
    finally:
        for _, writer in held:
            writer.close()
