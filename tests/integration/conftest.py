"""Discovery -> engine -> CLI on every real machine: shared catalogue, trees and profiles.

The helper modules of this folder (`real_sources`, `pod_manifests`, `placement_checks`)
are made importable here. Hypothesis profiles: `integration` (default, under a minute
on 2 cores) and `integration-thorough` (NUMATOPO_INTEGRATION_PROFILE=integration-thorough,
for a longer soak before a release).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from real_sources import (  # noqa: E402 (importable only once HERE is on sys.path)
    SOURCES,
    discover_source,
    through_json,
)

from numatopo_engine.model import Numatopology  # noqa: E402
from sysfs_trees import extract_shared, shared_trees  # noqa: E402

_COMMON = {
    "deadline": None,
    "derandomize": True,  # the same examples on every run: a red build is reproducible
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    "database": None,
}
settings.register_profile("integration", max_examples=4, **_COMMON)
settings.register_profile("integration-thorough", max_examples=60, **_COMMON)
PROFILE = os.environ.get("NUMATOPO_INTEGRATION_PROFILE", "integration")


@pytest.fixture(scope="session")
def tree_root(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str | None], Path | None]:
    """`tree_root("16amd64-8n2c")` -> the extracted tree (once per run); None -> None."""
    shared = shared_trees(tmp_path_factory)
    return lambda tree: None if tree is None else extract_shared(tree, shared)


@pytest.fixture(scope="session")
def discovered_topology(
    tree_root: Callable[[str | None], Path | None],
) -> Callable[[str], Numatopology]:
    """`discovered_topology(source_id)` -> what `inspect` builds, before printing (cached)."""
    read: dict[str, Numatopology] = {}

    def topology(source_id: str) -> Numatopology:
        if source_id not in read:
            source = SOURCES[source_id]
            read[source_id] = discover_source(source, tree_root(source.tree))
        return read[source_id]

    return topology


@pytest.fixture(scope="session")
def real_topology(
    discovered_topology: Callable[[str], Numatopology],
) -> Callable[[str], Numatopology]:
    """`real_topology(source_id)` -> what `assign` reads after `inspect -o json`."""
    return lambda source_id: through_json(discovered_topology(source_id))
