"""Make this folder's helper modules (`reference`, `kubelet_tables`) and the allocation
tests' `helpers` importable by its tests."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent / "allocation"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
