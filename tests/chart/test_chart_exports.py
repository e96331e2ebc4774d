"""The chart's export switches reach the operator, and only the operator.

`exports.nodeResourceTopology.enabled` and `exports.volcano.enabled` become the
operator's `NUMATOPO_EXPORT_*` variables, read by its own settings parser here; the
RBAC each needs is checked in test_chart_rbac.py (granted only while on, never to the
node pods, which is why the node-scope admission policy has nothing to say about them).
"""

from __future__ import annotations

from typing import Any

import pytest

from numatopo_operator.exports import ExportFormat, enabled_formats
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import from_env


def operator_env(manifests: list[dict[str, Any]]) -> dict[str, str]:
    (deployment,) = [
        m
        for m in manifests
        if m["kind"] == "Deployment" and m["metadata"]["name"].endswith("-operator")
    ]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


@pytest.mark.parametrize(
    ("nrt", "volcano", "expected"),
    [
        pytest.param(None, None, [], id="defaults-off"),
        pytest.param(True, False, [ExportFormat.NRT], id="nrt"),
        pytest.param(True, True, [ExportFormat.NRT, ExportFormat.VOLCANO], id="both"),
    ],
)
def test_switches_reach_the_operator(
    render: Any, nrt: bool | None, volcano: bool | None, expected: list[ExportFormat]
) -> None:
    values = (
        None
        if nrt is None
        else {
            "exports": {"nodeResourceTopology": {"enabled": nrt}, "volcano": {"enabled": volcano}}
        }
    )

    env = operator_env(render(values))

    assert expected == enabled_formats(Runtime(from_env(env)))
