"""The kubelet's CPU / Topology Manager settings, from its files on the node.

    /var/lib/kubelet/config.yaml        KubeletConfiguration (kubelet.config.k8s.io/v1beta1)
    /var/lib/kubelet/cpu_manager_state  the CPU manager's checkpoint (JSON)

Reserved CPUs are `reservedSystemCPUs` when set. With the static CPU manager and no explicit list
the kubelet reserves ceil(kubeReserved.cpu + systemReserved.cpu) CPUs, chosen by topology at its
start and written nowhere: the set stays empty and a notice gives the count. The checkpoint's
`policyName`, when there is one, wins: it is the policy the kubelet runs (flags override the file).

A missing file at the usual place is normal (a kubelet configured by flags, no static CPU manager):
defaults plus a notice. A named file that is missing, or any file that does not parse, is an error
naming it. A named absolute path is a host path (under the root); a relative one is on the machine
running numatopo (`numatopo inspect --hwloc-xml node.xml --kubelet-config config.yaml`).

In the chart each file is mounted alone, so a file the kubelet renames over is seen as its old copy
(`st_nlink == 0`), with what follows for `policyName`: docs/operations.md, "Node pods: what they
mount"."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from numatopo_engine.cpuset import CPUSet, CPUSetParseError
from numatopo_engine.model import Policies
from numatopo_engine.quantity import QuantityError, parse_milli
from numatopo_exporter.discovery.errors import DiscoveryError
from numatopo_exporter.discovery.hostroot import HostRoot

SOURCE = "kubelet"
CONFIG_PATH = Path("/var/lib/kubelet/config.yaml")
STATE_PATH = Path("/var/lib/kubelet/cpu_manager_state")


@dataclass(frozen=True)
class KubeletReading:
    """Policies and reserved CPUs as the kubelet on this node sees them."""

    policies: Policies = field(default_factory=Policies)
    reserved_cpus: CPUSet = field(default_factory=CPUSet)
    notices: list[str] = field(default_factory=list)


def read_kubelet(
    root: HostRoot, config: Path | None = None, state: Path | None = None
) -> KubeletReading:
    """Read both files under `root`; `config`/`state` name files overriding the defaults."""
    config_file = _locate(root, config, CONFIG_PATH, "kubelet config")
    state_file = _locate(root, state, STATE_PATH, "CPU manager checkpoint")
    notices: list[str] = []

    settings = _load_config(config_file, notices)
    policies = Policies(
        cpu_manager_policy=_string(settings, "cpuManagerPolicy", "none", config_file),
        topology_manager_policy=_string(settings, "topologyManagerPolicy", "none", config_file),
        topology_manager_scope=_string(settings, "topologyManagerScope", "container", config_file),
        topology_manager_policy_options=_options(settings, config_file),
    )
    reserved = _reserved(settings, config_file, policies.cpu_manager_policy, notices)

    running = read_cpu_manager_policy(state_file)
    if running is None:
        notices.append(f"{state_file}: no CPU manager checkpoint; the config file's policy is used")
    elif running != policies.cpu_manager_policy:
        notices.append(
            f"{state_file}: the kubelet runs cpuManagerPolicy {running!r} "
            f"(its config file says {policies.cpu_manager_policy!r}); using {running!r}"
        )
        policies = policies.model_copy(update={"cpu_manager_policy": running})
    return KubeletReading(policies=policies, reserved_cpus=reserved, notices=notices)


def _locate(root: HostRoot, named: Path | None, default: Path, what: str) -> Path:
    """The `what` file to read; one the user named must exist: a typo must not read as "no
    kubelet here"."""
    path = named if named is not None and not named.is_absolute() else root.join(named or default)
    if named is not None and not path.exists():
        raise DiscoveryError(f"no such {what} file", path)
    return path


