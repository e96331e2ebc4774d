"""Prometheus metrics of the agent, on its own registry."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from prometheus_client import Counter, Histogram

from numatopo_exporter.daemon.metrics import Registry


@dataclass
class AgentMetrics(Registry):
    def __post_init__(self) -> None:
        counter = partial(Counter, registry=self.registry)
        self.enforcements = counter(
            "numatopo_agent_enforcements_total",
            "Pods whose cpusets were brought to their assignment (first time or restart).",
        )
        self.drift_corrections = counter(
            "numatopo_agent_drift_corrections_total",
            "Pods whose cpusets had drifted from an enforced assignment and were rewritten.",
        )
        self.failures = counter(
            "numatopo_agent_failures_total",
            "Pods that could not be enforced, by reason.",
            ["reason"],
        )
        self.task_restarts = counter(
            "numatopo_agent_task_restarts_total",
            "Watches (pods, the node's Numatopology) that failed with an unexpected error "
            "and were run again, by task.",
            ["task"],
        )
        self.writes = counter(
            "numatopo_agent_cpuset_writes_total", "Single cpuset.cpus / cpuset.mems writes."
        )
        self.gpu_mismatches = counter(
            "numatopo_agent_gpu_mismatches_total",
            "Assignments whose containers were given other GPUs by the kubelet than "
            "assigned (Follow); the operator re-aligns each.",
        )
        self.events_dropped = counter(
            "numatopo_agent_events_dropped_total",
            "Events not posted: their queue was full, or the agent stopped first.",
        )
        self.latency = Histogram(
            "numatopo_agent_assignment_to_enforced_seconds",
            "From the assignment first seen on the watch stream to its cpusets written.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
