"""The one-GPU-pod-in-flight gate of steered nodes: waits, frees, and never blocks
forever."""

from __future__ import annotations

import asyncio

from numatopo_operator.gpu_admissions import GpuAdmissions


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_one_pod_per_node_and_its_own_retake() -> None:
    gate = GpuAdmissions(timeout_seconds=10, clock=Clock())
    assert gate.take("n1", "a")
    assert gate.take("n1", "a")  # the same pod judged again keeps it
    assert not gate.take("n1", "b")
    assert gate.take("n2", "b")  # other nodes are independent
    gate.admitted("a")
    assert gate.take("n1", "b")
    assert (gate.holder("n1"), gate.holder("n2")) == ("b", "b")


def test_a_slot_expires() -> None:
    clock = Clock()
    gate = GpuAdmissions(timeout_seconds=5, clock=clock)
    assert gate.take("n", "a")
    clock.now = 5.0
    assert gate.holder("n") is None
    assert gate.take("n", "b")


async def test_a_waiter_goes_on_when_the_first_is_admitted() -> None:
    gate = GpuAdmissions(timeout_seconds=30)
    assert gate.take("n", "a")
    waiter = asyncio.create_task(gate.wait_and_take("n", "b"))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    gate.admitted("a")
    async with asyncio.timeout(1):
        assert await waiter is True
    assert gate.holder("n") == "b"


async def test_a_waiter_goes_on_when_the_first_never_is() -> None:
    gate = GpuAdmissions(timeout_seconds=0.2)
    assert gate.take("n", "a")
    started = asyncio.get_running_loop().time()
    assert await gate.wait_and_take("n", "b") is False
    assert 0.1 < asyncio.get_running_loop().time() - started < 1.0
    assert gate.holder("n") == "b"
