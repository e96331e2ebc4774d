"""Prometheus metrics of the agent, on its own registry."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter, Histogram

from numatopo_exporter.daemon.metrics import Registry

__all__ = ["AgentMetrics"]


@dataclass
class AgentMetrics(Registry):
    def __post_init__(self) -> None:
        self.enforcements = Counter(
            "numatopo_agent_enforcements_total",
            "Pods whose cpusets were brought to their assignment (first time or restart).",
            registry=self.registry,
        )
        self.drift_corrections = Counter(
            "numatopo_agent_drift_corrections_total",
            "Pods whose cpusets had drifted from an enforced assignment and were rewritten.",
            registry=self.registry,
        )
        self.failures = Counter(
            "numatopo_agent_failures_total",
            "Pods that could not be enforced, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.writes = Counter(
            "numatopo_agent_cpuset_writes_total",
            "Single cpuset.cpus / cpuset.mems writes.",
            registry=self.registry,
        )
        self.gpu_mismatches = Counter(
            "numatopo_agent_gpu_mismatches_total",
            "Assignments whose containers were given other GPUs by the kubelet than "
            "assigned (Follow); the operator re-aligns each.",
            registry=self.registry,
        )
        self.latency = Histogram(
            "numatopo_agent_assignment_to_enforced_seconds",
            "From the assignment first seen on the watch stream to its cpusets written.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
