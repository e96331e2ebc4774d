"""A background task whose loop raises what nobody expected (a bug, an odd object) is
run again, logged and counted, never left dead while the operator serves on with what
it kept current going stale (docs/operations.md, "Background tasks"). The real operator
over HTTP against kmock's emulator, each loop made to fail once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from numatopo_engine import annotations as keys
from numatopo_kube import KubeClient, supervise
from numatopo_kube.backoff import Backoff
from numatopo_operator import pod_feed, status
from numatopo_operator.pod_records import PodRecords
from numatopo_operator.runtime import Runtime

NODE = "h100-a"
OTHER_NODE = "h100-b"


class InjectedError(RuntimeError):
    """The unexpected error: no API error, nothing a loop catches by name."""


def failing_first(times: int, original: Callable[..., Any], calls: list[int]) -> Callable[..., Any]:
    """`original`, raising `InjectedError` on its first `times` calls (counted in `calls`)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) <= times:
            raise InjectedError(f"injected failure {len(calls)}")
        return original(*args, **kwargs)

    return call


def restarts(runtime: Runtime, task: str) -> float:
    found = runtime.metrics.registry.get_sample_value(
        "numatopo_task_restarts_total", {"task": task}
    )
    return 0.0 if found is None else found


def state(cluster: Any, name: str) -> str | None:
    return cluster.annotations(name).get(keys.STATE)


async def test_the_status_writer_writes_on_after_a_failure(env, monkeypatch, caplog):
    """Its first pass raises on the first node: the next node's status is written all the
    same, and the first node's with its next change (the writer's task used to end:
    neither was ever written)."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    calls: list[int] = []
    monkeypatch.setattr(status, "free_status", failing_first(1, status.free_status, calls))
    for node in (NODE, OTHER_NODE):
        await cluster.create_numatopology(topology_object(node, h100))
    caplog.set_level(logging.ERROR, logger="numatopo_operator.background")
    running = await start_operator()
    await wait(lambda: calls, what="the status writer's first pass")

    await wait(
        lambda: "pods" in cluster.numatopology_status(OTHER_NODE),
        what="the other node's status written",
    )
    await cluster.create_pod(pod("job", gpus=2))
    await wait(lambda: state(cluster, "job") == "Assigned", what="job assigned")
    await wait(
        lambda: cluster.numatopology_status(NODE).get("pods") == 1,
        what="the first node's status written with the pod",
    )

    assert 6 == cluster.numatopology_status(NODE)["freeGPUs"]
    assert 1 == restarts(running.runtime, "status writer")
    assert any(
        "background task 'status writer' failed" in record.getMessage() and record.exc_info
        for record in caplog.records
    )


async def test_the_event_posters_post_on_after_each_failed(env, monkeypatch):
    """Every poster fails once (four Events): the Event of a later pod is still posted
    (with each poster's task ended, none was)."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    calls: list[int] = []
    failing = failing_first(4, KubeClient.post_event, calls)

    async def post_event(self: KubeClient, *args: Any, **kwargs: Any) -> bool:
        return bool(await failing(self, *args, **kwargs))

    monkeypatch.setattr(KubeClient, "post_event", post_event)
    await cluster.create_numatopology(topology_object(NODE, h100))
    running = await start_operator()
    for number in range(4):
        await cluster.create_pod(pod(f"early-{number}", gpus=1, cpu="1"))
    await wait(lambda: len(calls) >= 4, what="four Events posted and failed")

    await cluster.create_pod(pod("late", gpus=1, cpu="1"))
    await wait(lambda: cluster.events_for("late"), what="the late pod's Event")

    assert "NumatopoAssigned" == cluster.events_for("late")[0][0]
    assert 4 == restarts(running.runtime, "events poster")


async def test_the_pod_feed_lists_again_after_a_failure_and_counts_it(env, monkeypatch):
    """A watch event whose handling raises ends the feed's watch: it lists again, the pod
    gets its assignment, and the failure is counted."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(NODE, h100))
    running = await start_operator()
    await wait(lambda: running.runtime.deciding, what="the operator decides")
    calls: list[int] = []
    original = pod_feed.slim_pod

    def slim_pod(raw: dict[str, Any]) -> dict[str, Any]:
        if raw["metadata"]["name"] == "odd" and not calls:
            calls.append(1)
            raise InjectedError("a pod nobody foresaw")
        return original(raw)

    monkeypatch.setattr(pod_feed, "slim_pod", slim_pod)

    await cluster.create_pod(pod("odd", gpus=1))
    await wait(lambda: state(cluster, "odd") == "Assigned", what="odd assigned after a relist")

    assert 1 == restarts(running.runtime, "pod feed in *")


async def test_a_take_over_that_fails_is_made_again(env, monkeypatch):
    """The first holder's take-over raises before the ledger is current: it is made
    again, from a list, and the replica decides (it held the Lease and never did)."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    calls: list[int] = []
    monkeypatch.setattr(PodRecords, "annotated", failing_first(1, PodRecords.annotated, calls))
    await cluster.create_numatopology(topology_object(NODE, h100))
    await cluster.create_pod(pod("job", gpus=1))
    running = await start_operator()

    await wait(lambda: state(cluster, "job") == "Assigned", what="job assigned")

    assert (1, 1.0) == (len(calls), restarts(running.runtime, "take-over"))
    assert (200, "ok: active\n") == await running.get("/readyz")


class RecordedBackoff(Backoff):
    def __init__(self) -> None:
        super().__init__(0.01, 0.04)
        self.given: list[float] = []

    def next_delay(self) -> float:
        self.given.append(super().next_delay())
        return self.given[-1]


async def test_keep_running_backs_off_restarts_and_ends_with_its_loop(monkeypatch):
    """Each failure waits longer; a loop that ran steadily before it failed starts from
    the shortest wait again; a loop that returns is done."""
    monkeypatch.setattr(supervise, "STEADY_SECONDS", 0.2)
    runs: list[str] = []
    crashes: list[int] = []
    backoff = RecordedBackoff()

    async def loop() -> None:
        runs.append("run")
        if len(runs) == 4:
            await asyncio.sleep(0.25)  # steady for a while, then failing again
        if len(runs) < 5:
            raise InjectedError(f"failure {len(runs)}")

    async with asyncio.timeout(5):
        await supervise.keep_running(
            "test loop", loop, crashed=lambda: crashes.append(1), backoff=backoff
        )

    assert (5, 4) == (len(runs), len(crashes))
    assert [0.01, 0.02, 0.04, 0.01] == backoff.given


async def test_keep_running_ends_when_cancelled():
    started = asyncio.Event()

    async def loop() -> None:
        started.set()
        await asyncio.sleep(3600)

    task = asyncio.create_task(supervise.keep_running("test loop", loop, crashed=lambda: None))
    await started.wait()
    task.cancel()
    async with asyncio.timeout(5):
        await asyncio.gather(task, return_exceptions=True)

    assert task.cancelled()
