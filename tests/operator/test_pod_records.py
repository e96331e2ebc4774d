"""One record per pod: once a pod is deleted, nothing the operator keeps names it.

Pods go through `handlers.pod_seen` as `pod_feed` hands them over (their follow-up
work runs too, writing to the emulator): one waits for a Numatopology that is not
there (retried later), one carries an assignment that cannot be read (marked Invalid,
told once), one waits while the replica is not current (deferred). Then each is
deleted, and every object reachable from the `Runtime` is searched for its key.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import pytest

import signing_keys
from numatopo_engine import annotations as keys
from numatopo_kube import KubeClient
from numatopo_operator import assigning, handlers
from numatopo_operator.pod_view import PodView
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings

from .conftest import eventually, make_pod

logger = logging.getLogger(__name__)

# Parts that hold no pod state: settings, clients, the engine's thread and memos.
_SKIPPED = ("settings", "kube", "metrics", "engine", "decisions", "signer", "verifier")


def holders(root: Any, key: str) -> list[str]:
    """Paths from `root` to every string equal to `key` or starting with `key + ' '`,
    and every `PodView` of that pod."""
    found: list[str] = []
    seen: set[int] = set()

    def visit(value: Any, path: str) -> None:
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, str):
            if value == key or value.startswith(key + " "):
                found.append(path)
            return
        if isinstance(value, PodView):
            if value.key == key:
                found.append(path)
            return
        if isinstance(value, dict):
            for name, item in list(value.items()):
                visit(name, f"{path}[key]")
                visit(item, f"{path}[{name!r}]")
            return
        if isinstance(value, (list, tuple, set, frozenset)):
            for index, item in enumerate(list(value)):
                visit(item, f"{path}[{index}]")
            return
        if isinstance(value, (int, float, bool, bytes)) or value is None:
            return
        if dataclasses.is_dataclass(value) or hasattr(value, "__dict__"):
            names = dict(getattr(value, "__dict__", {}))
            for slot in getattr(type(value), "__slots__", ()):
                if hasattr(value, slot):
                    names[slot] = getattr(value, slot)
            for name, item in names.items():
                if path == "runtime" and name in _SKIPPED:
                    continue
                if callable(item) and not hasattr(item, "__dict__"):
                    continue
                visit(item, f"{path}.{name}")

    visit(root, "runtime")
    return found


@pytest.fixture
async def runtime(cluster: Any) -> Any:
    found = Runtime(
        OperatorSettings(),
        kube=KubeClient.connect(str(cluster.api.url)),
        verifier=signing_keys.VERIFIER,
    )
    for flag in (found.indexed, found.active, found.ledger_current, found.role_known):
        flag.set()
    # The Events of decisions are posted from their queue, as `main.serve` does.
    posting = asyncio.create_task(found.events.run(found.kube))
    yield found
    posting.cancel()
    await asyncio.gather(posting, return_exceptions=True)
    await found.kube.close()


async def seen(runtime: Runtime, kind: str, body: dict[str, Any]) -> None:
    follow_up = handlers.pod_seen(runtime, kind, body, logger)
    if follow_up is not None:
        await follow_up()


async def test_a_deleted_pod_is_named_nowhere(cluster, runtime):
    waiting = make_pod("waits", node="no-topology-yet", gpus=1)
    unreadable = make_pod("unreadable", annotations={keys.ASSIGNMENT: "{not json"})
    deferred = make_pod("deferred", node="no-topology-yet")
    for body in (waiting, unreadable, deferred):
        await cluster.create_pod(body)
    await seen(runtime, "ADDED", waiting)
    await seen(runtime, "ADDED", unreadable)
    runtime.ledger_current.clear()  # not current: the next pod is judged later
    await seen(runtime, "ADDED", deferred)
    runtime.ledger_current.set()

    assert "default/waits" in runtime.retries
    record = runtime.pods.get("default/unreadable")
    assert record is not None
    assert record.unreadable is not None
    assert record.written == "Invalid"
    deferred_record = runtime.pods.get("default/deferred")
    assert deferred_record is not None
    assert deferred_record.deferred is not None
    for key in ("default/waits", "default/unreadable", "default/deferred"):
        assert holders(runtime, key), key  # the search finds what is kept

    for body in (waiting, unreadable, deferred):
        await seen(runtime, "DELETED", body)

    for key in ("default/waits", "default/unreadable", "default/deferred"):
        assert [] == holders(runtime, key), key
    assert 0 == len(runtime.pods)


async def test_a_decision_from_an_older_body_does_not_write_twice(cluster, runtime):
    """A queued follow-up, a retry or a re-drive may judge the pod from a body older than
    our own write, after the watch has shown that write back (which clears `written`):
    the newest body seen decides, so the state and its Event are written once."""
    stale = make_pod("unreadable", annotations={keys.ASSIGNMENT: "{not json"})
    await cluster.create_pod(stale)
    await seen(runtime, "ADDED", stale)
    await eventually(lambda: bool(cluster.events_for("unreadable")), what="its Event posted")
    written_back = cluster.pod("unreadable")
    assert "Invalid" == written_back["metadata"]["annotations"][keys.STATE]
    await seen(runtime, "MODIFIED", written_back)
    record = runtime.pods.get("default/unreadable")
    assert record is not None
    assert record.written is None  # seen back
    await assigning.settle(runtime, PodView(stale))  # judged again from the older body
    assert 0 == runtime.events.pending  # a second Event would be queued by now (post never waits)
    assert 1 == len(cluster.events_for("unreadable"))
