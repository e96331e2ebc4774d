"""`OperatorSettings`: everything the operator is told, from flags and the environment (pure).

Built in one place: `from_env(environ)` reads `NUMATOPO_*` variables, and
`from_args(args, environ)` lets command-line flags override them. The chart sets the
variables; a person running `numatopo operator` by hand uses the flags.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

from numatopo_engine.packing import MixError, WorkloadMix
from numatopo_engine.resources import DEFAULT_GPU_PATTERNS, ResourceNames

ENV_PREFIX = "NUMATOPO_"
MAX_HALF_LIFE_SECONDS = 30 * 86400.0


class SettingsError(ValueError):
    """A flag or environment variable has a value the operator cannot use."""


@dataclass(frozen=True, slots=True)
class OperatorSettings:
    """The operator's configuration. Every field maps to one flag and one variable."""

    gpu_resources: tuple[str, ...] = DEFAULT_GPU_PATTERNS
    """Patterns of extended resources counted as GPUs (`NUMATOPO_GPU_RESOURCES`, comma list)."""
    nic_resources: tuple[str, ...] = ("rdma/*",)
    """Patterns of extended resources counted as RDMA NICs (`NUMATOPO_NIC_RESOURCES`)."""
    scheduler_name: str = "numatopo-scheduler"
    """The kube-scheduler profile calling the extender: `/bind` binds only its pods."""
    listen_host: str = "0.0.0.0"  # a pod serves its probes on every interface
    """Address the extender, metrics and health servers bind to."""
    extender_port: int = 8888
    """Port of the scheduler extender (`/filter`, `/prioritize`, `/bind`); 0 picks a free one."""
    metrics_port: int = 8080
    """Port of `/metrics`, `/healthz` (liveness) and `/readyz` (readiness); 0 = a free one."""
    extender_tls_cert: str = ""
    """PEM certificate chain the extender serves HTTPS with (`extender_tls`)."""
    extender_tls_key: str = ""
    """PEM private key of `extender_tls_cert`."""
    extender_client_ca: str = ""
    """PEM CA client certificates chain to (kube-scheduler's only); all 3 re-read on change."""
    extender_insecure_plain_http: bool = False
    """Serve the extender as plain HTTP without client authentication: whoever reaches
    the port can bind any pending pod to any node. For test clusters; logged loudly."""
    lease_name: str | None = None
    """Lease the replicas compete for (its holder decides); None: standalone, always deciding."""
    lease_namespace: str | None = None
    """Namespace of the Lease; None means `pod_namespace` (else `default`)."""
    lease_duration_seconds: float = 4.0
    """How long a standby waits, after it last saw the Lease renewed, before taking it."""
    renew_deadline_seconds: float = 3.0
    """The holder stops deciding and writing when it could not renew for this long. Below
    `lease_duration_seconds`, so a holder cut off is silent before anyone may take over."""
    retry_period_seconds: float = 1.0
    """Pause between attempts to renew (the holder) or to acquire (a standby)."""
    heartbeat_max_age_seconds: float = 900.0
    """A Numatopology with an older `status.heartbeat` is stale (nothing placed on it); three
    300 s exporter resyncs; 0: no check. One without a heartbeat is never stale."""
    retry_base_seconds: float = 0.5
    """First pause before a pod (a failed write, or waiting) is judged again; doubles per try."""
    retry_max_seconds: float = 30.0
    """The longest pause between two attempts for one pod."""
    namespaces: tuple[str, ...] = ()
    """Namespaces whose pods are placed; empty means cluster-wide."""
    pod_name: str | None = None
    """This replica's own pod (set from the downward API): the active replica labels it
    so that the extender Service reaches only that pod. None (outside a pod): no label."""
    pod_namespace: str | None = None
    """The namespace of `pod_name`."""
    gpu_admission_timeout_seconds: float = 8.0
    """How long a second GPU pod on a steered node waits for the first's admission at most
    (`gpu_admissions`); below the chart's extender `httpTimeout` (10 s): binds answer in time."""
    status_debounce_seconds: float = 2.0
    """At most one Numatopology status write per node per this period (a 50-pod burst: one)."""
    workload_mix: str = ""
    """Pins the workload mix the node rank packs for (`NUMATOPO_WORKLOAD_MIX`, e.g.
    `1x8:60,8x64:40`: GPUSxCPUS:WEIGHT, `p` after the CPUs for shared-pool CPUs); empty:
    learned from the GPU pods seen (`workload_mix`)."""
    workload_mix_half_life_seconds: float = 21600.0
    """Half-life of a pod's weight in the learned mix (6 h); at most 30 days."""
    export_nrt: bool = False
    """Write each node's NodeResourceTopology (`topology.node.k8s.io/v1alpha2`, read by
    scheduler-plugins' NodeResourceTopologyMatch) from the ledger (`exports`)."""
    export_volcano: bool = False
    """Write each node's Volcano Numatopology (`nodeinfo.volcano.sh/v1alpha1`, read by
    Volcano's numaaware plugin) from the ledger (`exports`)."""
    groups: bool = True
    """Place gated pod groups all-or-nothing across nodes (`groups`), watching Nodes and
    NetworkTopologies; off: pods gated `numatopo.io/group` stay gated, no Node is watched."""
    signing_key_file: str = ""
    """PEM file of the Ed25519 private key the operator signs assignments with
    (`numatopo_engine.signing`); required to run (the chart mounts its Secret)."""
    trusted_keys_file: str = ""
    """PEM file of further public keys (or certificates) whose signatures still count: the
    previous key while keys rotate. Empty: only the signing key's own public half."""
    resources: ResourceNames = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "resources", ResourceNames(gpu=self.gpu_resources, nic=self.nic_resources)
        )

    @property
    def pinned_mix(self) -> WorkloadMix | None:
        """The mix `workload_mix` pins, or None (learn it)."""
        return WorkloadMix.parse(self.workload_mix) if self.workload_mix else None

    @property
    def standalone(self) -> bool:
        return self.lease_name is None

    @property
    def lease_namespace_or_default(self) -> str:
        return self.lease_namespace or self.pod_namespace or "default"


