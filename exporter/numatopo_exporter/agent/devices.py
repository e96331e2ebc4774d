"""Follow: what the kubelet gave (PodResources), which devices it cannot hand out, and each pod's
devices checked against its assignment (I/O: the kubelet's socket, the API)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from numatopo_engine.annotations import OBSERVED, Observed
from numatopo_engine.dra.pods import devices_from_claims
from numatopo_engine.model import NumatopologySpec, UnhealthyDevices
from numatopo_engine.resources import ResourceNames
from numatopo_exporter.agent import follow, pod_resources, pods
from numatopo_exporter.agent.pod_records import PodRecords
from numatopo_exporter.agent.pod_resources import Listing, PodResourcesError
from numatopo_exporter.metrics import AgentMetrics
from numatopo_kube import KubeClient, KubeError, KubePodReplacedError

GPU_MISMATCH = "GPUMismatch"
GPUS_UNVERIFIED = "GPUsUnverified"

logger = logging.getLogger("numatopo.agent")


@dataclass
class KubeletDevices:
    client: KubeClient
    node_name: str
    socket: Path | None
    """The kubelet's PodResources socket; None: Follow is off."""
    resources: ResourceNames
    metrics: AgentMetrics
    clock: Callable[[], float]
    spec_refresh_seconds: float
    unreadable: str | None = field(default=None, init=False)
    """Why PodResources cannot be read (None while it can)."""
    unhealthy: UnhealthyDevices | None = field(default=None, init=False)
    """The devices the kubelet cannot hand out (`status.unhealthy`); None until known, kept while
    PodResources or the Numatopology cannot be read."""
    _spec: tuple[NumatopologySpec, float, dict[str, set[str]]] | None = field(
        default=None, init=False
    )
    """The node's spec, when it was read, and the allocatable listing it was read for."""
    _watched_spec: Mapping[str, Any] | None = field(default=None, init=False)
    """The spec as the Numatopology watch last delivered it."""
    dra_gpus: bool = field(default=False, init=False)
    """`status.dra` lists the node's GPUs: they are DRA devices (mode Allocated)."""

    def why_unverified(self) -> str:
        return self.unreadable or "Follow is off (no PodResources socket)"

    async def read_holdings(self, admitted: frozenset[str]) -> Listing | None:
        """What PodResources lists now, for the pods seen `admitted` before asking; None when
        Follow is off or it is unreadable (logged when that changes)."""
        if self.socket is None:
            return None
        try:
            holdings = await pod_resources.list_holdings(self.socket)
        except PodResourcesError as exc:
            if self.unreadable != str(exc):
                logger.warning("cannot verify GPUs: %s", exc)
            self.unreadable = str(exc)
            return None
        if self.unreadable is not None:
            logger.info("PodResources readable again at %s", self.socket)
        self.unreadable = None
        return Listing(holdings, admitted)

    async def read_health(self) -> None:
        """`unhealthy`: the node's devices the kubelet does not list as allocatable."""
        assert self.socket is not None
        try:
            allocatable = await pod_resources.list_allocatable(self.socket)
        except PodResourcesError as exc:
            logger.warning("cannot read the kubelet's allocatable devices: %s", exc)
            return
        known = self._spec
        if (
            known is None
            or known[2] != allocatable
            or (self.clock() - known[1] >= self.spec_refresh_seconds)
        ):
            try:
                body = await self.client.get_numatopology(self.node_name)
                spec = NumatopologySpec.model_validate((body or {}).get("spec") or {})
            except (KubeError, ValidationError) as exc:
                logger.warning("reading Numatopology/%s: %s", self.node_name, exc)
                return
            if body is None:
                return  # the exporter has not published it yet
            self.dra_gpus = _lists_dra_gpus(body)
            known = self._spec = (spec, self.clock(), allocatable)
        found = follow.unhealthy_devices(known[0], allocatable)
        if found != self.unhealthy:
            logger.info(
                "devices the kubelet cannot hand out: GPUs %s, NICs %s", found.gpus, found.nics
            )
        self.unhealthy = found

    def take_numatopology(self, body: Mapping[str, Any]) -> bool:
        """Take the node's Numatopology as its watch delivered it: its spec replaces the one read
        (kept for the allocatable listing it was read with), `status.dra` says whether the GPUs
        are DRA devices. Whether either changed."""
        dra_gpus = _lists_dra_gpus(body)
        changed = dra_gpus != self.dra_gpus
        self.dra_gpus = dra_gpus
        known = self._spec
        raw = body.get("spec") or {}
        if known is not None and raw != self._watched_spec:
            # Most events are status writes (free counts, heartbeats): validate a changed spec only.
            self._watched_spec = raw
            try:
                spec = NumatopologySpec.model_validate(raw)
            except ValidationError as exc:
                logger.warning("Numatopology/%s as watched: %s", self.node_name, exc)
                return changed
            if spec != known[0]:
                self._spec = (spec, self.clock(), known[2])
                changed = True
        return changed

    async def check(
        self,
        entry: pods.PodAssignment,
        listing: Listing | None,
        records: PodRecords,
        outcome: pods.PodOutcome,
    ) -> None:
        """Record what the pod's containers hold (`numatopo.io/observed`) and hold back `Aligned`
        (in `outcome`) while its GPUs are not the assigned ones, or cannot be known."""
        assignment = entry.assignment
        resources = self.resources
        if devices_from_claims(entry.body, lambda r: resources.is_gpu(r) or resources.is_nic(r)):
            return  # Allocated: the claims hold the assigned devices, no plugin gave any
        with_gpus = any(
            c.gpus or c.gpu_indices or c.mig or c.mig_indices
            for c in assignment.containers.values()
        )
        if not with_gpus and not any(c.nics for c in assignment.containers.values()):
            return
        if listing is None:
            if not with_gpus:
                return  # NICs alone are followed where PodResources is read
            outcome.problems.append(
                "the GPUs this pod holds cannot be verified: " + self.why_unverified()
            )
            outcome.reason = outcome.reason or GPUS_UNVERIFIED
            return
        observed = follow.observe(
            assignment,
            listing.held_by(entry.uid, entry.key),
            containers=follow.running_container_names(entry.body),
            is_gpu=self.resources.is_gpu,
            is_nic=self.resources.is_nic,
            nics=self._spec[0].nics if self._spec is not None else (),
        )
        if observed is None:
            # Not admitted yet, or the listing may be a predecessor's: reported once the kubelet
            # has chosen, from a listing read after its report on this pod.
            outcome.pending = True
            return
        if entry.observed != observed:
            await self._write_observed(entry.key, entry.uid, observed)
        if observed.mismatched:
            words = follow.gpu_words(observed, assignment, resources.is_gpu, resources.is_nic)
            self._count_mismatch(entry, records, words)
            outcome.problems.append(
                f"{words}; the operator re-aligns CPUs and memory to the GPUs held"
            )
            outcome.reason = GPU_MISMATCH

    async def _write_observed(self, key: str, uid: str, observed: Observed) -> None:
        namespace, _, name = key.partition("/")
        try:
            await self.client.patch_pod_annotations(
                namespace, name, {OBSERVED: observed.to_annotation()}, uid=uid
            )
        except KubePodReplacedError as exc:
            # What the kubelet gave the pod `uid` says nothing about the pod now named so.
            logger.info("not writing %s to a namesake of %s: %s", OBSERVED, key, exc)
        except KubeError as exc:
            logger.warning("writing %s of %s: %s", OBSERVED, key, exc)

    def _count_mismatch(self, entry: pods.PodAssignment, records: PodRecords, words: str) -> None:
        """Count and log a mismatch once per assignment (it lasts until the operator re-plans)."""
        record = records.get(entry.uid)
        if record is not None and record.mismatch_seq == entry.assignment.seq:
            return
        if record is not None:
            record.mismatch_seq = entry.assignment.seq
        self.metrics.gpu_mismatches.inc()
        logger.warning("%s: %s", entry.key, words)


def _lists_dra_gpus(body: Mapping[str, Any]) -> bool:
    """Whether `status.dra` lists GPUs (the node's GPUs are DRA devices: mode Allocated)."""
    dra = ((body.get("status") or {}).get("dra") or {}).get("devices") or []
    return any(isinstance(d, Mapping) and d.get("gpu") is not None for d in dra)
