"""kopf hands every object its own shallow copy of the memo (`Runtime`), made when it first
sees the object: whatever leadership changes later must reach those copies too, or a
pod first seen before (or a while after) a takeover is never decided again."""

from __future__ import annotations

import asyncio
import dataclasses

import kopf
import pytest
from kopf._core.reactor.inventory import ResourceMemories

from numatopo_engine import annotations as keys
from numatopo_operator import leadership
from numatopo_operator.errors import KubeError
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings

from .test_leadership_lease import FAST_LEASE, LEASE, OPERATOR_NAMESPACE, replica

NODE = "h100-a"


async def kopf_copy(runtime: Runtime, name: str) -> Runtime:
    """The memo kopf's own inventory gives a pod it sees for the first time."""
    raw = {"metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}"}}
    memo = await ResourceMemories().recall_memo(raw, memobase=runtime)  # type: ignore[arg-type]
    assert isinstance(memo, Runtime)
    assert memo is not runtime
    return memo


async def unreachable(*args: object, **kwargs: object) -> dict:
    raise KubeError(0, "ClientConnectorError", "the API server is unreachable")


async def test_every_memo_field_stays_shared_with_copies_made_before_a_takeover(cluster):
    """A copy made while standing by sees the Lease taken, renewed and lost, field by field."""
    settings = OperatorSettings(lease_name=LEASE, lease_namespace=OPERATOR_NAMESPACE, **FAST_LEASE)
    runtime = Runtime(settings, connection=kopf.ConnectionInfo(server=str(cluster.api.url)))
    await runtime.kube.reconnect(str(cluster.api.url))
    before = await kopf_copy(runtime, "seen-while-standing-by")
    runtime.indexed.set()  # as kopf's first handler call would (no kopf here)
    runtime.pods_listed.set()  # as the pod feed's first list would (no feed here)
    elector = leadership.Elector(runtime, identity="op-a_0001", label=None)
    electing = asyncio.create_task(elector.run())
    try:
        async with asyncio.timeout(10):
            while not runtime.ledger_current.is_set():
                await asyncio.sleep(0.02)
        # Several renewals later: a copy of the first renewal's time would be stale by now.
        await asyncio.sleep(3 * settings.renew_deadline_seconds)
        after = await kopf_copy(runtime, "seen-after-taking-over")
        fresh = (before.lease_fresh(), before.deciding, after.lease_fresh(), after.deciding)
        diverged = [
            field.name
            for field in dataclasses.fields(Runtime)
            if getattr(before, field.name) is not getattr(runtime, field.name)
            or getattr(after, field.name) is not getattr(runtime, field.name)
        ]
        # The API server unreachable: the holder cannot renew and stops deciding.
        runtime.kube.patch_lease = unreachable  # type: ignore[method-assign]
        runtime.kube.get_lease = unreachable  # type: ignore[method-assign]
        async with asyncio.timeout(10):
            while runtime.active.is_set():
                await asyncio.sleep(0.02)
        fresh_after_loss = (before.lease_fresh(), after.lease_fresh())
    finally:
        electing.cancel()
        await asyncio.gather(electing, return_exceptions=True)
        await runtime.kube.close()

    assert (True, True, True, True) == fresh
    assert [] == diverged
    assert (False, False) == fresh_after_loss


def test_no_field_of_the_memo_can_be_rebound():
    """Rebinding a field would leave kopf's earlier copies behind: it fails at once."""
    runtime = Runtime(OperatorSettings())
    refused = []
    for field in dataclasses.fields(Runtime):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(runtime, field.name, getattr(runtime, field.name))
        refused.append(field.name)

    assert len(dataclasses.fields(Runtime)) == len(refused)


async def test_pods_changed_well_after_a_takeover_are_decided(env):
    """A pod the new holder first saw while standing by, and one it first saw right after
    taking over, both changed several renew deadlines later: both are decided."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    for name in ("op-a", "op-b"):
        await cluster.create(
            f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods",
            {"metadata": {"name": name, "namespace": OPERATOR_NAMESPACE}, "spec": {}},
        )
    await cluster.create_numatopology(topology_object(NODE, h100))
    a = await start_operator(**replica("op-a"))
    await wait(lambda: a.runtime.deciding, what="A decides")
    b = await start_operator(**replica("op-b"))
    await cluster.create_pod(pod("early", policy=None, cpu="2"))
    await cluster.create_pod(pod("anchor", cpu="2"))
    # B watched `anchor` decided, so it has long seen `early` (created before it).
    await wait(lambda: b.runtime.ledger.node_of("default/anchor") == NODE, what="B sees anchor")

    await a.stop()
    await wait(lambda: b.runtime.deciding, what="B takes over")
    await cluster.create_pod(pod("late", policy=None, cpu="2"))
    await asyncio.sleep(4 * FAST_LEASE["renew_deadline_seconds"])
    policy = {"metadata": {"annotations": {keys.POLICY: "single-numa-node"}}}
    for name in ("early", "late"):
        await cluster.patch_pod(name, policy)
    await wait(
        lambda: all(
            cluster.annotations(name).get(keys.STATE) == "Assigned" for name in ("early", "late")
        ),
        what="both pods changed after the takeover are decided",
    )

    assert b.runtime.deciding
