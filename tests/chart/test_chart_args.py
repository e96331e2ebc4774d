"""Every argument the chart passes to a numatopo container is one its command accepts."""

from __future__ import annotations

from typing import Any

import pytest

from numatopo_exporter.cli import build_parser

CUSTOM_PATHS = {
    "node": {
        "hostPaths": {
            "kubeletDir": "/data/kubelet",
            "kubeletConfig": "/etc/kubernetes/kubelet/config.json",
        }
    }
}


def numatopo_containers(manifests: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    found = []
    for manifest in manifests:
        if manifest["kind"] not in ("Deployment", "DaemonSet"):
            continue
        for container in manifest["spec"]["template"]["spec"]["containers"]:
            args = container.get("args") or []
            if args and args[0] in ("operator", "exporter", "agent"):
                found.append((f"{manifest['metadata']['name']}/{container['name']}", args))
    return found


@pytest.mark.parametrize(
    "values",
    [
        pytest.param(None, id="defaults"),
        pytest.param(CUSTOM_PATHS, id="eks-style-kubelet-paths"),
    ],
)
def test_container_args_parse_with_the_real_cli(render: Any, values: Any) -> None:
    parser = build_parser()
    containers = numatopo_containers(render(values))

    assert {"operator", "exporter", "agent"} == {args[0] for _, args in containers}
    for name, args in containers:
        # $(NODE_NAME) is the kubelet's env expansion; argparse takes it as a string.
        try:
            parser.parse_args(args)
        except SystemExit:
            pytest.fail(f"{name}: numatopo {' '.join(args)} is refused by the CLI")


def test_custom_kubelet_paths_reach_the_exporter_as_host_paths(render: Any) -> None:
    """The exporter reads host paths under --sysfs-root, so they carry no /host prefix."""
    [(_, exporter)] = [
        c for c in numatopo_containers(render(CUSTOM_PATHS)) if c[1][0] == "exporter"
    ]

    assert "--kubelet-config=/etc/kubernetes/kubelet/config.json" in exporter
    assert "--kubelet-state=/data/kubelet/cpu_manager_state" in exporter
