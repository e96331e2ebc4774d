"""The extender's TLS: mutual authentication of kube-scheduler, with certificates that
rotate without a restart (I/O: reads the certificate files; docs/operations.md, "Scheduler
to extender: mutual TLS").

kube-scheduler cannot send an extender a token, but its `extenders[].tlsConfig` can present
a client certificate: the extender serves HTTPS only, to clients whose certificate chains
to `extender_client_ca`, a CA that signs the scheduler's and nothing else. Each handshake
stats the files; a change hands the connection a new context from OpenSSL's server-name
callback, which runs before the certificate is picked or the client's verified. A set that
does not load keeps the previous context, logged.
"""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass

from numatopo_operator.settings import OperatorSettings

logger = logging.getLogger(__name__)


class ExtenderTlsError(RuntimeError):
    """No TLS material and no explicit plain-HTTP opt-out, or files that do not load."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The server's certificate chain and key, and the CA its clients must chain to."""

    cert: str
    key: str
    client_ca: str

    def stamp(self) -> tuple[tuple[int, int, int], ...]:
        """What changes when any of the files is replaced or rewritten (follows links)."""
        found = map(os.stat, (self.cert, self.key, self.client_ca))
        return tuple((info.st_ino, info.st_mtime_ns, info.st_size) for info in found)


def _load(files: TlsFiles) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED
    try:
        context.load_cert_chain(files.cert, files.key)
        context.load_verify_locations(cafile=files.client_ca)
    except (OSError, ssl.SSLError) as exc:
        raise ExtenderTlsError(
            f"extender TLS files do not load (certificate {files.cert}, key {files.key}, "
            f"client CA {files.client_ca}): {exc}"
        ) from exc
    return context


class RotatingContext:
    """The context the extender listens with; each handshake gets the newest one."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self._stamp = files.stamp()
        self.current = _load(files)
        self.listening = _load(files)
        self.listening.sni_callback = self._pick
        self.reloads = 0
        """How many times new files were loaded since the start."""

    def refresh(self) -> ssl.SSLContext:
        """The newest context: reloaded if a file changed since the last look."""
        try:
            stamp = self.files.stamp()
        except OSError as exc:
            logger.warning("extender TLS files unreadable, keeping the loaded ones: %s", exc)
            return self.current
        if stamp == self._stamp:
            return self.current
        try:
            fresh = _load(self.files)
        except ExtenderTlsError as exc:
            # Mid-rotation or broken: the old pair still works for the scheduler.
            logger.warning("%s; keeping the previous certificates", exc)
            return self.current
        self._stamp = stamp
        self.current = fresh
        self.reloads += 1
        logger.info("extender TLS: loaded rotated certificate files (reload %d)", self.reloads)
        return fresh

    def _pick(self, connection: ssl.SSLObject, _server_name: str | None, _: object) -> None:
        # In the handshake: the swapped context gives this connection the new files.
        connection.context = self.refresh()


def extender_context(settings: OperatorSettings) -> RotatingContext | None:
    """The extender's TLS, or None for plain HTTP (only when explicitly asked for)."""
    if settings.extender_insecure_plain_http:
        logger.warning(
            "INSECURE: the scheduler extender serves plain HTTP without client "
            "authentication (--extender-insecure-plain-http). Any workload that reaches "
            "port %d can bind any pending pod to any node. Use TLS in production.",
            settings.extender_port,
        )
        return None
    named = (settings.extender_tls_cert, settings.extender_tls_key, settings.extender_client_ca)
    if not all(named):
        raise ExtenderTlsError(
            "the scheduler extender needs TLS: give --extender-tls-cert, --extender-tls-key "
            "and --extender-client-ca (NUMATOPO_EXTENDER_TLS_CERT, ..._TLS_KEY, "
            "..._CLIENT_CA), or, for a test cluster only, --extender-insecure-plain-http"
        )
    files = TlsFiles(*named)
    try:
        files.stamp()
    except OSError as exc:
        raise ExtenderTlsError(f"extender TLS file missing: {exc}") from exc
    return RotatingContext(files)
