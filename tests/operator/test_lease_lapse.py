"""A holder whose Lease renewal came late: it stops deciding at the renew deadline and
decides again once that renewal succeeds, judging what it saw meanwhile.

On a loaded machine the loop can be held past the renew deadline (at 1,000 nodes by the
start-up lists): the renewal then goes out late, succeeds, and the replica holds the
Lease throughout, but `Runtime.lease_fresh` was false for a while. A pod that passed by
then (the take-over's judging, a pod's event) must not be dropped: its event does not
come again. Here the late renewal is made exact: the renewal is held in the emulator,
and the renewal before it is dated a renew deadline back, as a held loop leaves it.
"""

from __future__ import annotations

import asyncio
import time

from numatopo_engine import annotations as keys

from .conftest import Env

OPERATOR_NAMESPACE = "numatopo-system"
LEASE = "numatopo"
NODE = "h100-a"
# Long enough that a renewal held by the test never runs into the step's own timeout
# or the deadline measured from its sending; the retry period sends it soon.
SLOW_LEASE = {
    "lease_duration_seconds": 20.0,
    "renew_deadline_seconds": 15.0,
    "retry_period_seconds": 0.2,
}


class HeldRenewals:
    """Lease PATCHes (renewals) answered only once released."""

    def __init__(self, env: Env) -> None:
        self.held = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()
        path = f"/apis/coordination.k8s.io/v1/namespaces/{OPERATOR_NAMESPACE}/leases/{LEASE}"
        env.cluster.api[f"patch {path}"] << self._react

    async def _react(self) -> None:  # None: the emulator then answers the PATCH itself
        self.held.set()
        await self.release.wait()

    def hold(self) -> None:
        self.held.clear()
        self.release.clear()


def lapse(runtime) -> None:
    """The last renewal as a loop held past the renew deadline leaves it: too old."""
    runtime.lease.renewed_at = time.monotonic() - SLOW_LEASE["renew_deadline_seconds"]


async def start_replica(env: Env):
    await env.cluster.create(
        f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "op-a", "namespace": OPERATOR_NAMESPACE},
            "spec": {"containers": [{"name": "operator", "image": "numatopo"}]},
        },
    )
    return await env.start_operator(
        lease_name=LEASE, pod_name="op-a", pod_namespace=OPERATOR_NAMESPACE, **SLOW_LEASE
    )


def judged(env: Env, *names: str):
    return lambda: all(keys.STATE in env.cluster.annotations(name) for name in names)


async def test_a_take_over_during_a_late_renewal_judges_its_pods_once_renewed(env: Env):
    """The first holder lists its pods while its renewal is late: it judges nothing
    then (fencing), and every listed pod once the renewal succeeded. Before, the
    take-over stopped at the first pod it found itself not deciding for, and nothing
    judged those pods again (the start-up stall at 1,000 and 2,000 nodes)."""
    cluster, wait = env.cluster, env.wait
    await cluster.create_numatopology(env.topology_object(NODE, env.h100))
    await cluster.create_node(NODE)
    await cluster.create_pod(env.pod("waiting", gpus=1))
    # An assignment that cannot be read is judged Invalid by the take-over alone: no
    # change of the node re-drives it, as it could a waiting pod.
    await cluster.create_pod(env.pod("unreadable", annotations={keys.ASSIGNMENT: "[]"}))
    listed = asyncio.Event()

    async def held_list() -> None:  # None: the emulator then answers the list itself
        await listed.wait()

    cluster.api["list v1/pods"] << held_list
    renewals = HeldRenewals(env)
    renewals.hold()

    a = await start_replica(env)
    await wait(a.runtime.active.is_set, what="A holds the Lease")
    await wait(renewals.held.is_set, what="A's first renewal is on its way")
    lapse(a.runtime)
    listed.set()
    await wait(a.runtime.ledger_current.is_set, what="A's take-over reached its pods")
    await asyncio.sleep(0.3)
    nothing_yet = {
        name: cluster.annotations(name).get(keys.STATE) for name in ("waiting", "unreadable")
    }
    renewals.release.set()
    await wait(judged(env, "waiting", "unreadable"), what="A judged the listed pods")

    assert {"waiting": None, "unreadable": None} == nothing_yet
    assert "Assigned" == cluster.annotations("waiting")[keys.STATE]
    assert "Invalid" == cluster.annotations("unreadable")[keys.STATE]


async def test_pods_seen_during_a_late_renewal_are_judged_once_renewed(env: Env):
    """A holder that decides already: pods that arrive while its renewal is late are
    deferred, and judged once it succeeded. Before, they stayed deferred until the
    next acquisition of the Lease, perhaps never."""
    cluster, wait = env.cluster, env.wait
    await cluster.create_numatopology(env.topology_object(NODE, env.h100))
    await cluster.create_node(NODE)
    renewals = HeldRenewals(env)
    a = await start_replica(env)
    await wait(lambda: a.runtime.deciding, what="A decides")

    renewals.hold()
    await wait(renewals.held.is_set, what="A's renewal is on its way")
    lapse(a.runtime)
    await cluster.create_pod(env.pod("late", gpus=1))
    await cluster.create_pod(env.pod("late-unreadable", annotations={keys.ASSIGNMENT: "[]"}))

    def deferred() -> bool:
        records = [a.runtime.pods.get(f"default/{name}") for name in ("late", "late-unreadable")]
        return all(record is not None and record.deferred is not None for record in records)

    await wait(deferred, what="A saw both pods while not deciding")
    renewals.release.set()
    await wait(judged(env, "late", "late-unreadable"), what="A judged both pods")

    assert "Assigned" == cluster.annotations("late")[keys.STATE]
    assert "Invalid" == cluster.annotations("late-unreadable")[keys.STATE]
