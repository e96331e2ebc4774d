"""Which replica decides: the holder of a coordination.k8s.io Lease; how its pod label
follows, what a standby answers, and that a new holder books around its predecessor."""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict

import pytest

from numatopo_engine import annotations as keys
from numatopo_engine.annotations import Assignment
from numatopo_operator import leadership
from numatopo_operator.errors import KubeError, NotActiveError
from numatopo_operator.health import readiness
from numatopo_operator.leadership import ACTIVE_LABEL, label_patch, pod_of_identity
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings

NODE = "h100-a"
NOT_ACTIVE = (
    "this numatopo operator replica is not the active one (a handover is in progress); "
    "the scheduler retries"
)


def test_identity_names_the_pod_to_unlabel():
    """The next holder finds the previous holder's pod in its Lease identity."""
    identity = leadership.lease_identity("numatopo-operator-7d9f-abcde")

    assert "numatopo-operator-7d9f-abcde" == pod_of_identity(identity)
    assert identity != leadership.lease_identity("numatopo-operator-7d9f-abcde")


def test_a_holder_that_cannot_renew_stops_writing_at_the_renew_deadline(monkeypatch):
    """Fencing: writes stop `renew_deadline` after the last renewal was sent, a full
    `lease_duration - renew_deadline` before a standby may take the Lease."""
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    runtime = Runtime(OperatorSettings(lease_name="numatopo"))
    runtime.active.set()
    runtime.lease.renewed_at = 100.0
    writable = []
    for now in (100.0, 102.9, 103.0, 104.0):
        clock[0] = now
        try:
            runtime.check_may_write()
        except NotActiveError:
            writable.append(False)
        else:
            writable.append(True)

    assert [True, True, False, False] == writable


async def test_the_election_loop_stops_whenever_it_is_cancelled():
    """Shutdown cancels the loop at any moment, also as a failing Lease call returns.

    `asyncio.wait_for` on Python 3.11 swallows a cancellation that arrives as the
    awaited call finishes: with an API that fails at once the loop then ran on after
    shutdown and the replica never stopped (CI: "the operator did not stop within 15 s").
    """
    runtime = Runtime(OperatorSettings(lease_name="numatopo", retry_period_seconds=0.001))
    runtime.kube.get_lease = _unreachable  # type: ignore[method-assign]
    runtime.kube.patch_lease = _unreachable  # type: ignore[method-assign]
    still_running = 0
    for moment in range(200):
        elector = leadership.Elector(runtime, identity="a_1", label=None)
        task = asyncio.create_task(elector.run())
        for _ in range(moment % 9):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=1)
        if not done:
            still_running += 1
            while not task.done():  # do not leave it running past this test
                task.cancel()
                await asyncio.sleep(0)

    assert 0 == still_running


@pytest.mark.parametrize(
    ("active", "labelled", "expected"),
    [
        pytest.param(True, None, {ACTIVE_LABEL: "true"}, id="active-at-start-labels"),
        pytest.param(False, None, {ACTIVE_LABEL: None}, id="standby-at-start-clears-a-leftover"),
        pytest.param(True, False, {ACTIVE_LABEL: "true"}, id="taking-over-labels"),
        pytest.param(False, True, {ACTIVE_LABEL: None}, id="standing-down-unlabels"),
        pytest.param(True, True, None, id="still-active-sends-nothing"),
        pytest.param(False, False, None, id="still-standby-sends-nothing"),
    ],
)
def test_label_patch(active, labelled, expected):
    """The pod label follows leadership, and is rewritten whenever what it says is unknown."""
    assert expected == label_patch(active=active, labelled=labelled)


def runtime_in(role_known: bool, active: bool, indexed: bool, current: bool = True) -> Runtime:
    runtime = Runtime(OperatorSettings())
    events = (
        (runtime.role_known, role_known),
        (runtime.active, active),
        (runtime.indexed, indexed),
        (runtime.ledger_current, current),
    )
    for event, on in events:
        if on:
            event.set()
    return runtime


