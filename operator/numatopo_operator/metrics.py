"""Prometheus metrics of the operator, in a registry of their own (no process globals).

numatopo_decisions_total{result}        decisions by outcome: assigned, unsatisfiable,
                                        invalid, untrusted, bind_failed
numatopo_decision_seconds{path}         engine + reservation time, per caller
                                        (assigner, bind, filter, prioritize)
numatopo_unsatisfiable_total            pods that did not fit on their node
numatopo_invalid_total                  pods with invalid topology annotations
numatopo_ledger_pods                    pods holding a booking in the ledger
numatopo_handler_errors_total           unexpected errors caught at the handler boundary
numatopo_events_dropped_total           Events of decisions never posted (their queue
                                        full, or the operator stopped first)
numatopo_retry_queue_pods               pods waiting in the retry queue (failed writes,
                                        pods still waiting for an answer that fits)
numatopo_retries_total                  pods judged again from the retry queue
numatopo_lease_holder                   1 while this replica holds the Lease and decides
numatopo_exports_written_total{format}  exported objects written (nrt, volcano)
numatopo_exports_deleted_total{format}  exported objects deleted (their node went away)
numatopo_export_errors_total{format,reason}
                                        failed export calls: not_found (CRD missing),
                                        conflict (another writer), forbidden,
                                        unavailable, refused
numatopo_group_placement_duration_seconds  a group's complete membership seen -> every
                                        member released (plan, writes, release)
numatopo_group_placement_decisions_total{outcome}  group decisions: placed,
                                        unsatisfiable, invalid, voided, recovered,
                                        write_failed
numatopo_group_recovery_duration_seconds   a replacement member first seen -> released
numatopo_domain_utilization_ratio{topology,level,domain}  GPUs booked / GPUs, per domain
numatopo_domain_fragmentation_ratio{topology,level}       the engine's fragmentation
                                        of the level's free GPUs (`domains`)
numatopo_node_aligned_free_gpus{node}   the most free GPUs on one NUMA node of the node
                                        (the largest single-numa-node GPU request that
                                        fits there now), as the active replica books it
numatopo_event_loop_lag_seconds         how late the operator's event loop last woke a
                                        timer (`loop_lag`): engine work or a GC pause
                                        holding up the watches, the Lease and the extender
"""

from __future__ import annotations

from dataclasses import dataclass, field

import prometheus_client

__all__ = ["Metrics"]

# From 100 µs (a CPU-only pod on a small node) to 2.5 s (an exhaustive GPU search).
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
    2.5,
)

# Group placements wait for API writes of every member: from 10 ms to 2 minutes.
GROUP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass
class Metrics:
    registry: prometheus_client.CollectorRegistry = field(
        default_factory=lambda: prometheus_client.CollectorRegistry(auto_describe=True)
    )

    def __post_init__(self) -> None:
        self.decisions = prometheus_client.Counter(
            "numatopo_decisions",
            "Topology decisions by result.",
            ["result"],
            registry=self.registry,
        )
        self.latency = prometheus_client.Histogram(
            "numatopo_decision_seconds",
            "Seconds spent deciding (engine and ledger), by caller.",
            ["path"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.unsatisfiable = prometheus_client.Counter(
            "numatopo_unsatisfiable", "Pods that did not fit on their node.", registry=self.registry
        )
        self.invalid = prometheus_client.Counter(
            "numatopo_invalid", "Pods with invalid topology annotations.", registry=self.registry
        )
        self.ledger_pods = prometheus_client.Gauge(
            "numatopo_ledger_pods", "Pods holding a booking in the ledger.", registry=self.registry
        )
        self.events_dropped = prometheus_client.Counter(
            "numatopo_events_dropped",
            "Events of decisions not posted: their queue was full, or the operator stopped.",
            registry=self.registry,
        )
        self.handler_errors = prometheus_client.Counter(
            "numatopo_handler_errors",
            "Unexpected errors caught at the handler boundary.",
            registry=self.registry,
        )

        self.retry_queue = prometheus_client.Gauge(
            "numatopo_retry_queue_pods",
            "Pods waiting in the retry queue.",
            registry=self.registry,
        )
        self.retries = prometheus_client.Counter(
            "numatopo_retries", "Pods judged again from the retry queue.", registry=self.registry
        )
        self.realignments = prometheus_client.Counter(
            "numatopo_realignments",
            "Pods decided again around the GPUs the kubelet really gave them (Follow), by "
            "result: realigned, relaxed (the policy could not hold with those GPUs; placed "
            "best-effort), failed.",
            ["result"],
            registry=self.registry,
        )
        self.lease_holder = prometheus_client.Gauge(
            "numatopo_lease_holder",
            "1 while this replica holds the Lease and decides.",
            registry=self.registry,
        )

        self.exports_written = prometheus_client.Counter(
            "numatopo_exports_written",
            "Exported objects written, by format (nrt, volcano).",
            ["format"],
            registry=self.registry,
        )
        self.exports_deleted = prometheus_client.Counter(
            "numatopo_exports_deleted",
            "Exported objects deleted because their node's Numatopology went away.",
            ["format"],
            registry=self.registry,
        )
        self.export_errors = prometheus_client.Counter(
            "numatopo_export_errors",
            "Failed export calls, by format and reason (not_found: CRD missing; conflict: "
            "another writer owns the object; forbidden; unavailable; refused).",
            ["format", "reason"],
            registry=self.registry,
        )
        self.group_placement = prometheus_client.Histogram(
            "numatopo_group_placement_duration_seconds",
            "Seconds from a group's whole membership seen to every member released.",
            buckets=GROUP_BUCKETS,
            registry=self.registry,
        )
        self.group_decisions = prometheus_client.Counter(
            "numatopo_group_placement_decisions",
            "Group placement decisions by outcome: placed, unsatisfiable, invalid, voided "
            "(a partial plan taken back), recovered (a replacement member), write_failed.",
            ["outcome"],
            registry=self.registry,
        )
        self.group_recovery = prometheus_client.Histogram(
            "numatopo_group_recovery_duration_seconds",
            "Seconds from a replacement member of a running group first seen to released.",
            buckets=GROUP_BUCKETS,
            registry=self.registry,
        )
        self.domain_utilization = prometheus_client.Gauge(
            "numatopo_domain_utilization_ratio",
            "Booked GPUs / GPUs of each domain of a NetworkTopology.",
            ["topology", "level", "domain"],
            registry=self.registry,
        )
        self.domain_fragmentation = prometheus_client.Gauge(
            "numatopo_domain_fragmentation_ratio",
            "Fragmentation of the free GPUs at each level of a NetworkTopology.",
            ["topology", "level"],
            registry=self.registry,
        )

        self.aligned_free_gpus = prometheus_client.Gauge(
            "numatopo_node_aligned_free_gpus",
            "The most free GPUs on one NUMA node of each node, as the active replica books it.",
            ["node"],
            registry=self.registry,
        )
        self.loop_lag = prometheus_client.Gauge(
            "numatopo_event_loop_lag_seconds",
            "How late the operator's event loop last woke a timer.",
            registry=self.registry,
        )

    def render(self) -> bytes:
        """The text exposition format, as `/metrics` serves it."""
        return prometheus_client.generate_latest(self.registry)
