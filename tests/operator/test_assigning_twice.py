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
        patch = dict(assigning.translate.outcome_annotations(state, signed, reason))
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
