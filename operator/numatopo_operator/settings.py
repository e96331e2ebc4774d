"""`OperatorSettings`: everything the operator is told, from flags and the environment (pure).

Built in one place: `from_env(environ)` reads `NUMATOPO_*` variables, and
`from_args(args, environ)` lets command-line flags override them. The chart sets the
variables; a person running `numatopo operator` by hand uses the flags.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from numatopo_engine.resources import ResourceNames

__all__ = [
    "ENV_PREFIX",
    "OperatorSettings",
    "SettingsError",
    "add_arguments",
    "from_args",
    "from_env",
]

ENV_PREFIX = "NUMATOPO_"


class SettingsError(ValueError):
    """A flag or environment variable has a value the operator cannot use."""


@dataclass(frozen=True, slots=True)
class OperatorSettings:
    """The operator's configuration. Every field maps to one flag and one variable."""

    gpu_resources: tuple[str, ...] = ("nvidia.com/gpu", "amd.com/gpu")
    """Patterns of extended resources counted as GPUs (`NUMATOPO_GPU_RESOURCES`, comma list)."""

    nic_resources: tuple[str, ...] = ("rdma/*",)
    """Patterns of extended resources counted as RDMA NICs (`NUMATOPO_NIC_RESOURCES`)."""

    scheduler_name: str = "numatopo-scheduler"
    """The kube-scheduler profile that calls the extender; logged and shown in Events."""

    listen_host: str = "0.0.0.0"  # a pod serves its probes on every interface
    """Address the extender, metrics and health servers bind to."""

    extender_port: int = 8888
    """Port of the scheduler extender (`/filter`, `/prioritize`, `/bind`); 0 picks a free one."""

    metrics_port: int = 8080
    """Port of `/metrics`, `/healthz` (liveness) and `/readyz` (readiness); 0 = a free one."""

    peering_name: str | None = None
    """kopf peering object shared by the replicas; None runs standalone (one replica)."""

    priority: int | None = None
    """This replica's kopf peering priority; None picks a random one, so that exactly one
    of several replicas is the highest and the others pause (equal priorities pause all)."""

    namespaces: tuple[str, ...] = ()
    """Namespaces whose pods are placed; empty means cluster-wide."""

    pod_name: str | None = None
    """This replica's own pod (set from the downward API): the active replica labels it
    so that the extender Service reaches only that pod. None (outside a pod): no label."""

    pod_namespace: str | None = None
    """The namespace of `pod_name`."""

    status_debounce_seconds: float = 2.0
    """Numatopology status is written at most once per this many seconds per node, so a
    burst of 50 pods costs one status write, not 50."""

    resources: ResourceNames = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "resources", ResourceNames(gpu=self.gpu_resources, nic=self.nic_resources)
        )

    @property
    def standalone(self) -> bool:
        return self.peering_name is None


def _split(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _port(name: str, text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise SettingsError(f"{name}: {text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise SettingsError(f"{name}: {port} is outside 0..65535")
    return port


def _seconds(name: str, text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise SettingsError(f"{name}: {text!r} is not a number of seconds") from None
    if not 0 <= seconds <= 3600:
        raise SettingsError(f"{name}: {seconds} is outside 0..3600 seconds")
    return seconds


def _integer(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SettingsError(f"{name}: {text!r} is not an integer") from None


def _apply(
    settings: OperatorSettings, values: Mapping[str, str | None], source: str
) -> OperatorSettings:
    """Overrides from `values` (field name -> text; None = not given), checked."""
    changes: dict[str, object] = {}
    for name, text in values.items():
        if text is None:
            continue
        label = f"{source} {name}"
        if name in ("gpu_resources", "nic_resources", "namespaces"):
            changes[name] = _split(text)
        elif name in ("extender_port", "metrics_port"):
            changes[name] = _port(label, text)
        elif name == "status_debounce_seconds":
            changes[name] = _seconds(label, text)
        elif name == "priority":
            changes[name] = _integer(label, text)
        elif name in ("peering_name", "pod_name", "pod_namespace"):
            changes[name] = text or None
        else:
            changes[name] = text
    updated = replace(settings, **changes)  # type: ignore[arg-type]
    if not updated.gpu_resources:
        raise SettingsError(f"{source} gpu_resources: at least one pattern is needed")
    return updated


_FIELDS = (
    "gpu_resources",
    "nic_resources",
    "scheduler_name",
    "listen_host",
    "extender_port",
    "metrics_port",
    "peering_name",
    "priority",
    "namespaces",
    "pod_name",
    "pod_namespace",
    "status_debounce_seconds",
)


def from_env(environ: Mapping[str, str]) -> OperatorSettings:
    """Settings from `NUMATOPO_<FIELD>` variables (e.g. `NUMATOPO_EXTENDER_PORT`)."""
    values = {name: environ.get(ENV_PREFIX + name.upper()) for name in _FIELDS}
    return _apply(OperatorSettings(), values, "environment")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for every field; each defaults to None so the environment can fill it."""
    parser.add_argument("--gpu-resources", help="comma list of GPU resource patterns")
    parser.add_argument("--nic-resources", help="comma list of RDMA NIC resource patterns")
    parser.add_argument("--scheduler-name", help="kube-scheduler profile using the extender")
    parser.add_argument("--listen-host", help="address the HTTP servers bind to")
    parser.add_argument("--extender-port", help="scheduler extender port (default 8888)")
    parser.add_argument("--metrics-port", help="/metrics, /healthz, /readyz port (default 8080)")
    parser.add_argument(
        "--peering-name", help="kopf peering object for several replicas; omit for standalone"
    )
    parser.add_argument("--priority", help="kopf peering priority of this replica")
    parser.add_argument("--namespaces", help="comma list of namespaces; omit for cluster-wide")
    parser.add_argument("--pod-name", help="this replica's pod, labelled while it is active")
    parser.add_argument("--pod-namespace", help="namespace of --pod-name")
    parser.add_argument(
        "--status-debounce-seconds", help="at most one status write per node per this period"
    )


def from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> OperatorSettings:
    """The environment first, then the flags given on the command line."""
    values = {name: getattr(args, name, None) for name in _FIELDS}
    return _apply(from_env(environ), values, "flag")
