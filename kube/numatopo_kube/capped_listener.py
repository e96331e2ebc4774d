"""A listening socket that holds at most a given number of connections open (for the
asyncio servers of the operator and the node processes). Why, and which connection it shuts
down at the bound: docs/operations.md, "Security" (each port's bound) and docs/DESIGN.md.
Shutting down, not closing, leaves the descriptor to its transport, which closes it.
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
    connections; `on_shut` is called for each it shuts down. The server says when a
    request starts and ends on a connection (`started`, `finished`)."""

    def __init__(
        self,
        host: str,
        port: int,
        limit: int,
        on_shut: Callable[[], None],
        *,
        keep_busy: bool = False,
    ) -> None:
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
        self.limit = max(1, limit)
        self.keep_busy = keep_busy
        self._on_shut = on_shut
        self._shut_count = 0
        self._logged = -LOG_EVERY_SECONDS
        self._open: dict[int, socket.socket] = {}
        """Each connection still open by its file descriptor, in the order accepted."""
        self._asked: set[int] = set()
        """The descriptors of those that made a request."""
        self._busy: dict[int, int] = {}
        """Descriptor -> requests running on it."""

    def accept(self) -> tuple[socket.socket, object]:
        connection, address = super().accept()
        for closed in [d for d, c in self._open.items() if c.fileno() == -1]:
            self._forget(closed)  # its transport closed it: the number may come again
        while len(self._open) >= self.limit:
            victim = self._victim()
            if victim is None:
                self._shut(connection)
                return connection, address
            self._shut(self._forget(victim))
        self._open[connection.fileno()] = connection
        return connection, address

    def started(self, descriptor: int) -> None:
        """A request started on the connection on file descriptor `descriptor`."""
        if descriptor in self._open:
            self._asked.add(descriptor)
            self._busy[descriptor] = self._busy.get(descriptor, 0) + 1

    def finished(self, descriptor: int) -> None:
        """A request `started` on it ended."""
        running = self._busy.pop(descriptor, 0)
        if running > 1:
            self._busy[descriptor] = running - 1

    def _victim(self) -> int | None:
        held = list(self._open)
        never = next((d for d in held if d not in self._asked), None)
        if never is not None:
            return never
        idle = next((d for d in held if d not in self._busy), None)
        if idle is not None or self.keep_busy:
            return idle
        return held[0]

    def _forget(self, descriptor: int) -> socket.socket:
        self._asked.discard(descriptor)
        self._busy.pop(descriptor, None)
        return self._open.pop(descriptor)

    def _shut(self, connection: socket.socket) -> None:
        with contextlib.suppress(OSError):
            connection.shutdown(socket.SHUT_RDWR)
        self._shut_count += 1
        self._on_shut()
        now = time.monotonic()
        if now - self._logged >= LOG_EVERY_SECONDS:  # a flood must not flood the log too
            self._logged = now
            logger.warning(
                "port %s holds its limit of %d connections: shutting one down (%d so far)",
                self.getsockname()[1],
                self.limit,
                self._shut_count,
            )
