"""`kubectl numatopo top`: what is booked, per node, per namespace, and by which pods."""

from __future__ import annotations

import time
from collections import defaultdict

from numatopo_cli.kubectl.nodes import format_columns, node_row
from numatopo_cli.kubectl.reports import BookingRow, NamespaceRow, TopReport
from numatopo_cli.render import text
from numatopo_engine.annotations import Assignment
from numatopo_engine.cpuset import CPUSet
from numatopo_operator.cluster_view import ClusterView


def _booking(key: str, node: str, assignment: Assignment) -> BookingRow:
    containers = assignment.containers.values()
    return BookingRow(
        pod=key,
        node=node,
        cpus=sum(len(c.cpus) for c in containers),
        exclusive_cpus=str(CPUSet(cpu for c in containers if c.exclusive for cpu in c.cpus)),
        gpus=sorted({i for c in containers for i in c.gpu_indices}),
        nics=sorted({n for c in containers for n in c.nics}),
        memory_bytes=sum(sum(c.memory.values()) for c in containers),
    )


def top_report(view: ClusterView, node: str | None) -> TopReport:
    now = time.time()
    ledger = view.runtime.ledger
    names = [node] if node is not None else view.node_names()
    bookings: list[BookingRow] = []
    for name in names:
        state = ledger.state(name)
        if state is None:
            continue
        for key, assignment in sorted(state.assignments.items()):
            bookings.append(_booking(key, name, assignment))
    per_namespace: dict[str, list[BookingRow]] = defaultdict(list)
    for booking in bookings:
        per_namespace[booking.pod.partition("/")[0]].append(booking)
    namespaces = [
        NamespaceRow(
            namespace=namespace,
            pods=len(rows),
            cpus=sum(r.cpus for r in rows),
            gpus=sum(len(r.gpus) for r in rows),
            memory_bytes=sum(r.memory_bytes for r in rows),
        )
        for namespace, rows in sorted(per_namespace.items())
    ]
    return TopReport(
        signatures_checked=view.signatures_checked,
        nodes=[node_row(view, name, now) for name in names],
        namespaces=namespaces,
        bookings=bookings,
    )


def _used(free: int, total: int) -> str:
    return f"{total - free}/{total}" if total else "-"


def top_text(report: TopReport) -> str:
    node_rows = []
    for node in report.nodes:
        if not node.has_topology:
            continue
        cpus = [sum(n.cpus.free for n in node.numa), sum(n.cpus.total for n in node.numa)]
        gpus = [sum(n.gpus.free for n in node.numa), sum(n.gpus.total for n in node.numa)]
        node_rows.append(
            [node.node, str(node.pods), _used(*cpus), _used(*gpus), str(node.aligned_free_gpus)]
        )
    namespace_rows = [
        [n.namespace, str(n.pods), str(n.cpus), str(n.gpus), text.format_bytes(n.memory_bytes)]
        for n in report.namespaces
    ]
    holders = [
        [b.pod, b.node, b.exclusive_cpus or "-", text.format_ids(b.gpus), text.format_ids(b.nics)]
        for b in report.bookings
        if b.exclusive_cpus or b.gpus
    ]
    parts = [
        format_columns(
            ["NODE", "PODS", "CPUS BOOKED", "GPUS BOOKED", "ALIGNED FREE GPUS"], node_rows
        ),
        "",
        format_columns(["NAMESPACE", "PODS", "CPUS", "GPUS", "MEMORY"], namespace_rows),
    ]
    if holders:
        parts += ["", format_columns(["POD", "NODE", "EXCLUSIVE CPUS", "GPUS", "NICS"], holders)]
    return "\n".join(parts)
