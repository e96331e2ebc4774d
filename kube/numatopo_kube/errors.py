"""The errors of every Kubernetes call numatopo makes, one class per kind of refusal under
`KubeError` (`error_for` maps an answer's status to its class): lightkube's and httpx's
exceptions never leave this package."""

from __future__ import annotations

import datetime
import email.utils
import math

# Throttled, or the server (or a proxy before it) failing: a later identical call may pass.
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})


class KubeError(Exception):
    """The Kubernetes API refused a call; `status` 0 when no answer came at all."""

    def __init__(
        self, status: int, reason: str, message: str, *, retry_after: float | None = None
    ) -> None:
        super().__init__(f"HTTP {status} {reason}: {message}" if status else f"{reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        """Seconds the server asked us to wait (its `Retry-After` header), if it said."""

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def transient(self) -> bool:
        """A later identical call may succeed (throttling, a failing or unreachable server)."""
        return isinstance(self, KubeUnavailableError)


class KubeConfigError(KubeError):
    """No credentials, or credentials that cannot be used; never retried."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "BadConfig", message)


class KubeNotFoundError(KubeError):
    """The object (or the resource) does not exist."""


class KubePodReplacedError(KubeNotFoundError):
    """A write guarded by the pod's uid was refused: that pod is gone, and the name may now
    be a namesake's (a pod re-created under it), which the write must not touch."""


class KubeConflictError(KubeError):
    """The object changed or already exists."""


class KubeForbiddenError(KubeError):
    """The service account may not do this; the chart's RBAC needs a rule."""


class KubeInvalidNameError(KubeError):
    """Not a valid Kubernetes name (`kube_names`), kept out of URL paths (`..`, `/`); no retry."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "InvalidName", message)


class KubeUnavailableError(KubeError):
    """Throttled (429), a server error (5xx), or no connection (status 0)."""


def error_for(
    status: int, reason: str, message: str, *, retry_after: float | None = None
) -> KubeError:
    """The error class an answer with `status` maps to."""
    kind: type[KubeError] = {
        403: KubeForbiddenError,
        404: KubeNotFoundError,
        409: KubeConflictError,
    }.get(status, KubeError)
    if status == 0 or status in RETRIED_STATUSES:
        kind = KubeUnavailableError
    return kind(status, reason, message[:500], retry_after=retry_after)


def parse_retry_after(header: str | None) -> float | None:
    """Seconds from a `Retry-After` (delta-seconds or HTTP date); None if absent or unreadable."""
    if header is None:
        return None
    text = header.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        moment = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return max((moment - datetime.datetime.now(datetime.UTC)).total_seconds(), 0.0)
