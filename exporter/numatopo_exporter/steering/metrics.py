"""Prometheus counters of the steering proxy, on the registry the caller passes (the
agent's, so they are served beside its own)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from prometheus_client import Counter

from numatopo_exporter.daemon.metrics import Registry


@dataclass
class SteeringMetrics(Registry):
    def __post_init__(self) -> None:
        counter = partial(Counter, registry=self.registry)
        self.answers = counter(
            "numatopo_steering_answers_total",
            "Preferred allocations answered, per container request, by whose choice: "
            "steered (the assignment's GPUs), vendor (its own preference), kubelet "
            "(empty answer: the kubelet chooses).",
            ["outcome"],
        )
        self.registrations = counter(
            "numatopo_steering_registrations_total",
            "Registrations with the kubelet, by result.",
            ["result"],
        )
        self.vendor_missing = counter(
            "numatopo_steering_vendor_missing_total",
            "Times the vendor plugin's device stream ended (devices reported Unhealthy "
            "until it is back).",
        )
