"""Stopping the feeds' tasks (`list_watch.stop_all`, `KeyedWorkers.stop`).

When kopf stops it cancels every task begun since it started (the feeds' watches, the
pod workers) and waits for them. A feed that stopped its tasks meanwhile cancelled them
a second time, inside the cleanup of the first: an HTTP request's pool was closing its
expired connections one by one then, and those after the interrupted one stayed open
(found unclosed by the collector in a later test).
"""

from __future__ import annotations

import asyncio
import contextlib

from numatopo_operator import list_watch


async def test_a_worker_cleaning_up_after_a_cancel_is_not_cancelled_again() -> None:
    workers = list_watch.KeyedWorkers()
    started, release = asyncio.Event(), asyncio.Event()
    cleaned: list[str] = []

    async def request() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        finally:
            # A cleanup that waits, as closing a pool's connections does.
            try:
                await release.wait()
                cleaned.append("finished")
            except asyncio.CancelledError:
                cleaned.append("interrupted")
                raise

    workers.run("pod default/a", request)
    await started.wait()
    (worker,) = workers.workers.values()
    worker.cancel()  # as kopf does when it stops
    await asyncio.sleep(0)
    stopping = asyncio.create_task(workers.stop())
    await asyncio.sleep(0)
    release.set()
    async with asyncio.timeout(5):
        await stopping

    assert (cleaned, worker.cancelled()) == (["finished"], True)


async def test_stop_all_cancels_and_waits_for_tasks_nobody_cancelled() -> None:
    ended: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append(name)

    tasks = [asyncio.create_task(forever(name)) for name in ("a", "b")]
    await asyncio.sleep(0)
    async with asyncio.timeout(5):
        await list_watch.stop_all(tasks)

    assert (sorted(ended), [task.cancelled() for task in tasks]) == (["a", "b"], [True, True])


async def test_a_task_that_goes_on_after_its_cancel_is_ended_past_the_grace(monkeypatch):
    """A task that absorbs its first cancel must not hold the operator's exit for good
    (seen: 'the operator did not stop within 15 s'): past the grace it is cancelled
    again."""
    monkeypatch.setattr(list_watch, "STOP_GRACE_SECONDS", 0.1)
    ended = asyncio.Event()

    async def stubborn() -> None:
        with contextlib.suppress(asyncio.CancelledError):  # absorbed: goes on
            await asyncio.sleep(60)
        try:
            await asyncio.sleep(60)
        finally:
            ended.set()

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    async with asyncio.timeout(5):
        await list_watch.stop_all([task])
    assert ended.is_set()
    assert task.cancelled()
