"""`NodeRecord`: everything the operator knows of one node, in one place (owned by `Ledger`):
its hardware, the freshness of that data, and its bookings. docs/DESIGN.md, "The
operator's records", says what each part holds and what outlives the Numatopology.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from numatopo_engine.annotations import Assignment
from numatopo_engine.model import GpuMode, NumatopologySpec, UnhealthyDevices
from numatopo_engine.state import NodeState
from numatopo_engine.topology_tables import NodeNames, Tables
from numatopo_operator.translate import Booking


@dataclass(eq=False, slots=True)
class NodeRecord:
    name: str
    topology: NumatopologySpec | None = None
    """The node's Numatopology spec as last read; None: none (deleted or never seen)."""
    shape: Tables | None = None
    """The hardware shape decisions read; shared with every node of equal hardware."""
    names: NodeNames | None = None
    unhealthy: UnhealthyDevices = field(default_factory=UnhealthyDevices)
    state: NodeState | None = None
    """What is booked (observed, in flight; not untrusted); None without a topology."""
    untrusted: dict[str, str] = field(default_factory=dict)
    """Pods whose bookings overlap earlier claims: key -> why."""
    observed: dict[str, Booking] = field(default_factory=dict)
    """What each pod's annotation was last seen to book here."""
    inflight: dict[str, Assignment] = field(default_factory=dict)
    """Decisions written (or being written) here, not yet seen on the watch stream."""
    dra_holds: dict[str, Assignment] = field(default_factory=dict)
    """Hold key -> what a ResourceClaim's allocation holds here (`Ledger.set_dra_holds`)."""
    seq: int = 0
    """The highest decision sequence seen booked here; never goes down."""
    stale: str | None = None
    """Why its exporter calls the data not current; None while it calls it current."""
    heartbeat: float | None = None
    """Its Numatopology's `status.heartbeat` (Unix seconds); None: none written."""
    gpu_mode: str | None = None
    """Its Numatopology's `status.gpuMode` (the node agent's GPU guarantee)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Serialises decisions on the node (the engine call and the reservation)."""
    frozen: tuple[NodeState, int, NodeState, str] | None = None
    """(live state, its version, the copy handed out, its shape key): `Ledger.frozen_state`."""

    @property
    def steered(self) -> bool:
        """Whether the kubelet here takes numatopo's GPUs (its agent says Steered)."""
        return self.gpu_mode == GpuMode.STEERED.value

    def stale_reason(self, limit: float, now: float | None = None) -> str | None:
        """Why nothing may be placed here now (its exporter says so, or its heartbeat is
        older than `limit` seconds, 0: no bound); None when current."""
        if self.stale is not None:
            return self.stale
        beat = self.heartbeat
        if beat is None or limit <= 0:
            return None
        age = (time.time() if now is None else now) - beat
        if age <= limit:
            return None
        return (
            f"Numatopology/{self.name} is stale: its exporter's last heartbeat is "
            f"{age:.0f} s old (more than {limit:.0f} s; is the numatopo exporter running "
            "there?)"
        )