@pytest.mark.parametrize(
    ("role_known", "active", "indexed", "current", "expected"),
    [
        pytest.param(False, False, False, False, False, id="role-unknown-is-not-ready"),
        pytest.param(True, False, False, False, True, id="standby-is-ready-without-a-cache"),
        pytest.param(True, True, False, False, False, id="active-still-listing-is-not-ready"),
        pytest.param(
            True, True, True, False, False, id="active-rebuilding-its-ledger-is-not-ready"
        ),
        pytest.param(True, True, True, True, True, id="active-with-its-ledger-is-ready"),
    ],
)
def test_readiness(role_known, active, indexed, current, expected):
    """Every replica turns Ready (so rollouts and disruption budgets progress), the active
    one only with a complete ledger rebuilt since it became active."""
    ready, _ = readiness(runtime_in(role_known, active, indexed, current))

    assert expected == ready


# -- two replicas against the emulated API -------------------------------------------------

OPERATOR_NAMESPACE = "numatopo-system"
LEASE = "numatopo"
# Short durations keep the test quick; their ratios are the defaults' (4 s / 3 s / 1 s).
FAST_LEASE = {
    "lease_duration_seconds": 1.2,
    "renew_deadline_seconds": 0.9,
    "retry_period_seconds": 0.1,
}


def operator_pod(name: str, labels: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": OPERATOR_NAMESPACE, "labels": labels or {}},
        "spec": {"containers": [{"name": "operator", "image": "numatopo"}]},
    }


def replica(name: str) -> dict:
    """Settings of one replica running in pod `name`, competing for the Lease."""
    return {
        "lease_name": LEASE,
        "pod_name": name,
        "pod_namespace": OPERATOR_NAMESPACE,
        **FAST_LEASE,
    }


def active_pods(cluster) -> list[str]:
    return [
        name
        for name in ("op-a", "op-b")
        if cluster.labels(name, OPERATOR_NAMESPACE).get(ACTIVE_LABEL) == "true"
    ]