def _split(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _number(name: str, text: str, *, most: float = 3600.0, port: bool = False) -> float:
    """A port number (`port`), else a number of seconds, in 0..`most`."""
    what, unit = ("a port number", "") if port else ("a number of seconds", " seconds")
    try:
        number = int(text) if port else float(text)
    except ValueError:
        raise SettingsError(f"{name}: {text!r} is not {what}") from None
    if not 0 <= number <= most:
        raise SettingsError(f"{name}: {number} is outside 0..{most:g}{unit}")
    return number


def _switch(name: str, value: str | bool, *, empty: bool = True) -> bool:
    """True or false; `empty`: an empty text counts as false (a switch left unset)."""
    if isinstance(value, bool):
        return value
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off") or (empty and not lowered):
        return False
    kind = "true or false" if empty else "a boolean (true or false)"
    raise SettingsError(f"{name}: {value!r} is not {kind}")


def _apply(
    settings: OperatorSettings, values: Mapping[str, str | bool | None], source: str
) -> OperatorSettings:
    """Overrides from `values` (field name -> text; None = not given), checked."""
    changes: dict[str, object] = {}
    for name, text in values.items():
        if text is None:
            continue
        label = f"{source} {name}"
        if name in _SWITCHES:
            changes[name] = _switch(label, text)
            continue
        if isinstance(text, bool):
            raise SettingsError(f"{label}: expects a value, not a switch")
        if name in ("gpu_resources", "nic_resources", "namespaces"):
            changes[name] = _split(text)
        elif name in ("extender_port", "metrics_port"):
            changes[name] = _number(label, text, most=65535, port=True)
        elif name == "groups":
            changes[name] = _switch(label, text, empty=False)
        elif name == "workload_mix_half_life_seconds":
            changes[name] = _number(label, text, most=MAX_HALF_LIFE_SECONDS)
            if not changes[name]:
                raise SettingsError(f"{label}: must be more than 0")
        elif name.endswith("_seconds"):
            changes[name] = _number(label, text)
        elif name == "workload_mix":
            try:
                WorkloadMix.parse(text)
            except MixError as exc:
                raise SettingsError(f"{label}: {exc}") from None
            changes[name] = text
        elif name in ("lease_name", "lease_namespace", "pod_name", "pod_namespace"):
            changes[name] = text or None
        else:
            changes[name] = text
    updated = replace(settings, **changes)  # type: ignore[arg-type]
    if not updated.gpu_resources:
        raise SettingsError(f"{source} gpu_resources: at least one pattern is needed")
    if not updated.scheduler_name:
        # /bind binds only pods of this profile: empty would refuse every pod.
        raise SettingsError(f"{source} scheduler_name: the scheduler profile's name is needed")
    if not (
        0
        < updated.retry_period_seconds
        < updated.renew_deadline_seconds
        < updated.lease_duration_seconds
    ):
        # client-go's rule: the holder must give up before a standby may take over.
        raise SettingsError(
            f"{source}: need 0 < retry period ({updated.retry_period_seconds}) < renew "
            f"deadline ({updated.renew_deadline_seconds}) < lease duration "
            f"({updated.lease_duration_seconds})"
        )
    tls = (updated.extender_tls_cert, updated.extender_tls_key, updated.extender_client_ca)
    if any(tls) and not all(tls):
        raise SettingsError(
            f"{source}: the extender's TLS needs all three of extender_tls_cert, "
            "extender_tls_key and extender_client_ca"
        )
    if any(tls) and updated.extender_insecure_plain_http:
        raise SettingsError(
            f"{source}: extender_insecure_plain_http and extender TLS files exclude each "
            "other; drop the insecure switch to serve HTTPS"
        )
    if not 0 < updated.retry_base_seconds <= updated.retry_max_seconds:
        raise SettingsError(
            f"{source}: need 0 < retry base ({updated.retry_base_seconds}) <= retry max "
            f"({updated.retry_max_seconds})"
        )
    return updated


_FIELDS = tuple(f.name for f in fields(OperatorSettings) if f.init)


def from_env(environ: Mapping[str, str]) -> OperatorSettings:
    """Settings from `NUMATOPO_<FIELD>` variables (e.g. `NUMATOPO_EXTENDER_PORT`)."""
    values: dict[str, str | bool | None] = {
        name: environ.get(ENV_PREFIX + name.upper()) for name in _FIELDS
    }
    return _apply(OperatorSettings(), values, "environment")


# Flag -> help; each flag defaults to None so the environment can fill it.
_HELP = {
    "gpu-resources": "comma list of GPU resource patterns",
    "nic-resources": "comma list of RDMA NIC resource patterns",
    "scheduler-name": "kube-scheduler profile using the extender: /bind binds only its pods",
    "listen-host": "address the HTTP servers bind to",
    "extender-port": "scheduler extender port (default 8888)",
    "metrics-port": "/metrics, /healthz, /readyz port (default 8080)",
    "extender-tls-cert": "PEM certificate chain the extender serves HTTPS with",
    "extender-tls-key": "PEM private key of --extender-tls-cert",
    "extender-client-ca": "PEM CA a client certificate must chain to (kube-scheduler's CA only)",
    "extender-insecure-plain-http": "INSECURE, test clusters only: serve the extender as plain "
    "HTTP without client authentication (anyone reaching it can bind any pending pod to any "
    "node)",
    "lease-name": "Lease the replicas compete for; omit for one standalone replica",
    "lease-namespace": "namespace of the Lease (default: own pod's)",
    "lease-duration-seconds": "lease duration (default 4)",
    "renew-deadline-seconds": "holder stops writing after this long unrenewed (3)",
    "retry-period-seconds": "renewal period (1); a standby reads 4 times per period",
    "namespaces": "comma list of namespaces; omit for cluster-wide",
    "pod-name": "this replica's pod, labelled while it is active",
    "pod-namespace": "namespace of --pod-name",
    "status-debounce-seconds": "at most one status write per node per this period",
    "heartbeat-max-age-seconds": "Numatopology heartbeat older than this is stale (default "
    "900; 0: no check)",
    "gpu-admission-timeout-seconds": "longest wait for a steered node's previous GPU pod to be "
    "admitted (default 8)",
    "retry-base-seconds": "first retry pause for a pod (0.5)",
    "retry-max-seconds": "longest retry pause for a pod (30)",
    "workload-mix": "pin the mix the node rank packs for, e.g. 1x8:60,8x64:40 (default: learned)",
    "workload-mix-half-life-seconds": "half-life of a pod's weight in the learned mix (default "
    "21600)",
    "export-nrt": "write each node's NodeResourceTopology (topology.node.k8s.io/v1alpha2)",
    "export-volcano": "write each node's Volcano Numatopology (nodeinfo.volcano.sh/v1alpha1)",
    "groups": "place gated pod groups across nodes, watching Nodes (true, the default, or false)",
    "signing-key-file": "PEM file of the Ed25519 key assignments are signed with (required; "
    "e.g. `openssl genpkey -algorithm ed25519 -out key.pem`)",
    "trusted-keys-file": "PEM file of previous public keys (or certificates) still trusted "
    "while keys rotate",
}
_SWITCHES = ("extender_insecure_plain_http", "export_nrt", "export_volcano")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for every field, in `_HELP`."""
    for flag, text in _HELP.items():
        if flag.replace("-", "_") in _SWITCHES:
            parser.add_argument(f"--{flag}", action=argparse.BooleanOptionalAction, help=text)
        else:
            parser.add_argument(f"--{flag}", help=text)


def from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> OperatorSettings:
    """The environment first, then the flags given on the command line."""
    values: dict[str, str | bool | None] = {name: getattr(args, name, None) for name in _FIELDS}
    return _apply(from_env(environ), values, "flag")
