"""The writes a burst of decisions causes, with the real operator against the emulator:
a node's status written once per burst (bounded), not once per debounce period while
the burst goes on; and Events posted off the decision's path, so an Events API that
hangs holds up no answer, and a full queue of them is counted, not lost silently."""

from __future__ import annotations

import asyncio

from numatopo_kube import KubeClient
from numatopo_operator import status
from numatopo_operator.event_posts import EventPosts
from numatopo_operator.metrics import Metrics

from .conftest import EVENTS, events_api_hanging
from .test_extender_http import FRESH

STATUS_PATH = "/apis/numatopo.io/v1alpha1/numatopologies/h100-a/status"
DEBOUNCE = 0.1  # the test operator's status_debounce_seconds


async def test_a_burst_on_a_node_is_one_status_write_per_hold_not_per_period(env):
    """30 pods on one node over 1.5 s (15 debounce periods, each with decisions): the
    old writer patched the status in each of those periods; now the writes wait for the
    burst to end, at most `BURST_HOLD_PERIODS` periods, so there are a few, and the last
    one holds every pod."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object("h100-a", h100))
    running = await start_operator()
    await wait(running.runtime.indexed.is_set, what="operator listed everything")
    await asyncio.sleep(5 * DEBOUNCE)  # the start-up status write is out
    before = len(cluster.api[f"patch {STATUS_PATH}"])
    pods = 30
    started = asyncio.get_running_loop().time()

    for index in range(pods):
        await cluster.create_pod(pod(f"burst-{index}", cpu="1", memory="1Gi"))
        await asyncio.sleep(1.5 / pods)
    await wait(
        lambda: cluster.numatopology_status("h100-a").get("pods") == pods,
        what="the status counts every pod of the burst",
        timeout=(1 + status.BURST_HOLD_PERIODS) * DEBOUNCE + 5.0,
    )

    written = len(cluster.api[f"patch {STATUS_PATH}"]) - before
    lasted = asyncio.get_running_loop().time() - started
    # Bounded: the writes went on during the burst (at least one held write came out
    # before its end, besides the last); coalesced: one per hold of 6 periods (and the
    # first and the last), not one per period.
    holds = lasted / ((1 + status.BURST_HOLD_PERIODS) * DEBOUNCE)
    assert 2 <= written <= holds + 2, (written, lasted)


async def test_a_hanging_events_api_holds_up_no_bind_answer(env):
    """A Binding refused: the extender takes its assignment back and answers the
    scheduler, whose extender timeout is 10 s, at once; the Event about it waits."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(FRESH, h100))
    await cluster.create_node(FRESH)
    running = await start_operator()
    await wait(running.runtime.indexed.is_set, what="operator listed everything")
    with events_api_hanging(cluster):
        cluster.emulate_binding(fail=True)
        await cluster.create_pod(pod("job", node=None, gpus=4))
        async with asyncio.timeout(5.0):
            status_code, answer = await running.post("/bind", cluster.binding_args("job", FRESH))
        posted_while_hanging = len(cluster.api[EVENTS])

    assert (200, True) == (status_code, "pod is already bound" in answer["Error"])
    assert posted_while_hanging >= 1  # the Event went out meanwhile, and waited alone
    await wait(lambda: bool(cluster.events_for("job")), what="the Event posted once released")


async def test_events_past_a_full_queue_are_counted_as_dropped(cluster, wait):
    """Only `size` Events wait; the next ones are dropped and counted (the metric an
    operator alerts on), and so are the ones not posted yet when the operator stops."""
    metrics = Metrics()
    posts = EventPosts(metrics, size=3)
    about = {"namespace": "default", "name": "job", "uid": ""}

    def dropped() -> float | None:
        return metrics.registry.get_sample_value("numatopo_events_dropped_total")

    for index in range(5):
        posts.post(about, warning=False, reason="NumatopoAssigned", message=str(index))
    full = dropped()
    with events_api_hanging(cluster):
        async with KubeClient.connect(str(cluster.api.url), lean_writes=True) as kube:
            posting = asyncio.create_task(posts.run(kube))
            await wait(lambda: len(cluster.api[EVENTS]) == 3, what="the 3 queued Events sent")
            posting.cancel()  # the operator stops while the API has not answered them
            await asyncio.gather(posting, return_exceptions=True)

    assert (2.0, 5.0) == (full, dropped())
