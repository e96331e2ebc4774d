"""The exporter stays up on a machine whose firmware lies, and says what it ignored."""

from __future__ import annotations

import asyncio
from pathlib import Path

import kmock

from metric_samples import sample
from numatopo_exporter.daemon.loop import ExporterLoop
from numatopo_exporter.daemon.publishing import Publisher
from numatopo_exporter.daemon.serve import make_discovery_scan
from numatopo_exporter.discovery.discover import DiscoverOptions
from numatopo_kube.backoff import Backoff

from ..conftest import NodeClient
from ..discovery.sysfs.conftest import write_tree
from ..discovery.sysfs.test_real_world_quirks import NODE as NODE_DIR
from ..discovery.sysfs.test_real_world_quirks import machine
from .conftest import NODE

NTP = "numatopo.io/v1alpha1/numatopologies"


async def test_overlapping_numa_nodes_are_published_as_one_and_flagged_degraded(
    cluster: kmock.KubernetesEmulator, client: NodeClient, tmp_path: Path
) -> None:
    files, links = machine({0: "0-7", 1: "0-7"}, **{f"{NODE_DIR}/node1/distance": "20 10 30 30\n"})
    root = write_tree(tmp_path / "host", files, links)
    loop = ExporterLoop(
        scan=make_discovery_scan(DiscoverOptions(sysfs_root=root, use_nvml=False, node_name=NODE)),
        sink=Publisher(client, node_name=NODE, clock=lambda: 1_700_000_000.0),
        backoff=Backoff(0.01, 0.05),
    )
    task = asyncio.create_task(loop.run())
    try:
        for _ in range(250):
            await asyncio.sleep(0.02)
            if (NTP, None, NODE) in cluster.objects:
                status = dict(cluster.objects[NTP, None, NODE].raw).get("status") or {}
                if status.get("conditions"):
                    break
        alive = not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    obj = dict(cluster.objects[NTP, None, NODE].raw)
    degraded = {c["type"]: c for c in obj["status"]["conditions"]}["Degraded"]
    assert alive
    assert [{"id": 0, "cpus": "0-7"}] == [
        {"id": n["id"], "cpus": n["cpus"]} for n in obj["spec"]["numaNodes"]
    ]
    assert ("True", "IgnoredInput") == (degraded["status"], degraded["reason"])
    assert "claim the same CPUs 0-7" in degraded["message"]
    assert "node1/distance" in degraded["message"]
    assert 1 == sample(loop.metrics, "numatopo_exporter_scans_total", {"outcome": "ok"})
