"""`CappedListener`, the listening socket of every numatopo port, over real sockets:
which connection it shuts down when it holds its limit (the order the operator's
extender and metrics ports and the node processes' metrics ports rely on)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from numatopo_kube.capped_listener import CappedListener


class Port:
    def __init__(self, limit: int, *, keep_busy: bool) -> None:
        self.shut = 0
        self.listener = CappedListener("127.0.0.1", 0, limit, self._count, keep_busy=keep_busy)
        self.listener.settimeout(5)
        self.clients: list[socket.socket] = []
        self.accepted: list[socket.socket] = []

    def _count(self) -> None:
        self.shut += 1

    def connect(self) -> int:
        """A new client connection, accepted; its number (0 for the first)."""
        self.clients.append(socket.create_connection(self.listener.getsockname(), timeout=5))
        accepted, _ = self.listener.accept()
        self.accepted.append(accepted)
        return len(self.accepted) - 1

    def request(self, number: int, *, done: bool) -> None:
        descriptor = self.accepted[number].fileno()
        self.listener.started(descriptor)
        if done:
            self.listener.finished(descriptor)

    def ended(self, number: int) -> bool:
        """Whether the client of connection `number` reads the end of its connection."""
        client = self.clients[number]
        client.settimeout(0.2)
        try:
            return client.recv(1) == b""
        except TimeoutError:
            return False

    def close(self) -> None:
        for each in [*self.clients, *self.accepted, self.listener]:
            each.close()


@contextmanager
def port(limit: int, *, keep_busy: bool) -> Iterator[Port]:
    made = Port(limit, keep_busy=keep_busy)
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("keep_busy", [False, True], ids=["metrics", "extender"])
def test_the_oldest_without_a_request_goes_first_then_the_oldest_idle(keep_busy: bool) -> None:
    with port(3, keep_busy=keep_busy) as held:
        busy, idle, silent = held.connect(), held.connect(), held.connect()
        held.request(busy, done=False)
        held.request(idle, done=True)
        newest = held.connect()  # past the limit: the one that never asked goes
        assert [held.ended(n) for n in (busy, idle, silent, newest)] == [
            False, False, True, False,
        ]  # fmt: skip
        held.request(newest, done=False)
        latest = held.connect()  # every one asked: the idle one goes
        assert [held.ended(n) for n in (busy, idle, newest, latest)] == [
            False, True, False, False,
        ]  # fmt: skip
        assert held.shut == 2


def test_with_every_connection_serving_a_request() -> None:
    """The metrics ports shut the oldest (a client that asks and never reads its answer
    must not keep the kubelet's probes out); the extender's port, where only
    kube-scheduler makes requests, shuts the new connection instead of cutting one."""
    for keep_busy, cut in ((False, [True, False, False]), (True, [False, False, True])):
        with port(2, keep_busy=keep_busy) as held:
            first, second = held.connect(), held.connect()
            held.request(first, done=False)
            held.request(second, done=False)
            third = held.connect()
            assert [held.ended(n) for n in (first, second, third)] == cut, keep_busy
