"""Reading a metric back in tests: a sample's current value, 0 when it has none yet."""

from __future__ import annotations

from numatopo_exporter.metrics import Registry


def sample(metrics: Registry, name: str, labels: dict[str, str] | None = None) -> float:
    found = metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if found is None else found
