"""`kubectl numatopo nodes`: per node, NUMA by NUMA, what is free of what there is."""

from __future__ import annotations

import time
from collections.abc import Callable

from numatopo_cli.kubectl.reports import Amount, NodeRow, NodesReport, NumaRow
from numatopo_cli.render import text
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.state import NodeState
from numatopo_operator.cluster_view import ClusterView


def _numa_rows(spec: NumatopologySpec, state: NodeState) -> list[NumaRow]:
    free_cpus, free_gpus, free_nics = state.free_cpus(), state.free_gpus(), state.free_nics()
    usable = [gpu for gpu in spec.gpus if not gpu.mig_mode]
    rows = []
    for numa in spec.numa_nodes:
        cpus = numa.cpus - spec.reserved_cpus
        gpus = [gpu.index for gpu in usable if gpu.numa == numa.id]
        nics = [nic.name for nic in spec.nics if nic.numa == numa.id]
        rows.append(
            NumaRow(
                numa=numa.id,
                cpus=Amount(free=len(cpus & free_cpus), total=len(cpus)),
                memory_bytes=Amount(free=state.free_memory(numa.id), total=numa.memory_bytes),
                gpus=Amount(free=sum(g in free_gpus for g in gpus), total=len(gpus)),
                nics=Amount(free=sum(n in free_nics for n in nics), total=len(nics)),
            )
        )
    known = {numa.id for numa in spec.numa_nodes}
    lost_gpus = [gpu.index for gpu in usable if gpu.numa not in known]
    lost_nics = [nic.name for nic in spec.nics if nic.numa not in known]
    if lost_gpus or lost_nics:
        rows.append(
            NumaRow(
                numa=None,
                cpus=Amount(free=0, total=0),
                memory_bytes=Amount(free=0, total=0),
                gpus=Amount(free=sum(g in free_gpus for g in lost_gpus), total=len(lost_gpus)),
                nics=Amount(free=sum(n in free_nics for n in lost_nics), total=len(lost_nics)),
            )
        )
    return rows


def node_row(view: ClusterView, node: str, now: float) -> NodeRow:
    runtime = view.runtime
    record = runtime.ledger.record(node)
    if record is None or record.topology is None or record.state is None:
        return NodeRow(node=node, has_topology=False, stale="no Numatopology")
    beat = record.heartbeat
    numa = _numa_rows(record.topology, record.state)
    return NodeRow(
        node=node,
        has_topology=True,
        stale=runtime.stale_reason(node, now) or "",
        heartbeat_age_seconds=None if beat is None else round(now - beat, 1),
        gpu_mode=record.gpu_mode or "",
        pods=runtime.ledger.pods_on(node),
        aligned_free_gpus=max((row.gpus.free for row in numa if row.numa is not None), default=0),
        numa=numa,
    )


def nodes_report(view: ClusterView) -> NodesReport:
    now = time.time()
    return NodesReport(
        signatures_checked=view.signatures_checked,
        nodes=[node_row(view, node, now) for node in view.node_names()],
    )


def _amount(amount: Amount, shown: Callable[[int], str] = str) -> str:
    return f"{shown(amount.free)}/{shown(amount.total)}" if amount.total else "-"


def _bytes(size: int) -> str:
    return text.format_bytes(size).replace(" ", "") if size else "0"


def _state(row: NodeRow) -> str:
    if not row.has_topology:
        return "no Numatopology"
    return "stale" if row.stale else "current"


def nodes_table(report: NodesReport) -> str:
    header = ["NODE", "NUMA", "CPUS", "MEMORY", "GPUS", "NICS", "GPU MODE", "PODS", "STATE"]
    rows: list[list[str]] = []
    for node in report.nodes:
        if not node.numa:
            rows.append([node.node, "-", "-", "-", "-", "-", "-", "-", _state(node)])
        for i, numa in enumerate(node.numa):
            first = i == 0
            rows.append(
                [
                    node.node if first else "",
                    "?" if numa.numa is None else str(numa.numa),
                    _amount(numa.cpus),
                    _amount(numa.memory_bytes, _bytes),
                    _amount(numa.gpus),
                    _amount(numa.nics),
                    (node.gpu_mode or "-") if first else "",
                    str(node.pods) if first else "",
                    _state(node) if first else "",
                ]
            )
    return format_columns(header, rows) + "\n(free/total; CPUs without the kubelet's reserved)"


def format_columns(header: list[str], rows: list[list[str]]) -> str:
    """Left-aligned columns two spaces apart, as kubectl prints tables."""
    return "\n".join(text.align_rows([header, *rows]))