def _load_config(path: Path, notices: list[str]) -> dict[str, Any]:
    try:
        text, replaced = _read_mounted(path)
        if replaced:
            notices.append(
                f"{path}: replaced on the host after this container started; this is the "
                "old copy (restart the numatopo node pod to read the new one)"
            )
    except FileNotFoundError:
        notices.append(f"{path}: no kubelet config file; assuming the default policies (none)")
        return {}
    except OSError as exc:
        raise DiscoveryError(f"cannot read kubelet config: {exc.strerror}", path) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DiscoveryError(f"kubelet config is not valid YAML: {exc}", path) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise DiscoveryError("kubelet config is not a YAML mapping", path)
    kind = data.get("kind", "KubeletConfiguration")
    if kind != "KubeletConfiguration":
        raise DiscoveryError(f"expected kind KubeletConfiguration, found {kind!r}", path)
    return data


def read_cpu_manager_policy(path: Path) -> str | None:
    """`policyName` of the CPU manager checkpoint at `path`; None only when the file is missing.
    One that cannot be read, does not parse (garbage, or cut short by a kubelet killed mid-write),
    is not an object or names no policy raises `DiscoveryError`: the kubelet may well run `static`
    then, and the agent must not write cpusets until it knows."""
    try:
        text, replaced = _read_mounted(path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise DiscoveryError(f"cannot read the CPU manager checkpoint: {why}", path) from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DiscoveryError(
            f"the CPU manager checkpoint is not valid JSON (garbage or cut short): {exc}", path
        ) from None
    policy = data.get("policyName") if isinstance(data, dict) else None
    if not isinstance(policy, str) or not policy:
        raise DiscoveryError("the CPU manager checkpoint names no policyName", path)
    if replaced and policy != "static":
        raise DiscoveryError(
            f"the kubelet replaced its CPU manager checkpoint after this container started "
            f"(the mounted copy, policy {policy!r}, is no longer on the host), so its policy "
            f"may have changed: restart the numatopo node pod to mount the current one",
            path,
        )
    return policy


def _read_mounted(path: Path) -> tuple[str, bool]:
    """The file's text, and whether the host replaced it since it was mounted (no link left)."""
    with path.open(encoding="utf-8") as file:
        text = file.read()
        return text, os.fstat(file.fileno()).st_nlink == 0


def _string(settings: dict[str, Any], key: str, default: str, path: Path) -> str:
    value = settings.get(key, default)
    if not isinstance(value, str):
        raise DiscoveryError(f"{key} must be a string, found {value!r}", path)
    return value


def _options(settings: dict[str, Any], path: Path) -> dict[str, str]:
    options = settings.get("topologyManagerPolicyOptions") or {}
    if not isinstance(options, dict):
        raise DiscoveryError("topologyManagerPolicyOptions must be a mapping", path)
    # The kubelet takes these as strings ("true"); YAML may have typed them as booleans.
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}


def _reserved(settings: dict[str, Any], path: Path, cpu_policy: str, notices: list[str]) -> CPUSet:
    explicit = settings.get("reservedSystemCPUs")
    if explicit not in (None, ""):
        try:
            return CPUSet.parse(str(explicit))
        except CPUSetParseError as exc:
            raise DiscoveryError(f"reservedSystemCPUs: {exc}", path) from exc
    if cpu_policy == "static":
        milli = 0
        for block in ("kubeReserved", "systemReserved"):
            value = (settings.get(block) or {}).get("cpu")
            if value is not None:
                try:
                    milli += parse_milli(value)
                except QuantityError as exc:
                    raise DiscoveryError(f"{block}.cpu: {exc}", path) from exc
        count = math.ceil(milli / 1000)
        notices.append(
            f"{path}: static CPU manager without reservedSystemCPUs: the kubelet reserves "
            f"{count} CPU(s) (ceil of kubeReserved.cpu + systemReserved.cpu) chosen at its "
            "start; which ones is not recorded, so reservedCPUs is left empty"
        )
    return CPUSet()
