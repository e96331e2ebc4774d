"""`HostRoot`: where the node's `/` is visible to us."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HostRoot:
    """`/` on bare metal, `/host` in the DaemonSet, a fixture tree in tests."""

    path: Path = Path("/")

    def join(self, absolute: str | Path) -> Path:
        """Map an absolute host path (e.g. /var/lib/kubelet/config.yaml) under the root."""
        return self.path.joinpath(str(absolute).lstrip("/"))
