"""One pod decided twice at once (its watch event and its retry, `assigning.decide`):
one answer is written and one Event posted, whatever the two saw when they started.

The operator's own `Runtime`, ledger, engine thread and watch bookkeeping
(`handlers.pod_seen`) run for real; only the pod patch is stood in for (no API server
here), and it comes back through the watch at once, as kmock's would on a fast machine.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from typing import Any

import pytest

import signing_keys
from numatopo_engine import annotations as keys
from numatopo_operator import assigning, handlers, pod_writes, translate
from numatopo_operator.pod_view import PodView
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings
from numatopo_operator.signing_keys import load_keys

from .conftest import h100_spec, make_pod

NODE = "h100-a"


def deciding_runtime() -> Runtime:
    # Standalone (no Lease: always fresh), with the test suite's signing key.
    settings = OperatorSettings(signing_key_file=signing_keys.KEY_FILE)
    signer, verifier = load_keys(settings)
    runtime = Runtime(settings, signer=signer, verifier=verifier)
    for flag in (runtime.indexed, runtime.active, runtime.ledger_current, runtime.role_known):
        flag.set()
    runtime.ledger.set_topology(NODE, h100_spec())
    return runtime


@pytest.mark.parametrize("gpus", [6, 2], ids=["refused", "assigned"])
async def test_a_pod_decided_twice_at_once_is_written_and_told_once(
    monkeypatch: pytest.MonkeyPatch, gpus: int
) -> None:
    """6 GPUs under single-numa-node fit no NUMA node of 4 (Unsatisfiable); 2 do. The
    second decision used to compare its answer with the state the pod had when it
    started: once the first's write had come back through the watch, it wrote the same
    answer again and posted a second Event."""
    runtime = deciding_runtime()
    body = make_pod("wide", gpus=gpus)
    handlers.pod_seen(runtime, "ADDED", body, logging.getLogger("test"))
    writes: list[dict[str, Any]] = []
    events: list[str] = []

    async def write_outcome(runtime: Runtime, pod: PodView, state, assignment=None, reason=""):
        signed = runtime.signed(pod, assignment) if assignment is not None else None
        patch = dict(translate.outcome_annotations(state, signed, reason))
        writes.append(patch)
        echoed = copy.deepcopy(body)
        annotations = echoed["metadata"]["annotations"]
        annotations.update({k: v for k, v in patch.items() if v is not None})
        handlers.pod_seen(runtime, "MODIFIED", echoed, logging.getLogger("test"))
        await asyncio.sleep(0)

    def post(about, *, warning: bool, reason: str, message: str) -> None:
        events.append(reason)

    monkeypatch.setattr(pod_writes, "write_outcome", write_outcome)
    monkeypatch.setattr(runtime.events, "post", post)
    view = PodView(body)

    states = await asyncio.gather(
        assigning.assign_bound_pod(runtime, view), assigning.assign_bound_pod(runtime, view)
    )

    wanted = "Unsatisfiable" if gpus == 6 else "Assigned"
    assert 1 == len(writes), writes
    assert wanted == writes[0][keys.STATE]
    assert [f"Numatopo{wanted}"] == events
    assert {wanted} == {s.value for s in states if s is not None}


def claim(seq: int) -> str:
    """A hand-written assignment of GPU 0 on `NODE` (make_pod signs it for its pod)."""
    container = {"gpuIndices": [0]}
    return json.dumps(
        {"v": 1, "node": NODE, "seq": seq, "numaNodes": [0], "containers": {"main": container}}
    )


@pytest.mark.parametrize("together", [False, True], ids=["in-turn", "at-once"])
@pytest.mark.parametrize("first", ["newer", "older"], ids=["own-first", "neighbour-first"])
async def test_an_untrusted_booking_is_marked_and_told_once(
    monkeypatch: pytest.MonkeyPatch, first: str, together: bool
) -> None:
    """Two pods claim GPU 0: the newer claim is untrusted. Its own follow-up marks it
    Invalid (`judge_pod`), and so does every neighbour's (`_report_others`, from a body
    naming the pod only). The neighbour's used to compare with that name-only body:
    once the pod's own write had come back through the watch, it wrote `Invalid` again
    and posted a second NumatopoUntrusted Event, whether it ran meanwhile or later."""
    runtime = deciding_runtime()
    log = logging.getLogger("test")
    bodies = {
        "older": make_pod("older", annotations={keys.ASSIGNMENT: claim(1)}),
        "newer": make_pod("newer", annotations={keys.ASSIGNMENT: claim(2)}),
    }
    for body in bodies.values():
        handlers.pod_seen(runtime, "ADDED", body, log)
    assert ["default/newer"] == list(runtime.ledger.untrusted(NODE))
    writes: list[tuple[str, str]] = []
    events: list[tuple[str, str]] = []

    async def write_invalid(runtime: Runtime, pod: PodView, reason: str) -> None:
        writes.append((pod.name, reason))
        echoed = copy.deepcopy(bodies[pod.name])
        echoed["metadata"]["annotations"].update(translate.invalid_annotations(reason))
        bodies[pod.name] = echoed
        handlers.pod_seen(runtime, "MODIFIED", echoed, log)
        await asyncio.sleep(0)

    def post(about, *, warning: bool, reason: str, message: str) -> None:
        events.append((about["name"], reason))

    monkeypatch.setattr(pod_writes, "write_invalid", write_invalid)
    monkeypatch.setattr(runtime.events, "post", post)
    # Each pod's follow-up as its worker runs it on an event: the other pods' untrusted
    # bookings reported, then the pod itself judged.
    order = [first, "older" if first == "newer" else "newer"]
    follow_ups = [handlers.pod_seen(runtime, "MODIFIED", bodies[name], log) for name in order]
    assert None not in follow_ups

    if together:
        await asyncio.gather(*(f() for f in follow_ups if f is not None))
    else:
        for follow_up in follow_ups:
            assert follow_up is not None
            await follow_up()

    assert 1 == len(writes), writes
    assert "newer" == writes[0][0]
    assert "GPU 0 is held by default/older" in writes[0][1]
    assert [("newer", "NumatopoUntrusted")] == events


def gpus_of(annotations: dict[str, Any]) -> set[int]:
    text = annotations.get(keys.ASSIGNMENT)
    return set(json.loads(text)["containers"]["main"]["gpuIndices"]) if text else set()


async def test_a_realignment_waits_for_a_decision_being_written_before_displacing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kubelet gave p GPUs 2 and 3 where its assignment names 0 and 1, just as o was
    decided onto 2 and 3. p's realignment used to displace o while o's assignment was
    still being written: the take-back could land first, o's write after it, and o ran
    with an assignment the ledger no longer booked, on the GPUs p was realigned to."""
    runtime = deciding_runtime()
    log = logging.getLogger("test")
    held = {"devices": {"nvidia.com/gpu": ["2", "3"]}, "matches": False}
    observed = {"v": 1, "seq": 1, "containers": {"main": held}}
    first = {"v": 1, "node": NODE, "seq": 1, "numaNodes": [0],
             "containers": {"main": {"gpuIndices": [0, 1]}}}  # fmt: skip
    annotations = {
        keys.ASSIGNMENT: json.dumps(first),
        keys.STATE: "Assigned",
        keys.OBSERVED: json.dumps(observed),
    }
    api = {"p": make_pod("p", gpus=2, annotations=annotations), "o": make_pod("o", gpus=2)}
    api["o"]["status"] = {"phase": "Pending"}  # bound, not admitted yet
    for body in api.values():
        handlers.pod_seen(runtime, "ADDED", body, log)
    writing, landing = asyncio.Event(), asyncio.Event()

    def land(name: str, patch: dict[str, str | None]) -> None:
        """The patch as the API server stores it, shown back through the watch."""
        shown = copy.deepcopy(api[name])
        annotations = shown["metadata"]["annotations"]
        for key, value in patch.items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        api[name] = shown
        handlers.pod_seen(runtime, "MODIFIED", shown, log)

    async def write_outcome(runtime: Runtime, pod: PodView, state, assignment=None, reason=""):
        signed = runtime.signed(pod, assignment) if assignment is not None else None
        patch = dict(translate.outcome_annotations(state, signed, reason))
        if pod.name == "o":
            writing.set()
            await landing.wait()  # o's patch is on the wire
        land(pod.name, patch)

    async def write_taken_back(runtime: Runtime, namespace: str, name: str, **kwargs) -> None:
        land(name, dict(translate.removal_annotations()))

    monkeypatch.setattr(pod_writes, "write_outcome", write_outcome)
    monkeypatch.setattr(pod_writes, "write_taken_back", write_taken_back)
    monkeypatch.setattr(runtime.events, "post", lambda *args, **kwargs: None)
    deciding = asyncio.create_task(assigning.assign_bound_pod(runtime, PodView(api["o"])))
    await writing.wait()
    in_flight = runtime.ledger.state(NODE).assignments["default/o"]
    assert {2, 3} == set(in_flight.containers["main"].gpu_indices)  # what p holds for real

    await assigning.judge_pod(runtime, PodView(api["p"]))
    landing.set()
    await deciding
    await assigning.judge_pod(runtime, PodView(api["p"]))  # p's retry

    for name in ("p", "o"):
        annotations = api[name]["metadata"]["annotations"]
        booked = runtime.ledger.booking(f"default/{name}")
        text = annotations.get(keys.ASSIGNMENT)
        assert (json.loads(text)["seq"] if text else None) == (
            booked.assignment.seq if booked is not None else None
        ), name
    p, o = (gpus_of(api[name]["metadata"]["annotations"]) for name in ("p", "o"))
    assert {2, 3} == p
    assert not p & o, (p, o)
