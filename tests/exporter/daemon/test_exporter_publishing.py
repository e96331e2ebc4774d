"""The exporter against the API emulator over HTTP: publish, keep, repair, recover."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json

import kmock
import pytest

from metric_samples import sample
from numatopo_engine.model import Gpu, NumaNode, NumatopologySpec
from numatopo_exporter.daemon.loop import ExporterLoop
from numatopo_exporter.daemon.publishing import (
    HASH_ANNOTATION,
    PrintingSink,
    Publisher,
    plan_exported_condition,
    plan_status,
    spec_hash,
)
from numatopo_exporter.metrics import ExporterMetrics
from numatopo_kube.backoff import Backoff

from ..conftest import NodeClient, numatopology_path
from .conftest import NODE, NODE_UID, Outage, writes

NTP = "numatopo.io/v1alpha1/numatopologies"


def two_gpu_node() -> NumatopologySpec:
    return NumatopologySpec(
        numa_nodes=[NumaNode(id=0, cpus="0-7", memory_bytes=1 << 34)],
        gpus=[
            Gpu(index=i, uuid=f"GPU-{i}", pci_bus_id=f"0000:1{i}:00.0", numa=0) for i in range(2)
        ],
    )


class Scanner:
    """A fixed scan result (hot-unplugs on a real tree: test_exporter_real_tree.py)."""

    def __init__(self) -> None:
        self.spec = two_gpu_node()

    def __call__(self) -> NumatopologySpec:
        return self.spec


def make_loop(client: NodeClient, scanner: Scanner) -> ExporterLoop:
    publisher = Publisher(client, node_name=NODE, clock=lambda: 1_700_000_000.0)
    return ExporterLoop(
        scan=scanner, sink=publisher, metrics=ExporterMetrics(), backoff=Backoff(0.01, 0.05)
    )


def stored(cluster: kmock.KubernetesEmulator) -> dict:
    return dict(cluster.objects[NTP, None, NODE].raw)


async def test_first_publish_creates_the_object_owned_by_the_node(
    cluster: kmock.KubernetesEmulator, client: NodeClient
) -> None:
    loop = make_loop(client, Scanner())

    ok = await loop.step()

    obj = stored(cluster)
    assert ok
    assert two_gpu_node().to_wire() == obj["spec"]
    assert [{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE_UID}] == obj["metadata"][
        "ownerReferences"
    ]
    assert spec_hash(two_gpu_node()) == obj["metadata"]["annotations"][HASH_ANNOTATION]
    assert [("Exported", "True"), ("Degraded", "False")] == [
        (c["type"], c["status"]) for c in obj["status"]["conditions"]
    ]
    assert "2023-11-14T22:13:20Z" == obj["status"]["heartbeat"]


async def test_a_republish_with_nothing_new_writes_nothing(
    cluster: kmock.KubernetesEmulator, client: NodeClient
) -> None:
    """What the watch triggers after our own write (or the operator's) must not write
    again, or the exporter would loop on its own events."""
    loop = make_loop(client, Scanner())
    await loop.step()
    before = writes(cluster)

    loop.request_republish()
    await loop.step()
    await loop.step()

    assert before == writes(cluster)


async def test_every_rescan_beats_the_heartbeat_and_only_that(
    cluster: kmock.KubernetesEmulator, client: NodeClient
) -> None:
    now = [1_700_000_000.0]
    publisher = Publisher(client, node_name=NODE, clock=lambda: now[0])
    loop = ExporterLoop(scan=Scanner(), sink=publisher, clock=lambda: now[0])
    await loop.step()
    first = stored(cluster)
    before = writes(cluster)

    now[0] += 300
    loop.request_rescan()
    await loop.step()

    second = stored(cluster)
    assert ("2023-11-14T22:13:20Z", "2023-11-14T22:18:20Z") == (
        first["status"]["heartbeat"],
        second["status"]["heartbeat"],
    )
    assert (before + 1, first["spec"], first["status"]["conditions"]) == (
        writes(cluster),
        second["spec"],
        second["status"]["conditions"],
    )
    assert 2 == sample(loop.metrics, "numatopo_exporter_scans_total", {"outcome": "ok"})


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param("delete", id="deleted-object-is-recreated"),
        pytest.param("edit", id="edited-spec-is-restored"),
    ],
)
async def test_repairs_what_someone_else_changed(
    cluster: kmock.KubernetesEmulator, client: NodeClient, damage: str
) -> None:
    loop = make_loop(client, Scanner())
    await loop.step()
    path = numatopology_path(NODE)
    if damage == "delete":
        await client.request("DELETE", path)
    else:
        await client.patch(path, {"spec": {"gpus": []}})

    await loop.step()

    assert two_gpu_node().to_wire() == stored(cluster)["spec"]


async def test_recovers_after_the_api_fails_for_a_while(
    cluster: kmock.KubernetesEmulator, client: NodeClient
) -> None:
    """500s in a row, more than one call's retries (numatopo_kube) absorb: the loop
    backs off, keeps going, and publishes in the end."""
    cluster[Outage(12)] << 500
    loop = make_loop(client, Scanner())

    task = asyncio.create_task(loop.run())
    try:
        for _ in range(200):
            await asyncio.sleep(0.02)
            with contextlib.suppress(KeyError):
                if "status" in stored(cluster):
                    break
        alive = not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    assert alive
    assert two_gpu_node().to_wire() == stored(cluster)["spec"]
    assert 1 <= sample(loop.metrics, "numatopo_exporter_publish_errors_total")


async def test_no_publish_prints_each_distinct_spec_once() -> None:
    out = io.StringIO()
    sink = PrintingSink(node_name=NODE, out=out)

    first = await sink.publish(two_gpu_node(), scanned_at=0)
    again = await sink.publish(two_gpu_node(), scanned_at=1)

    assert (True, False) == (first, again)
    assert NODE == json.loads(out.getvalue())["metadata"]["name"]


@pytest.mark.parametrize(
    ("old", "expected_changed"),
    [
        pytest.param([], True, id="no-condition-yet"),
        pytest.param(
            [{"type": "Exported", "status": "True", "message": "spec abc published"}],
            False,
            id="same-spec-no-write",
        ),
        pytest.param(
            [{"type": "Exported", "status": "True", "message": "spec old published"}],
            True,
            id="new-spec",
        ),
    ],
)
def test_plan_exported_condition_only_changes_for_a_new_spec(
    old: list[dict], expected_changed: bool
) -> None:
    actual = plan_exported_condition(old, digest="abc", scanned_at=0, now=0)

    assert expected_changed == (actual is not None)


def test_a_new_spec_keeps_the_degraded_transition_time() -> None:
    degraded = {
        "type": "Degraded",
        "status": "True",
        "reason": "IgnoredInput",
        "message": "published what could be read; ignored: x",
        "lastTransitionTime": "2020-01-01T00:00:00Z",
    }
    stored_status = {"conditions": [degraded], "heartbeat": "2020-01-01T00:00:00Z"}

    planned = plan_status(
        stored_status, digest="abc", scanned_at=0, ignored=["x"], heartbeat=None, now=99
    )

    assert planned is not None
    assert [degraded] == [c for c in planned["conditions"] if c["type"] == "Degraded"]
    assert "2020-01-01T00:00:00Z" == planned["heartbeat"]
