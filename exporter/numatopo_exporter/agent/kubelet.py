"""The kubelet's CPU manager policy on this node (I/O: one small JSON file).

With `--cpu-manager-policy=static` the kubelet itself writes exclusive cpusets and
rewrites them on every reconcile (10 s); two writers would fight forever, so the agent
then stands aside and says so.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["DEFAULT_STATE_FILE", "read_cpu_manager_policy"]

DEFAULT_STATE_FILE = Path("/var/lib/kubelet/cpu_manager_state")


def read_cpu_manager_policy(state_file: Path) -> str | None:
    """`policyName` from the checkpoint (`none`, `static`); None when absent or unreadable."""
    try:
        data = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return None
    policy = data.get("policyName") if isinstance(data, dict) else None
    return policy if isinstance(policy, str) else None
