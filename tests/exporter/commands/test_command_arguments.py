"""`numatopo exporter` and `numatopo agent`: arguments, defaults, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import kmock
import pytest

from numatopo_cli.main import build_parser, main

from .conftest import main_in_thread


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(
            ["exporter"],
            {
                "node_name": "node-from-env",
                "sysfs_root": Path("/"),
                "resync_seconds": 300.0,
                "debounce_seconds": 2.0,
                "oneshot": False,
                "no_publish": False,
                "no_nvml": False,
                "api_url": "",
                "metrics_port": 9101,
            },
            id="exporter-defaults",
        ),
        pytest.param(
            [
                "exporter",
                "--node-name=n1",
                "--sysfs-root=/host",
                "--resync-seconds=60",
                "--debounce-seconds=0.5",
                "--oneshot",
                "--no-publish",
                "--no-nvml",
                "--api-url=http://127.0.0.1:8001",
                "--metrics-port=0",
            ],
            {
                "node_name": "n1",
                "sysfs_root": Path("/host"),
                "resync_seconds": 60.0,
                "debounce_seconds": 0.5,
                "oneshot": True,
                "no_publish": True,
                "no_nvml": True,
                "api_url": "http://127.0.0.1:8001",
                "metrics_port": 0,
            },
            id="exporter-every-flag",
        ),
        pytest.param(
            ["agent"],
            {
                "node_name": "node-from-env",
                "cgroup_root": Path("/sys/fs/cgroup"),
                "kubelet_state": Path("/var/lib/kubelet/cpu_manager_state"),
                "resync_seconds": 10.0,
                "api_url": "",
                "metrics_port": 9102,
            },
            id="agent-defaults",
        ),
        pytest.param(
            [
                "agent",
                "--node-name=n1",
                "--cgroup-root=/host/sys/fs/cgroup",
                "--kubelet-state=/host/state",
                "--resync-seconds=2",
                "--api-url=http://127.0.0.1:8001",
                "--metrics-port=0",
            ],
            {
                "node_name": "n1",
                "cgroup_root": Path("/host/sys/fs/cgroup"),
                "kubelet_state": Path("/host/state"),
                "resync_seconds": 2.0,
                "api_url": "http://127.0.0.1:8001",
                "metrics_port": 0,
            },
            id="agent-every-flag",
        ),
    ],
)
def test_arguments_and_their_defaults(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], expected: dict[str, object]
) -> None:
    """The node name defaults to $NODE_NAME (the DaemonSet sets it from spec.nodeName)."""
    monkeypatch.setenv("NODE_NAME", "node-from-env")

    args = build_parser().parse_args(argv)

    assert expected == {name: getattr(args, name) for name in expected}


@pytest.mark.parametrize(
    ("argv", "expected_start"),
    [
        pytest.param(
            ["exporter", "--oneshot", "--no-publish"],
            "numatopo exporter: no node name: pass --node-name or set NODE_NAME",
            id="exporter-without-node-name",
        ),
        pytest.param(
            ["exporter", "--node-name=n1", "--sysfs-root={tmp}/nope"],
            "numatopo exporter: --sysfs-root {tmp}/nope: no such directory",
            id="exporter-bad-sysfs-root",
        ),
        pytest.param(
            ["exporter", "--node-name=n1", "--sysfs-root={tree}", "--api-url={closed}"],
            "numatopo exporter: cannot reach the API server at {closed}: ",
            id="exporter-unreachable-api",
        ),
        pytest.param(
            ["exporter", "--node-name=n1", "--sysfs-root={tree}"],
            "numatopo exporter: no Kubernetes credentials: pass --api-url",
            id="exporter-without-credentials",
        ),
        pytest.param(
            ["agent", "--cgroup-root={cgroups}"],
            "numatopo agent: no node name: pass --node-name or set NODE_NAME",
            id="agent-without-node-name",
        ),
        pytest.param(
            ["agent", "--node-name=n1", "--cgroup-root={tmp}"],
            "numatopo agent: {tmp}: no cpuset hierarchy found",
            id="agent-bad-cgroup-root",
        ),
        pytest.param(
            [
                "agent",
                "--trusted-keys-file={keys}",
                "--node-name=n1",
                "--cgroup-root={cgroups}",
                "--api-url={closed}",
            ],
            "numatopo agent: cannot reach the API server at {closed}: ",
            id="agent-unreachable-api",
        ),
        pytest.param(
            ["agent", "--trusted-keys-file={keys}", "--node-name=n1", "--cgroup-root={cgroups}"],
            "numatopo agent: no Kubernetes credentials: pass --api-url",
            id="agent-without-credentials",
        ),
    ],
)
@pytest.mark.usefixtures("no_credentials")
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], places: dict[str, str], argv: list[str], expected_start: str
) -> None:
    argv = [arg.format(**places) for arg in argv]
    expected_start = expected_start.format(**places)

    code = main([*argv, "--metrics-port=0"])

    lines = capsys.readouterr().err.splitlines()
    assert (2, [expected_start]) == (code, [line[: len(expected_start)] for line in lines])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(
            ["exporter", "--sysfs-root={tree}", "--no-nvml"],
            "numatopo exporter: HTTP 404 NotFound: "
            "no node named 'ghost' (check --node-name or NODE_NAME)",
            id="exporter",
        ),
        pytest.param(
            ["agent", "--trusted-keys-file={keys}", "--cgroup-root={cgroups}"],
            "numatopo agent: HTTP 404 NotFound: "
            "no node named 'ghost' (check --node-name or NODE_NAME)",
            id="agent",
        ),
    ],
)
async def test_a_node_that_does_not_exist_ends_the_process(
    cluster: kmock.KubernetesEmulator,
    capsys: pytest.CaptureFixture[str],
    places: dict[str, str],
    argv: list[str],
    expected: str,
) -> None:
    """A wrong node name is caught at start instead of being retried for ever."""
    argv = [arg.format(**places) for arg in argv]

    code = await main_in_thread(
        [*argv, "--node-name=ghost", f"--api-url={cluster.url}", "--metrics-port=0"]
    )

    assert (2, [expected]) == (code, capsys.readouterr().err.splitlines())