@pytest.fixture
async def two_replicas(env):
    """Replica A (started first, takes the Lease) and B; B's pod still carries the label
    from a container that ran before it."""
    cluster, start_operator, h100, _, topology_object, wait = env.parts()
    await cluster.create(f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods", operator_pod("op-a"))
    await cluster.create(
        f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods",
        operator_pod("op-b", {ACTIVE_LABEL: "true", "app": "numatopo"}),
    )
    await cluster.create_numatopology(topology_object(NODE, h100))
    await cluster.create_node(NODE)
    a = await start_operator(**replica("op-a"))
    await wait(lambda: active_pods(cluster) == ["op-a", "op-b"], what="A labels its pod")
    b = await start_operator(**replica("op-b"))
    await wait(lambda: active_pods(cluster) == ["op-a"], what="B removes the leftover label")
    await wait(a.runtime.indexed.is_set, what="A listed everything")
    return a, b


async def test_the_label_follows_leadership_and_both_replicas_are_ready(two_replicas, env):
    a, b = two_replicas
    cluster = env.cluster

    ready = [await a.get("/readyz"), await b.get("/readyz")]
    labels_of_b = cluster.labels("op-b", OPERATOR_NAMESPACE)

    assert [(200, "ok: active\n"), (200, "ok: standing by, another replica is active\n")] == ready
    assert {"app": "numatopo"} == labels_of_b


async def test_a_standby_refuses_to_bind_or_filter(two_replicas, env):
    """A call the Service sends to the standby during a handover gets an Error, never a binding."""
    _, b = two_replicas
    cluster, pod = env.cluster, env.pod
    await cluster.create_pod(pod("job", node=None, gpus=1))
    bind = cluster.binding_args("job", NODE)
    extender_args = {"Pod": pod("job", node=None, gpus=1), "NodeNames": [NODE]}

    (bind_status, bound), (_, filtered) = (
        await b.post("/bind", bind),
        await b.post("/filter", extender_args),
    )

    assert (200, NOT_ACTIVE) == (bind_status, bound["Error"])
    assert (NOT_ACTIVE, None) == (filtered["Error"], filtered["NodeNames"])
    assert {keys.POLICY: "single-numa-node"} == cluster.annotations("job")


async def test_the_standby_takes_over_the_label_when_the_holder_stops(two_replicas, env):
    """A stopping holder releases the Lease: the standby takes it at its next try."""
    a, b = two_replicas
    cluster, wait = env.cluster, env.wait

    await a.stop()
    await wait(lambda: active_pods(cluster) == ["op-b"], what="B labels its pod", timeout=5)
    await wait(lambda: b.runtime.deciding, what="B decides")
    ready = await b.get("/readyz")

    assert (200, "ok: active\n") == ready


async def test_a_holder_that_vanishes_loses_its_label_to_the_next_one(two_replicas, env):
    """kill -9 leaves the Lease held and the label on the dead pod: the standby waits out
    the lease duration, takes the Lease and removes the dead replica's label."""
    a, b = two_replicas
    cluster, wait = env.cluster, env.wait
    # As kill -9 would: nothing renews the Lease or unlabels the pod any more.
    a.runtime.kube.patch_lease = _unreachable  # type: ignore[method-assign]
    a.runtime.kube.patch_pod_labels = _unreachable  # type: ignore[method-assign]
    a.runtime.kube.get_lease = _unreachable  # type: ignore[method-assign]
    a.runtime.kube.patch_pod_annotations = _unreachable  # type: ignore[method-assign]

    await wait(lambda: active_pods(cluster) == ["op-b"], what="only B labelled", timeout=5)
    await wait(lambda: b.runtime.deciding, what="B decides")

    assert not a.runtime.deciding


async def test_a_holder_whose_elector_fails_stops_answering_as_the_holder(two_replicas, env):
    """A bug in A's renewal (no API error) ends A's elector loop: A stops answering as
    the holder at once and runs its elector again as a standby, so one replica holds the
    Lease, labelled, and decides. (A's elector used to end silently: A said it was
    active for good, next to B once B took the Lease.)"""
    a, b = two_replicas
    cluster, pod, wait = env.cluster, env.pod, env.wait
    failed: list[int] = []
    renew = a.runtime.kube.patch_lease

    async def patch_lease(*args: object, **kwargs: object) -> dict:
        if not failed:
            failed.append(1)
            raise RuntimeError("injected: a bug in the renewal")
        return await renew(*args, **kwargs)  # type: ignore[arg-type]

    a.runtime.kube.patch_lease = patch_lease  # type: ignore[method-assign]
    await wait(lambda: failed, what="A's renewal failed")
    # Past the lease duration: B may have taken the Lease, or A again.
    await asyncio.sleep(2 * FAST_LEASE["lease_duration_seconds"])

    def one_holder() -> bool:
        holding = [r for r in (a, b) if r.runtime.active.is_set()]
        return len(holding) == 1 and holding[0].runtime.deciding

    await wait(one_holder, what="exactly one replica holds the Lease and decides")
    holder, standby = (a, b) if a.runtime.active.is_set() else (b, a)
    await cluster.create_pod(pod("after", gpus=1))
    await wait(lambda: cluster.annotations("after").get(keys.STATE) == "Assigned", what="assigned")
    restarts = a.runtime.metrics.registry.get_sample_value(
        "numatopo_task_restarts_total", {"task": "leadership"}
    )

    assert [holder.runtime.settings.pod_name] == active_pods(cluster)
    assert not standby.runtime.active.is_set()
    assert ((200, "ok: active\n"), 1.0) == (await holder.get("/readyz"), restarts)


async def _unreachable(*args: object, **kwargs: object) -> dict:
    raise KubeError(0, "ClientConnectorError", "the API server is unreachable")


# -- taking over again after standing by ----------------------------------------------

TAKING_OVER = (
    "this numatopo operator replica is taking over: it is making its ledger current "
    "(its pod watch catching up, or a fresh list of pods); the scheduler retries"
)
NOT_LISTED = "numatopo operator is starting: pods and Numatopologies are not listed yet"
# Pod lists (a large cluster's re-list) answer only once a bind was refused; this bounds
# the wait should no bind ever be refused.
HELD_LIST_SECONDS = 30


def shared_devices(assignments: dict[str, Assignment]) -> dict[str, list[str]]:
    """CPUs and GPUs that more than one pod holds: `cpu 12` / `gpu 3` -> pods."""
    holders: dict[str, list[str]] = defaultdict(list)
    for pod, assignment in sorted(assignments.items()):
        for container in assignment.containers.values():
            for cpu in container.cpus:
                holders[f"cpu {cpu}"].append(pod)
            for gpu in container.gpu_indices:
                holders[f"gpu {gpu}"].append(pod)
    return {device: pods for device, pods in holders.items() if len(pods) > 1}


async def bind_until_accepted(
    operator, cluster, pod: str, on_refusal=lambda error: None
) -> list[str]:
    """POST /bind until the replica takes it; returns the distinct refusals met first."""
    refusals: list[str] = []
    deadline = asyncio.get_running_loop().time() + 10
    body = cluster.binding_args(pod, NODE)
    while True:
        _, answer = await operator.post("/bind", body)
        if not answer["Error"]:
            return refusals
        if answer["Error"] not in refusals:
            refusals.append(answer["Error"])
        on_refusal(answer["Error"])
        assert asyncio.get_running_loop().time() < deadline, refusals
        await asyncio.sleep(0.02)


async def test_a_replica_active_again_books_around_what_its_peer_assigned(env, monkeypatch):
    """A assigns, loses the Lease to B which assigns on the same node, and takes it again
    when B stops; its binds must avoid every CPU and GPU that B handed out, and wait
    until its ledger is current (its pod watch caught up with its own pod's token)."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    for name in ("op-a", "op-b"):
        await cluster.create(f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods", operator_pod(name))
    await cluster.create_numatopology(topology_object(NODE, h100))
    await cluster.create_node(NODE)

    def assigned(*names: str):
        return lambda: all(
            keys.ASSIGNMENT in cluster.pods()[name]["metadata"].get("annotations", {})
            for name in names
        )

    a = await start_operator(**replica("op-a"))
    await wait(lambda: a.runtime.deciding, what="A decides")
    await cluster.create_pod(pod("by-a", gpus=1, cpu="8"))
    await wait(assigned("by-a"), what="A assigns by-a")

    b = await start_operator(**replica("op-b"))
    await a.stop()
    await wait(lambda: b.runtime.deciding, what="B takes over")
    a = await start_operator(**replica("op-a"))
    for name in ("by-b-1", "by-b-2"):
        await cluster.create_pod(pod(name, gpus=1, cpu="8"))
    await wait(assigned("by-b-1", "by-b-2"), what="B assigns its pods")

    cluster.emulate_binding()
    # Pod lists, and A's writes to its own pod (the token its watch must see before it
    # decides), are held until a bind has been refused, not for a fixed time: on a
    # loaded machine a timed delay can end before the first bind arrives.
    refused = asyncio.Event()

    async def held_list() -> None:  # None: the emulator then answers the list itself
        async with asyncio.timeout(HELD_LIST_SECONDS):
            await refused.wait()

    cluster.api["list v1/pods"] << held_list
    cluster.api[f"patch /api/v1/namespaces/{OPERATOR_NAMESPACE}/pods/op-a"] << held_list
    for name in ("late-1", "late-2"):
        await cluster.create_pod(pod(name, node=None, gpus=1, cpu="8"))
    await b.stop()
    await wait(a.runtime.active.is_set, what="A is active again", timeout=5)
    refusals = [
        await bind_until_accepted(a, cluster, name, lambda _: refused.set())
        for name in ("late-1", "late-2")
    ]
    assignments = {
        name: Assignment.model_validate_json(found["metadata"]["annotations"][keys.ASSIGNMENT])
        for name, found in cluster.pods().items()
        if keys.ASSIGNMENT in found["metadata"].get("annotations", {})
    }

    assert ["by-a", "by-b-1", "by-b-2", "late-1", "late-2"] == sorted(assignments)
    assert {} == shared_devices(assignments)
    # Refused while its pods are not listed, or its ledger not yet current.
    assert any(TAKING_OVER in r or NOT_LISTED in r for r in refusals[0]), refusals[0]


async def test_pods_written_while_no_replica_decides_are_judged_by_the_next_holder(
    two_replicas, env
):
    """Between the holder's death and the standby's take-over nobody decides: what was
    written meanwhile (unreadable or overlapping assignments, a refusal that lost its
    reason, a new pod) is judged by the new holder; valid assignments stay as they are."""
    a, b = two_replicas
    cluster, pod, wait = env.cluster, env.pod, env.wait
    a.runtime.kube.patch_lease = _unreachable  # type: ignore[method-assign]
    a.runtime.kube.get_lease = _unreachable  # type: ignore[method-assign]
    a.runtime.kube.patch_pod_annotations = _unreachable  # type: ignore[method-assign]
    a.runtime.kube.patch_pod_labels = _unreachable  # type: ignore[method-assign]
    await wait(lambda: not a.runtime.deciding, what="A stops deciding")

    def claim(seq: int) -> str:
        container = {"gpuIndices": [0]}
        return json.dumps(
            {"v": 1, "node": NODE, "seq": seq, "numaNodes": [0], "containers": {"main": container}}
        )

    await cluster.create_pod(pod("older", annotations={keys.ASSIGNMENT: claim(1)}))
    await cluster.create_pod(pod("overlapping", annotations={keys.ASSIGNMENT: claim(2)}))
    await cluster.create_pod(pod("unreadable", annotations={keys.ASSIGNMENT: "[]"}))
    await cluster.create_pod(pod("no-reason", gpus=8, annotations={keys.STATE: "Unsatisfiable"}))
    await cluster.create_pod(pod("new", gpus=2))
    older = cluster.annotations("older")

    await wait(lambda: b.runtime.deciding, what="B takes over", timeout=5)
    await wait(
        lambda: (
            keys.REASON in cluster.annotations("no-reason")
            and cluster.annotations("new").get(keys.STATE) == "Assigned"
            and cluster.annotations("overlapping").get(keys.STATE) == "Invalid"
            and cluster.annotations("unreadable").get(keys.STATE) == "Invalid"
        ),
        what="B judged every pod",
    )
    new = Assignment.model_validate_json(cluster.annotations("new")[keys.ASSIGNMENT])

    assert older == cluster.annotations("older")
    assert "GPU 0 is held by default/older" in cluster.annotations("overlapping")[keys.REASON]
    assert 0 not in new.containers["main"].gpu_indices


async def test_a_standby_takes_over_from_its_watch_without_listing_pods(two_replicas, env):
    """B keeps its ledger from its own pod watch; when A stops, B's watch has caught up
    once it sees the token B wrote on its own pod, so B decides without a list of pods,
    and around what A assigned."""
    a, b = two_replicas
    cluster, pod, wait = env.cluster, env.pod, env.wait
    await cluster.create_pod(pod("by-a", gpus=4, cpu="8"))
    await wait(lambda: keys.ASSIGNMENT in cluster.annotations("by-a"), what="A assigns by-a")
    lists_before = len(cluster.api["list v1/pods"])

    await a.stop()
    await wait(lambda: b.runtime.deciding, what="B takes over")
    await cluster.create_pod(pod("by-b", gpus=4, cpu="8"))
    await wait(lambda: keys.ASSIGNMENT in cluster.annotations("by-b"), what="B assigns by-b")
    gpus = {
        name: set(
            Assignment.model_validate_json(cluster.annotations(name)[keys.ASSIGNMENT])
            .containers["main"]
            .gpus
        )
        for name in ("by-a", "by-b")
    }
    token = cluster.pod("op-b", OPERATOR_NAMESPACE)["metadata"].get("annotations", {})

    assert lists_before == len(cluster.api["list v1/pods"])
    assert set() == gpus["by-a"] & gpus["by-b"]
    assert "numatopo.io/caught-up" in token
