"""The retry queue and the loop that drains it: a pod queued for another look is judged
again, whatever happens to the pods judged before it in the same tick."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from numatopo_operator import assigning
from numatopo_operator.retrying import RetryQueue


def test_pods_popped_and_put_back_are_due_again_with_their_attempts():
    queue: RetryQueue[str] = RetryQueue(base=1.0, cap=8.0)
    queue.schedule("a", "pod-a", 0.0)
    queue.schedule("a", "pod-a", 1.0)  # second attempt: due at 3
    queue.schedule("b", "pod-b", 0.0)
    assert [key for key, _ in queue.pop_due(10.0)] == ["b", "a"]
    assert queue.next_due() is None  # popped and never told: lost without put_back
    queue.put_back(["a", "b", "gone"])
    assert sorted(key for key, _ in queue.pop_due(10.0)) == ["a", "b"]
    queue.put_back(["a"])
    assert queue.schedule("a", "pod-a", 10.0) == 4.0  # the third attempt's pause


class _Count:
    def __init__(self) -> None:
        self.value = 0

    def inc(self) -> None:
        self.value += 1


async def test_a_late_renewal_in_the_middle_of_a_tick_leaves_the_rest_due(monkeypatch):
    """The first pod's write is fenced (the renewal is late) and the replica stops
    deciding: the pods popped with it are judged once it decides again. Before, every
    pod after the first one the loop stopped at was never judged again (100 of a
    300-pod burst at 1,000 nodes sat in the queue for good). The runtime is a stand-in
    holding only what the loop reads; `settle` is replaced by one that records."""
    queue: RetryQueue[str] = RetryQueue(base=0.01, cap=0.01)
    runtime: Any = SimpleNamespace(
        retries=queue, deciding=True, metrics=SimpleNamespace(retries=_Count())
    )
    judged: list[str] = []

    async def settle(_runtime: Any, pod: str) -> None:
        judged.append(pod)
        if len(judged) == 1:
            runtime.deciding = False  # the Lease renewal is late from here
            queue.schedule(pod, pod, time.monotonic())  # as a fenced write leaves it
        else:
            queue.discard(pod)

    monkeypatch.setattr(assigning, "settle", settle)
    now = time.monotonic()
    for name in ("a", "b", "c", "d"):
        queue.schedule(name, name, now)
    loop_task = asyncio.create_task(assigning.run_retries(runtime))
    try:
        async with asyncio.timeout(5):
            while not judged:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)
            assert judged == ["a"]  # nothing is judged while not deciding
            runtime.deciding = True
            while set(judged) != {"a", "b", "c", "d"} or len(queue):
                await asyncio.sleep(0.01)
    finally:
        loop_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loop_task
    assert len(judged) == 5  # a twice, each other pod once


async def test_a_tick_that_fails_leaves_the_pods_it_did_not_judge_due(monkeypatch):
    """An error outside `settle` (here: the retries metric) ends the loop, and the
    supervisor runs it again: the pods popped in that tick and not judged are judged then.
    Before, they stayed queued but were never due again."""
    queue: RetryQueue[str] = RetryQueue(base=0.01, cap=0.01)
    count = _Count()
    failures = iter([RuntimeError("metrics backend broke")])

    class _Flaky:
        def inc(self) -> None:
            if count.value == 1 and (failure := next(failures, None)):
                raise failure
            count.inc()

    runtime: Any = SimpleNamespace(
        retries=queue, deciding=True, metrics=SimpleNamespace(retries=_Flaky())
    )
    judged: list[str] = []

    async def settle(_runtime: Any, pod: str) -> None:
        judged.append(pod)
        queue.discard(pod)

    monkeypatch.setattr(assigning, "settle", settle)
    now = time.monotonic()
    for name in ("a", "b", "c"):
        queue.schedule(name, name, now)
    with pytest.raises(RuntimeError):
        await assigning.run_retries(runtime)
    assert judged == ["a"]
    loop_task = asyncio.create_task(assigning.run_retries(runtime))  # the supervisor's rerun
    try:
        async with asyncio.timeout(5):
            while len(queue):
                await asyncio.sleep(0.01)
    finally:
        loop_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loop_task
    assert judged == ["a", "b", "c"]
