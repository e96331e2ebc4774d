"""Which replica decides: a `coordination.k8s.io/v1` Lease, as client-go's leaderelection
(docs/operations.md, "Operator: leadership, failover, retries, staleness").

Settings: `retry_period < renew_deadline < lease_duration`. A standby reads the Lease
`STANDBY_READS_PER_PERIOD` times per `retry_period` and counts the lease duration from when
*it saw* the record change (its own monotonic clock, never the holder's `renewTime`: clock
skew does not matter). It acquires once that passed without a renewal, or at once when the
Lease is free, by a patch conditioned on the `resourceVersion` read, then read back: one
standby wins. The holder renews every `retry_period` and decides and writes only while its
last successful renewal was *sent* (`Runtime.lease.renewed_at`) less than `renew_deadline`
ago (`Runtime.lease_fresh`, checked before every write). Fencing by expiry: a standby saw
that renewal no earlier than it was sent and waits `lease_duration` from then, so a holder
cut off is silent for `lease_duration - renew_deadline` before anyone may take over. A late
renewal still holding the Lease ends such a pause (`handover.judge` then).

The extender Service selects on `ACTIVE_LABEL`: the holder labels its own pod and unlabels
the previous holder's (one killed with -9 cannot); one that loses the Lease unlabels itself
after it stopped deciding. A non-holder answers the extender an Error and never binds.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import math
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from numatopo_operator import handover
from numatopo_operator.background import supervised
from numatopo_operator.errors import KubeConflictError, KubeError, KubeNotFoundError
from numatopo_operator.runtime import Runtime

logger = logging.getLogger(__name__)

ACTIVE_LABEL = "numatopo.io/extender-active"
ACTIVE_VALUE = "true"
# Removing the label and releasing the Lease on shutdown must not hold up termination.
SHUTDOWN_SECONDS = 5.0
# A standby's reads of the Lease per retry period (a GET of one small object each).
STANDBY_READS_PER_PERIOD = 4


def _now_text() -> str:
    """A MicroTime, as the Lease's `acquireTime`/`renewTime` hold it."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_identity(pod_name: str | None) -> str:
    """`<pod>_<random>`: names the pod to unlabel, unique per process (a restarted
    container never mistakes its predecessor's Lease for its own)."""
    return f"{pod_name or socket.gethostname()}_{secrets.token_hex(4)}"


def pod_of_identity(identity: str) -> str | None:
    """The pod name in a `lease_identity` (pod names never contain `_`)."""
    pod, separator, _ = identity.rpartition("_")
    return pod if separator and pod else None


def label_patch(*, active: bool, labelled: bool | None) -> dict[str, str | None] | None:
    """The label merge patch that makes our pod say `active`, or None when it already does.
    `labelled`: what we last wrote; None (unknown: at start, after a failed write) sends it
    either way, since a restarted container finds its pod labelled by its predecessor."""
    if labelled is not None and labelled == active:
        return None
    return {ACTIVE_LABEL: ACTIVE_VALUE if active else None}


@dataclass
class PodLabel:
    """This replica's own pod and what its `ACTIVE_LABEL` says, as far as we know."""

    namespace: str
    name: str
    labelled: bool | None = None

    async def sync(self, runtime: Runtime, *, active: bool) -> None:
        """Make the label say `active`; on an API error, log it and try on the next call."""
        patch = label_patch(active=active, labelled=self.labelled)
        if patch is None:
            return
        try:
            await runtime.kube.patch_pod_labels(self.namespace, self.name, patch)
        except KubeError as exc:
            self.labelled = None
            doing, pod = "set" if active else "remove", f"{self.namespace}/{self.name}"
            logger.warning("cannot %s label %s on pod %s: %s", doing, ACTIVE_LABEL, pod, exc)
        else:
            self.labelled = active


def _record(lease: dict[str, Any]) -> tuple[str, str, int]:
    """What changes with every renewal or acquisition: (holder, renewTime, transitions)."""
    spec = lease.get("spec") or {}
    transitions = spec.get("leaseTransitions")
    return (
        str(spec.get("holderIdentity") or ""),
        str(spec.get("renewTime") or ""),
        transitions if isinstance(transitions, int) else 0,
    )


