"""The kubelet's CPU manager policy on this node (I/O: one small JSON file).

With `--cpu-manager-policy=static` the kubelet itself writes exclusive cpusets and
rewrites them on every reconcile (10 s); two writers would fight forever, so the agent
then stands aside and says so.

Unknown is not `none`. Only a missing checkpoint means the kubelet's default policy
(`none`: the kubelet never writes one then). A checkpoint that exists but cannot be read
(permission denied), does not parse (garbage, or cut short mid-write) or names no policy
raises `KubeletStateError`: the kubelet may well be `static`, so the agent must not
write cpusets until it knows.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["DEFAULT_STATE_FILE", "NONE", "STATIC", "KubeletStateError", "read_cpu_manager_policy"]

DEFAULT_STATE_FILE = Path("/var/lib/kubelet/cpu_manager_state")
NONE = "none"
STATIC = "static"


class KubeletStateError(Exception):
    """The CPU manager checkpoint exists but its policy cannot be known; names the file."""


def read_cpu_manager_policy(state_file: Path) -> str:
    """`policyName` from the checkpoint (`none`, `static`, ...); `none` when the file is absent.

    Raises `KubeletStateError` for a checkpoint that is unreadable, not JSON, not an
    object, or without a non-empty string `policyName`.
    """
    try:
        text = state_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return NONE
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise KubeletStateError(f"{state_file}: cannot read the CPU manager state: {why}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise KubeletStateError(
            f"{state_file}: the CPU manager state is not valid JSON (garbage or cut short): {exc}"
        ) from None
    policy = data.get("policyName") if isinstance(data, dict) else None
    if not isinstance(policy, str) or not policy:
        raise KubeletStateError(f"{state_file}: the CPU manager state names no policyName")
    return policy
