"""The exporter loop scanning a real machine's sysfs tree, published to the API emulator.

The tree is ghw's snapshot of an 8-CPU machine with an NVIDIA GPU at 0000:06:00.0,
extracted into tmp; a hot-unplug is simulated the way the kernel shows one in sysfs:
the device's directory and every link to it disappear, or a CPU's `online` reads 0
and the `cpu/online` and `cpu/offline` lists change.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import kmock
import pytest

from metric_samples import sample
from numatopo_engine.model import NumatopologySpec
from numatopo_exporter.daemon.loop import ExporterLoop
from numatopo_exporter.daemon.publishing import Publisher
from numatopo_exporter.daemon.serve import make_discovery_scan
from numatopo_exporter.discovery.discover import DiscoverOptions
from numatopo_kube.backoff import Backoff

from ..conftest import NodeClient
from .conftest import NODE, take_offline, unplug_pci, writes

NTP = "numatopo.io/v1alpha1/numatopologies"
TREE = "linux-amd64-accel-nvidia"
GPU = "0000:06:00.0"
CPU = 5


@pytest.fixture
def node_root(tree_copy: Callable[[str], Path]) -> Path:
    """A private copy of the real tree, which the test may change."""
    return tree_copy(TREE)


def unplug_gpu(root: Path) -> None:
    unplug_pci(root, GPU)


def offline_cpu(root: Path) -> None:
    take_offline(root, CPU)


def unplug_gpu_and_offline_cpu(root: Path) -> None:
    unplug_gpu(root)
    offline_cpu(root)


class RecordingPublisher(Publisher):
    """The real publisher, noting whether each publish wrote, so a test can wait for it."""

    def __init__(self, client: NodeClient) -> None:
        super().__init__(client, node_name=NODE, clock=lambda: 1_700_000_000.0)
        self.wrote: list[bool] = []

    async def publish(
        self, spec: NumatopologySpec, *, scanned_at: float, ignored: Sequence[str] = ()
    ) -> bool:
        wrote = await super().publish(spec, scanned_at=scanned_at, ignored=ignored)
        self.wrote.append(wrote)
        return wrote

    async def rounds(self, count: int) -> None:
        for _ in range(250):
            if len(self.wrote) >= count:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"the loop published {len(self.wrote)} times, not {count}")


@pytest.fixture
async def running(
    client: NodeClient, node_root: Path
) -> AsyncIterator[tuple[ExporterLoop, RecordingPublisher]]:
    """The exporter loop over the real scan of `node_root`, running as a task."""
    publisher = RecordingPublisher(client)
    loop = ExporterLoop(
        scan=make_discovery_scan(
            DiscoverOptions(sysfs_root=node_root, use_nvml=False, node_name=NODE)
        ),
        sink=publisher,
        resync_seconds=3600,  # only the test's request_rescan() scans again
        backoff=Backoff(0.01, 0.05),
    )
    task = asyncio.create_task(loop.run())
    try:
        yield loop, publisher
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def published(cluster: kmock.KubernetesEmulator) -> tuple[list[str], list[int], str]:
    """GPU bus ids, offline CPUs, and NUMA node 0's CPUs of the stored object."""
    spec = dict(cluster.objects[NTP, None, NODE].raw)["spec"]
    return (
        [g["pciBusId"] for g in spec["gpus"]],
        [c["id"] for c in spec["cpus"] if not c["online"]],
        spec["numaNodes"][0]["cpus"],
    )


async def test_a_rescan_of_an_unchanged_tree_writes_only_the_heartbeat(
    cluster: kmock.KubernetesEmulator, running: tuple[ExporterLoop, RecordingPublisher]
) -> None:
    loop, publisher = running
    await publisher.rounds(1)
    before = writes(cluster)

    loop.request_rescan()
    await publisher.rounds(2)

    last = [r for r in cluster if r.method != kmock.method.GET][-1]
    assert ([True, True], before + 1) == (publisher.wrote, writes(cluster))
    assert str(last.url.path).endswith(f"/{NODE}/status")
    assert "2023-11-14T22:13:20Z" == stored_status(cluster)["heartbeat"]
    assert ([GPU], [], "0-7") == published(cluster)
    assert 2 == sample(loop.metrics, "numatopo_exporter_scans_total", {"outcome": "ok"})


def stored_status(cluster: kmock.KubernetesEmulator) -> dict[str, object]:
    return dict(dict(cluster.objects[NTP, None, NODE].raw)["status"])


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(unplug_gpu, ([], [], "0-7"), id="gpu-unplugged"),
        pytest.param(offline_cpu, ([GPU], [CPU], "0-4,6-7"), id="cpu-offlined"),
        pytest.param(
            unplug_gpu_and_offline_cpu, ([], [CPU], "0-4,6-7"), id="gpu-unplugged-cpu-offlined"
        ),
    ],
)
async def test_a_hot_unplug_changes_the_published_spec(
    cluster: kmock.KubernetesEmulator,
    running: tuple[ExporterLoop, RecordingPublisher],
    node_root: Path,
    change: Callable[[Path], None],
    expected: tuple[list[str], list[int], str],
) -> None:
    loop, publisher = running
    await publisher.rounds(1)
    change(node_root)

    loop.request_rescan()
    await publisher.rounds(2)

    assert expected == published(cluster)
    assert [True, True] == publisher.wrote
    assert len(expected[0]) == sample(loop.metrics, "numatopo_exporter_gpus")
