"""`numatopo exporter` as a user runs it: print once, publish once, and udev wiring."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import kmock
import pytest

from numatopo_cli.main import build_parser, main
from numatopo_engine.model import NumatopologySpec
from numatopo_exporter.daemon.serve import make_discovery_scan, serve
from numatopo_exporter.discovery.discover import DiscoverOptions

from ..daemon.conftest import NODE, NODE_UID, FakeDevice, FakeMonitor, unplug_pci
from .conftest import TREE, main_in_thread

NTP = "numatopo.io/v1alpha1/numatopologies"
GPU = "0000:06:00.0"
NUMATOPO = Path(sys.executable).parent / "numatopo"


def gpus_and_cpus(obj: dict) -> tuple[str, str, list[str], int]:
    """What identifies the tree in a printed or stored object."""
    spec = obj["spec"]
    return (
        obj["kind"],
        obj["metadata"]["name"],
        [g["pciBusId"] for g in spec["gpus"]],
        len(spec["cpus"]),
    )


EXPECTED = ("Numatopology", NODE, [GPU], 8)


def test_oneshot_no_publish_prints_the_object(
    capsys: pytest.CaptureFixture[str], node_root: Path
) -> None:
    code = main(
        [
            "exporter",
            "--oneshot",
            "--no-publish",
            "--no-nvml",
            f"--sysfs-root={node_root}",
            f"--node-name={NODE}",
        ]
    )

    assert (0, EXPECTED) == (code, gpus_and_cpus(json.loads(capsys.readouterr().out)))


def test_oneshot_no_publish_through_the_console_script(
    monkeypatch: pytest.MonkeyPatch, node_root: Path
) -> None:
    """The installed `numatopo` script, with the node name from the environment."""
    if not NUMATOPO.exists():
        pytest.skip(f"{NUMATOPO} is not installed (pip install -e .)")
    monkeypatch.setenv("NODE_NAME", NODE)

    done = subprocess.run(
        [NUMATOPO, "exporter", "--oneshot", "--no-publish", "--no-nvml", "--sysfs-root", node_root],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert (0, EXPECTED) == (done.returncode, gpus_and_cpus(json.loads(done.stdout)))
    assert "Traceback" not in done.stderr


async def test_oneshot_publishes_once_through_api_url(
    cluster: kmock.KubernetesEmulator, node_root: Path
) -> None:
    code = await main_in_thread(
        [
            "exporter",
            "--oneshot",
            "--no-nvml",
            f"--sysfs-root={node_root}",
            f"--node-name={NODE}",
            f"--api-url={cluster.url}",
        ]
    )

    stored = dict(cluster.objects[NTP, None, NODE].raw)
    assert (0, EXPECTED) == (code, gpus_and_cpus(stored))
    assert [NODE_UID] == [o["uid"] for o in stored["metadata"]["ownerReferences"]]
    assert ["Exported", "Degraded"] == [c["type"] for c in stored["status"]["conditions"]]


def json_documents(text: str) -> list[dict]:
    """The JSON objects printed one after the other."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        obj, end = decoder.raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
        found.append(obj)
        at = end
    return found


async def until(predicate: Callable[[], bool], what: str) -> None:
    for _ in range(250):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_burst_of_uevents_is_one_rescan_of_the_running_exporter(
    capsys: pytest.CaptureFixture[str], tree_copy: Callable[[str], Path]
) -> None:
    """`serve()` wires the udev monitor to the loop through the debouncer.

    pyudev's monitor is replaced by a fake that speaks its interface: no uevent can be
    generated here (it takes root and hardware that can be unplugged).
    """
    node_root = tree_copy(TREE)
    args = build_parser().parse_args(
        [
            "exporter",
            f"--node-name={NODE}",
            f"--sysfs-root={node_root}",
            "--no-nvml",
            "--no-publish",
            "--metrics-port=0",
            "--debounce-seconds=0.5",
            "--resync-seconds=3600",
        ]
    )
    real_scan = make_discovery_scan(DiscoverOptions.from_args(args))
    scans: list[NumatopologySpec] = []

    def scan() -> NumatopologySpec:
        scans.append(real_scan().spec)
        return scans[-1]

    monitor = FakeMonitor()
    task = asyncio.create_task(serve(args, scan=scan, udev_monitor=monitor))
    try:
        await until(lambda: len(scans) == 1, "the first scan")
        unplug_pci(node_root, GPU)
        monitor.send(*[FakeDevice("pci", "remove") for _ in range(10)])
        # Well inside the debounce window even on a loaded machine (0.05 s once let the
        # window close between the two bursts there, which made two rescans).
        await asyncio.sleep(0.02)
        monitor.send(FakeDevice("pci", "remove"), FakeDevice("usb", "add"))
        await until(lambda: len(scans) == 2, "the rescan")
        await asyncio.sleep(1.0)  # long enough for a second rescan, if one were coming
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        monitor.close()

    printed = json_documents(capsys.readouterr().out)
    assert (2, [[GPU], []]) == (len(scans), [gpus_and_cpus(p)[2] for p in printed])


async def test_exporter_metrics_listen_on_the_given_address_only(
    tree_copy: Callable[[str], Path],
) -> None:
    """`--metrics-address` (the chart's `exporter.metricsAddress`), as the agent's."""
    from ..agent.test_agent_api_and_metrics import free_port, listening_addresses

    port = free_port()
    args = build_parser().parse_args(
        [
            "exporter",
            f"--node-name={NODE}",
            f"--sysfs-root={tree_copy(TREE)}",
            "--no-nvml",
            "--no-publish",
            f"--metrics-port={port}",
            "--metrics-address=127.0.0.1",
            "--resync-seconds=3600",
        ]
    )
    monitor = FakeMonitor()
    task = asyncio.create_task(serve(args, udev_monitor=monitor))
    try:
        await until(lambda: bool(listening_addresses(port)), "the metrics server")
        assert {"127.0.0.1"} == listening_addresses(port)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        monitor.close()


def test_exporter_metrics_listen_everywhere_by_default() -> None:
    assert "0.0.0.0" == build_parser().parse_args(["exporter"]).metrics_address
