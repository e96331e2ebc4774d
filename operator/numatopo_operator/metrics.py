"""Prometheus metrics of the operator, in a registry of their own (no process globals).

docs/operations.md lists them with what each label value means."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import prometheus_client
from prometheus_client import Counter, Gauge, Histogram

# From 100 µs (a CPU-only pod on a small node) to 2.5 s (an exhaustive GPU search).
LATENCY_BUCKETS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5)

# Group placements wait for API writes of every member: from 10 ms to 2 minutes.
GROUP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass
class Metrics:
    registry: prometheus_client.CollectorRegistry = field(
        default_factory=lambda: prometheus_client.CollectorRegistry(auto_describe=True)
    )

    def __post_init__(self) -> None:
        counter = partial(Counter, registry=self.registry)
        gauge = partial(Gauge, registry=self.registry)
        self.decisions = counter("numatopo_decisions", "Topology decisions by result.", ["result"])
        self.latency = Histogram(
            "numatopo_decision_seconds",
            "Seconds spent deciding (engine and ledger), by caller.",
            ["path"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.unsatisfiable = counter(
            "numatopo_unsatisfiable", "Pods that did not fit on their node."
        )
        self.invalid = counter("numatopo_invalid", "Pods with invalid topology annotations.")
        self.ledger_pods = gauge("numatopo_ledger_pods", "Pods holding a booking in the ledger.")
        self.handler_errors = counter(
            "numatopo_handler_errors", "Unexpected errors caught at the handler boundary."
        )
        self.task_restarts = counter(
            "numatopo_task_restarts",
            "Background tasks (status writer, pod feed, Lease elector...) that failed with "
            "an unexpected error and were run again, by task.",
            ["task"],
        )
        self.events_dropped = counter(
            "numatopo_events_dropped",
            "Events of decisions not posted: their queue was full, or the operator stopped.",
        )
        self.retry_queue = gauge("numatopo_retry_queue_pods", "Pods waiting in the retry queue.")
        self.retries = counter("numatopo_retries", "Pods judged again from the retry queue.")
        self.realignments = counter(
            "numatopo_realignments",
            "Pods decided again around the GPUs the kubelet really gave them (Follow), by "
            "result: realigned, relaxed (the policy could not hold with those GPUs; placed "
            "best-effort), failed.",
            ["result"],
        )
        self.lease_holder = gauge(
            "numatopo_lease_holder", "1 while this replica holds the Lease and decides."
        )
        self.exports_written = counter(
            "numatopo_exports_written",
            "Exported objects written, by format (nrt, volcano).",
            ["format"],
        )
        self.exports_deleted = counter(
            "numatopo_exports_deleted",
            "Exported objects deleted because their node's Numatopology went away.",
            ["format"],
        )
        self.export_errors = counter(
            "numatopo_export_errors",
            "Failed export calls, by format and reason (not_found: CRD missing; conflict: "
            "another writer owns the object; forbidden; unavailable; refused).",
            ["format", "reason"],
        )
        self._group_metrics()
        self.aligned_free_gpus = gauge(
            "numatopo_node_aligned_free_gpus",
            "The most free GPUs on one NUMA node of each node, as the active replica books it.",
            ["node"],
        )
        self.loop_lag = gauge(
            "numatopo_event_loop_lag_seconds",
            "How late the operator's event loop last woke a timer.",
        )
        self.connections_shut = counter(
            "numatopo_http_connections_shut",
            "Connections shut down because the port held its limit of open ones, by "
            "server (extender, metrics).",
            ["server"],
        )

    def _group_metrics(self) -> None:
        """Group placements and the network domains they fill."""
        counter = partial(Counter, registry=self.registry)
        gauge = partial(Gauge, registry=self.registry)
        group_histogram = partial(Histogram, buckets=GROUP_BUCKETS, registry=self.registry)
        self.group_placement = group_histogram(
            "numatopo_group_placement_duration_seconds",
            "Seconds from a group's whole membership seen to every member released.",
        )
        self.group_decisions = counter(
            "numatopo_group_placement_decisions",
            "Group placement decisions by outcome: placed, unsatisfiable, invalid, voided "
            "(a partial plan taken back), recovered (a replacement member), write_failed.",
            ["outcome"],
        )
        self.group_recovery = group_histogram(
            "numatopo_group_recovery_duration_seconds",
            "Seconds from a replacement member of a running group first seen to released.",
        )
        self.domain_utilization = gauge(
            "numatopo_domain_utilization_ratio",
            "Booked GPUs / GPUs of each domain of a NetworkTopology.",
            ["topology", "level", "domain"],
        )
        self.domain_fragmentation = gauge(
            "numatopo_domain_fragmentation_ratio",
            "Fragmentation of the free GPUs at each level of a NetworkTopology.",
            ["topology", "level"],
        )

    def render(self) -> bytes:
        """The text exposition format, as `/metrics` serves it."""
        return prometheus_client.generate_latest(self.registry)
