"""A replica that takes over writes only the Numatopology statuses that are wrong: it
compares what its ledger says with what each object holds, as watched, instead of
rewriting every node it rebuilt (a storm of PATCHes at the size of a real cluster)."""

from __future__ import annotations

import asyncio

from .test_leadership_lease import OPERATOR_NAMESPACE, replica

NODES = [f"h100-{n}" for n in range(6)]
STATUS_PATH = "/apis/numatopo.io/v1alpha1/numatopologies/{}/status"


def status_patches(cluster) -> dict[str, int]:
    """PATCH requests to each node's status so far."""
    return {node: len(cluster.api[f"patch {STATUS_PATH.format(node)}"]) for node in NODES}


async def test_a_new_holder_writes_only_the_statuses_that_changed(env):
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    for name in ("op-a", "op-b"):
        await cluster.create(
            f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods",
            {"metadata": {"name": name, "namespace": OPERATOR_NAMESPACE}, "spec": {}},
        )
    for node in NODES:
        await cluster.create_numatopology(topology_object(node, h100))
        await cluster.create_pod(pod(f"on-{node}", node=node, cpu="2"))
    a = await start_operator(**replica("op-a"))
    await wait(
        lambda: all(cluster.numatopology_status(node).get("pods") == 1 for node in NODES),
        what="A writes every node's status",
    )
    b = await start_operator(**replica("op-b"))
    await wait(lambda: all(b.runtime.ledger.pods_on(node) == 1 for node in NODES), what="B watches")
    await asyncio.sleep(1.0)  # and has seen A's status writes, which followed those pods
    before = status_patches(cluster)

    await a.stop()
    await wait(lambda: b.runtime.deciding, what="B takes over")
    await cluster.create_pod(pod("new", node=NODES[0], cpu="2"))
    await wait(
        lambda: cluster.numatopology_status(NODES[0]).get("pods") == 2,
        what="B writes the status of the node that changed",
    )
    # Many debounce periods (0.1 s): time for any other write to go out.
    await asyncio.sleep(2.0)
    after = status_patches(cluster)

    assert {node: int(node == NODES[0]) for node in NODES} == {
        node: after[node] - before[node] for node in NODES
    }


async def test_a_status_someone_else_overwrote_is_written_again(env):
    """A write the holder did not make (a fenced predecessor's late one) is seen on the
    watch, differs from the ledger, and is corrected."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    node = NODES[0]
    await cluster.create_numatopology(topology_object(node, h100))
    await cluster.create_pod(pod("one", node=node, cpu="2"))
    await start_operator()
    await wait(lambda: cluster.numatopology_status(node).get("pods") == 1, what="written")

    async with cluster.api.patch(
        STATUS_PATH.format(node), json={"status": {"pods": 7, "freeCPUs": 0}}
    ) as response:
        assert response.status < 300

    await wait(
        lambda: (
            (1, 204)
            == tuple(cluster.numatopology_status(node).get(k) for k in ("pods", "freeCPUs"))
        ),
        what="the holder writes the status again",
    )
