"""`Numatopology.status`: what is free per NUMA node, written debounced (`free_status` is
pure; when `write_statuses` writes, bursts included: docs/operations.md, "Status
freshness"). A status is written only when it differs from the object's, as watched
(`Runtime.statuses`) or as we wrote it since: a new holder rewrites only wrong ones, and a
watched change (another's write, ours out of order) marks the node dirty again. Only the
fields numatopo owns (`indexes.OWNED_STATUS`) are merge-patched: `conditions` stay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from numatopo_engine.devices import schedulable_devices
from numatopo_engine.model import FreeNuma, NumatopologySpec
from numatopo_engine.state import NodeState
from numatopo_operator.errors import KubeError, KubeNotFoundError
from numatopo_operator.runtime import Runtime

logger = logging.getLogger(__name__)

# Debounce periods a burst's writes wait at most for a quiet one (10 s at the default 2 s).
BURST_HOLD_PERIODS = 5


def free_status(topology: NumatopologySpec, state: NodeState, pods: int) -> dict[str, object]:
    """The status fields numatopo owns: `free` per NUMA node, `freeCPUs`, `freeGPUs`, `pods`."""
    free_cpus, free_gpus, free_nics = state.free_cpus(), state.free_gpus(), state.free_nics()
    devices = schedulable_devices(topology)
    per_numa = [
        FreeNuma(
            numa=node.id,
            cpus=free_cpus & node.cpus,
            # Device indices: whole GPUs and MIG devices (a GPU in MIG mode is not free).
            gpus=sorted(d.index for d in devices if d.numa == node.id and d.index in free_gpus),
            nics=sorted(n.name for n in topology.nics if n.numa == node.id and n.name in free_nics),
            memory_bytes=max(state.free_memory(node.id), 0),
        ).to_wire()
        for node in sorted(topology.numa_nodes, key=lambda n: n.id)
    ]
    return {"free": per_numa, "freeCPUs": len(free_cpus), "freeGPUs": len(free_gpus), "pods": pods}


def aligned_free_gpus(status: dict[str, object]) -> int:
    """The most free GPUs on one NUMA node of a `free_status`."""
    per_numa = status["free"]
    assert isinstance(per_numa, list)
    return max((len(numa.get("gpus") or []) for numa in per_numa), default=0)


async def write_statuses(runtime: Runtime) -> None:
    """Forever: every debounce period, write each changed node's status, unless in a burst."""
    pending: set[str] = set()
    changed_before = False
    held = 0
    try:
        while True:
            await asyncio.sleep(runtime.settings.status_debounce_seconds)
            if not runtime.deciding:
                continue
            changed = runtime.ledger.take_dirty()
            pending |= changed
            bursting, changed_before = bool(changed) and changed_before, bool(changed)
            if bursting and held < BURST_HOLD_PERIODS:
                held += 1
                continue
            held = 0
            nodes, pending = sorted(pending), set()
            await _write_nodes(runtime, nodes)
    finally:
        # Held back by a burst when the loop failed: the next run writes them.
        for node in pending:
            runtime.ledger.mark_dirty(node)


async def _write_nodes(runtime: Runtime, nodes: list[str]) -> None:
    """Write each of `nodes` whose status differs. On an unexpected error the nodes not
    reached stay dirty and it goes on to the supervisor; the node that raised it waits
    until it changes again, so one node's bug holds up no other."""
    position = 0
    try:
        for position, node in enumerate(nodes):
            topology, state = runtime.ledger.topology(node), runtime.ledger.state(node)
            if topology is None or state is None:
                with contextlib.suppress(KeyError):
                    runtime.metrics.aligned_free_gpus.remove(node)
                continue
            status = free_status(topology, state, runtime.ledger.pods_on(node))
            dra = runtime.dra_holds.status_of(node, topology)
            if dra is not None:
                status["dra"] = dra.to_wire()
            runtime.metrics.aligned_free_gpus.labels(node).set(aligned_free_gpus(status))
            if runtime.statuses.get(node) == status:
                continue
            if not runtime.lease_fresh():
                for unwritten in nodes[position:]:
                    runtime.ledger.mark_dirty(unwritten)
                return  # fenced: the next holder writes them
            try:
                # A merge patch keeps what it does not name: `dra` no longer there is nulled.
                gone = {"dra": None} if "dra" in (runtime.statuses.get(node) or {}) else {}
                await runtime.kube.patch_numatopology_status(node, {**gone, **status})
            except KubeNotFoundError:
                continue  # deleted meanwhile; its DELETED event drops the node
            except KubeError as exc:
                logger.warning("status of Numatopology/%s not written (retrying): %s", node, exc)
                runtime.ledger.mark_dirty(node)
            else:
                runtime.statuses[node] = status
    except Exception:
        for unwritten in nodes[position + 1 :]:
            runtime.ledger.mark_dirty(unwritten)
        raise