class Elector:
    """The leadership loop of one replica (see the module docstring)."""

    def __init__(self, runtime: Runtime, *, identity: str, label: PodLabel | None) -> None:
        self.runtime = runtime
        self.identity = identity
        self.label = label
        settings = runtime.settings
        self.name = settings.lease_name
        self.namespace = settings.lease_namespace_or_default
        self.duration = settings.lease_duration_seconds
        self.deadline = settings.renew_deadline_seconds
        self.period = settings.retry_period_seconds
        self._seen: tuple[str, str, int] | None = None
        self._seen_at = 0.0
        self._version: str | None = None
        self._taking_over: asyncio.Task[None] | None = None
        self._only_holder = True
        """No Lease read so far named another holder, or none: only we ever wrote."""

    @property
    def holding(self) -> bool:
        return self.runtime.active.is_set()

    def _spec(self, *, acquire: bool, transitions: int) -> dict[str, object]:
        now = _now_text()
        spec: dict[str, object] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self.duration)),
            "renewTime": now,
        }
        if acquire:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = transitions
        return spec

    async def run(self) -> None:
        """Forever; standalone (no Lease name): decide from the start."""
        try:
            if self.name is None:
                await self._become_holder(previous="", first=True)
                self.runtime.role_known.set()
                while True:
                    await asyncio.sleep(3600)
            while True:
                started = time.monotonic()
                try:
                    async with asyncio.timeout(self.deadline):
                        await self._step()
                except TimeoutError:
                    logger.warning("the Lease call took over %.1f s", self.deadline)
                except KubeError as exc:
                    # Right after start kopf has not logged in yet: expected, retried.
                    level = logging.DEBUG if exc.reason == "NotLoggedIn" else logging.WARNING
                    logger.log(level, "Lease %s/%s: %s", self.namespace, self.name, exc)
                if self.holding and not self.runtime.lease_fresh():
                    await self._lose("could not renew the Lease within the renew deadline")
                await asyncio.sleep(self._pause(started))
        except Exception:
            # Fail safe: an elector not running renews nothing, so stop answering as the
            # holder now, not when fencing runs out; it runs again as a standby.
            if self.holding:
                await self._lose("its Lease elector failed")
            raise
        finally:
            if self._taking_over is not None:
                self._taking_over.cancel()
                await asyncio.gather(self._taking_over, return_exceptions=True)

    def _pause(self, started: float) -> float:
        """Until the next attempt: a retry period for the holder; for a standby a fraction
        of it, or less when the Lease expires sooner (it takes over as soon as it may)."""
        now = time.monotonic()
        if self.holding:
            return max(started + self.period - now, 0.01)
        pause = started + self.period / STANDBY_READS_PER_PERIOD - now
        if self._seen is not None and self._seen[0]:
            pause = min(pause, self._seen_at + self.duration - now)
        return max(pause, 0.01)

    async def _step(self) -> None:
        assert self.name is not None
        kube = self.runtime.kube
        if self.holding:
            await self._renew()
            return
        try:
            lease = await kube.get_lease(self.namespace, self.name)
        except KubeNotFoundError:
            sent = time.monotonic()
            try:
                created = await kube.create_lease(
                    self.namespace, self.name, self._spec(acquire=True, transitions=0)
                )
            except KubeConflictError:
                return  # another replica created it first: watch it from the next try
            self._observe(created)
            await self._acquired(sent, previous="", first=True)
            return
        self._observe(lease)
        self.runtime.role_known.set()
        holder, _, transitions = _record(lease)
        if holder != self.identity:
            self._only_holder = False
        expired = time.monotonic() >= self._seen_at + self.duration
        if holder and holder != self.identity and not expired:
            if self.label is not None:
                # A restarted container finds its pod still labelled by its predecessor.
                await self.label.sync(self.runtime, active=False)
            return
        sent = time.monotonic()
        spec = self._spec(acquire=True, transitions=transitions + 1)
        await kube.patch_lease(self.namespace, self.name, spec, resource_version=self._version)
        # Read back: a server ignoring the precondition (or a racing standby) must not
        # leave two replicas believing they hold it.
        check = await kube.get_lease(self.namespace, self.name)
        self._observe(check)
        if _record(check)[0] == self.identity:
            # Our own create whose answer was lost reads back as held by us: still first.
            first = self._only_holder and holder == self.identity
            await self._acquired(sent, previous=holder, first=first)

    def _observe(self, lease: dict[str, Any]) -> None:
        record, version = _record(lease), (lease.get("metadata") or {}).get("resourceVersion")
        self._version = version if isinstance(version, str) and version else None
        if record != self._seen:
            self._seen, self._seen_at = record, time.monotonic()

    async def _renew(self) -> None:
        assert self.name is not None
        sent = time.monotonic()
        conflict, spec = False, self._spec(acquire=False, transitions=0)
        try:
            lease = await self.runtime.kube.patch_lease(
                self.namespace, self.name, spec, resource_version=self._version
            )
        except KubeConflictError:
            conflict, lease = True, await self.runtime.kube.get_lease(self.namespace, self.name)
        self._observe(lease)
        holder = _record(lease)[0]
        if holder != self.identity:
            await self._lose(f"the Lease is held by {holder!r} now")
            return
        if conflict:
            return  # not renewed: the next try renews from the version read
        previous, lapsed = self.runtime.lease.renewed_at, not self.runtime.lease_fresh()
        self.runtime.lease.renewed_at = sent
        if lapsed and previous is not None:
            self._resume_judging(time.monotonic() - previous)

    def _resume_judging(self, since: float) -> None:
        """A renewal sent past the renew deadline still held the Lease (conditioned on our
        last version: nobody else wrote it), so the ledger is current and deciding resumes;
        what was deferred meanwhile is judged now, unless the take-over still runs."""
        logger.warning(
            "the Lease was renewed %.1f s after the previous renewal was sent, past the "
            "renew deadline (%.1f s): this replica did not decide meanwhile; it does again",
            since,
            self.deadline,
        )
        if self._taking_over is not None and not self._taking_over.done():
            return
        judging = partial(handover.judge, self.runtime)
        self._taking_over = asyncio.create_task(
            supervised(self.runtime.metrics, "judging deferred pods", judging),
            name="numatopo judging deferred pods",
        )

    async def _acquired(self, sent: float, *, previous: str, first: bool = False) -> None:
        """`first`: we created the Lease, so no replica ever decided before us."""
        self.runtime.lease.renewed_at = sent
        lease, after = f"{self.namespace}/{self.name}", f", after {previous}" if previous else ""
        logger.info("this replica (%s) holds Lease %s now%s", self.identity, lease, after)
        self.runtime.role_known.set()
        await self._become_holder(previous=previous, first=first)

    async def _become_holder(self, *, previous: str, first: bool = False) -> None:
        runtime = self.runtime
        runtime.ledger_current.clear()
        runtime.active.set()
        runtime.metrics.lease_holder.set(1)
        self._taking_over = asyncio.create_task(
            supervised(runtime.metrics, "take-over", self._take_over(relist=not first)),
            name="numatopo take-over",
        )
        if self.label is None:
            return
        await self.label.sync(runtime, active=True)
        # Take the label from the previous holder's pod (one killed with -9 kept it).
        stale = pod_of_identity(previous)
        if stale is None or stale == self.label.name:
            return
        try:
            await runtime.kube.patch_pod_labels(self.label.namespace, stale, {ACTIVE_LABEL: None})
        except KubeNotFoundError:
            pass
        except KubeError as exc:
            logger.warning("cannot remove label %s from pod %s: %s", ACTIVE_LABEL, stale, exc)

    def _take_over(self, *, relist: bool) -> Callable[[], Awaitable[None]]:
        """`handover.take_over` for its supervisor: a try after a failed one starts from a
        ledger not current and a fresh list (else a holder would never decide)."""

        async def attempt() -> None:
            nonlocal relist
            self.runtime.ledger_current.clear()
            try:
                await handover.take_over(self.runtime, relist=relist)
            finally:
                relist = True

        return attempt

    async def _lose(self, why: str) -> None:
        runtime = self.runtime
        logger.warning("this replica (%s) stops deciding: %s", self.identity, why)
        self._stop_deciding()
        runtime.metrics.lease_holder.set(0)
        if self._taking_over is not None:
            self._taking_over.cancel()
            self._taking_over = None
        if self.label is not None:
            await self.label.sync(runtime, active=False)

    def _stop_deciding(self) -> None:
        self.runtime.active.clear()
        self.runtime.ledger_current.clear()
        self.runtime.lease.renewed_at = None

    async def stand_down(self) -> None:
        """On shutdown: stop answering, hand the Lease back (no holder, 1 s: a standby
        takes over at its next try, not after the lease duration), then remove the label,
        so the Service stops sending calls here before the process is gone."""
        held = self.name if self.holding else None
        self._stop_deciding()
        if held is not None:
            free = {"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": _now_text()}
            try:
                async with asyncio.timeout(SHUTDOWN_SECONDS):
                    await self.runtime.kube.patch_lease(
                        self.namespace, held, free, resource_version=self._version
                    )
            except (KubeError, TimeoutError) as exc:
                logger.warning("could not release Lease %s/%s: %s", self.namespace, held, exc)
        if self.label is None:
            return
        self.label.labelled = None  # whatever we last wrote, remove it
        try:
            async with asyncio.timeout(SHUTDOWN_SECONDS):
                await self.label.sync(self.runtime, active=False)
        except TimeoutError:
            logger.warning("gave up removing label %s on shutdown", ACTIVE_LABEL)
