"""A listening socket that holds at most a given number of connections open (for the
asyncio servers of the operator and the node processes).

Each accepted connection costs a file descriptor, and one on a TLS port about 300 KiB
until its handshake ends (asyncio's 256 KiB buffer and the TLS state), for up to 60 s.
A client opening connections and sending nothing would run a process out of either:
1,500 of them took 455 MiB. The socket below counts what it accepts (asyncio's servers
call its `accept`); past `limit` open connections it shuts one down, so its server
reads its end at once and frees it: the oldest that has not made a request yet, else
the oldest. Shutting down, not closing, leaves the descriptor to its transport, which
closes it. A new connection always gets in: a flood only shortens how long the oldest
idle ones are kept, and on the extender's port only kube-scheduler, with its client
certificate, makes requests.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable

logger = logging.getLogger("numatopo.connections")

LOG_EVERY_SECONDS = 60.0


class CappedListener(socket.socket):
    """Listening on `host:port` (port 0: any free one), holding at most `limit`
    connections; `on_shut` is called for each it shuts down."""

    def __init__(self, host: str, port: int, limit: int, on_shut: Callable[[], None]) -> None:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        super().__init__(family, kind, proto)
        try:
            # As asyncio's own servers do: reuse a port in TIME_WAIT; IPv6 alone on "::".
            self.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                self.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            self.bind(address)
            self.listen(100)
            self.setblocking(False)
        except OSError:
            self.close()
            raise
        self.limit = limit
        self._on_shut = on_shut
        self._shut_count = 0
        self._logged = -LOG_EVERY_SECONDS
        self._open: dict[int, socket.socket] = {}
        """Each connection still open by its file descriptor, in the order accepted."""
        self._asked: set[int] = set()
        """The descriptors of those that made a request."""

    def accept(self) -> tuple[socket.socket, object]:
        connection, address = super().accept()
        for closed in [d for d, c in self._open.items() if c.fileno() == -1]:
            del self._open[closed]  # its transport closed it: the number may come again
            self._asked.discard(closed)
        self._open[connection.fileno()] = connection
        while len(self._open) > self.limit:
            idle = (d for d in self._open if d not in self._asked)
            self._shut(next(idle, next(iter(self._open))))
        return connection, address

    def asked(self, descriptor: int) -> None:
        """The connection on file descriptor `descriptor` made a request."""
        if descriptor in self._open:
            self._asked.add(descriptor)

    def _shut(self, descriptor: int) -> None:
        connection = self._open.pop(descriptor)
        self._asked.discard(descriptor)
        with contextlib.suppress(OSError):
            connection.shutdown(socket.SHUT_RDWR)
        self._shut_count += 1
        self._on_shut()
        now = time.monotonic()
        if now - self._logged >= LOG_EVERY_SECONDS:  # a flood must not flood the log too
            self._logged = now
            logger.warning(
                "port %s holds its limit of %d connections: shutting the oldest idle one "
                "down (%d so far)",
                self.getsockname()[1],
                self.limit,
                self._shut_count,
            )
