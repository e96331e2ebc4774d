"""One record per node: a Numatopology that comes again with nothing new but its
heartbeat refreshes the node's freshness and nothing else; nodes of equal hardware
share one shape and keep their own names.

Fed through what the feed calls for each Numatopology (`handlers.topology_seen`, with
the reading it parses), and decided on by the engine the operator runs.
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import Any

import kopf
import pytest

from numatopo_engine import allocation
from numatopo_engine.pod_request import request_from_pod
from numatopo_operator import handlers, indexes
from numatopo_operator.ledger import NodeRecord
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings

from .conftest import h100_spec, make_pod, numatopology

logger = logging.getLogger(__name__)


def _stamp(moment: float) -> str:
    return datetime.datetime.fromtimestamp(moment, datetime.UTC).isoformat()


def beating(name: str, moment: float, *, uuid_prefix: str = "") -> dict[str, Any]:
    spec = h100_spec()
    if uuid_prefix:
        gpus = [g.model_copy(update={"uuid": f"{uuid_prefix}-{g.index}"}) for g in spec.gpus]
        spec = spec.model_copy(update={"gpus": gpus})
    body = numatopology(name, spec)
    body["status"]["heartbeat"] = _stamp(moment)
    return body


def packed_row(record: NodeRecord) -> bytes | None:
    """The packed row the engine last laid out for the bookings the record hands out now
    (its frozen copy's); None before any, or once the bookings changed."""
    frozen = record.frozen
    if frozen is None or frozen[0] is not record.state or frozen[1] != frozen[0].version:
        return None
    cached = frozen[2].row_cache
    return cached[1] if cached is not None else None


async def deliver(runtime: Runtime, body: dict[str, Any]) -> None:
    name = body["metadata"]["name"]
    reading = indexes.numatopologies(body=kopf.Body(body), logger=logger)[name]
    assert handlers.topology_seen(runtime, name, reading, logger) is None  # nobody waits


async def test_a_new_heartbeat_alone_keeps_the_shape_state_and_row():
    runtime = Runtime(OperatorSettings(heartbeat_max_age_seconds=60))
    old = time.time() - 120
    await deliver(runtime, beating("n0", old))
    record = runtime.ledger.record("n0")
    assert record is not None
    assert record.shape is not None
    frozen = runtime.ledger.frozen_state("n0")
    assert frozen is not None
    row = runtime.decisions.row(record.shape, frozen)
    shape, state, names = record.shape, record.state, record.names
    assert row is packed_row(record)
    assert runtime.stale_reason("n0") is not None  # two minutes old: stale

    fresh = time.time()
    await deliver(runtime, beating("n0", fresh))

    assert runtime.ledger.record("n0") is record
    assert record.shape is shape
    assert record.state is state
    assert record.names is names
    assert runtime.ledger.frozen_state("n0") is frozen
    assert packed_row(record) is row
    assert record.heartbeat == pytest.approx(fresh)
    assert runtime.stale_reason("n0") is None


async def test_nodes_of_one_hardware_share_a_shape_and_keep_their_names():
    runtime = Runtime(OperatorSettings())
    now = time.time()
    await deliver(runtime, beating("a", now, uuid_prefix="GPU-a"))
    await deliver(runtime, beating("b", now, uuid_prefix="GPU-b"))
    a, b = runtime.ledger.record("a"), runtime.ledger.record("b")
    assert a is not None
    assert b is not None
    assert a.names is not None
    assert b.names is not None

    assert a.shape is b.shape
    assert a.names.gpu_name[0] == "GPU-a-0"
    assert b.names.gpu_name[0] == "GPU-b-0"
    # The engine decides on the record's shape and writes the node's own names.
    request = request_from_pod(
        make_pod("p", gpus=1, cpu="2", memory="1Gi"), runtime.settings.resources
    )
    assert b.topology is not None
    assert b.state is not None
    decision = allocation.allocate(b.topology, b.state, request, "b", engine=runtime.decisions)
    assert runtime.decisions.tables_of(b.topology, b.state) is b.shape
    (entry,) = decision.assignment.containers.values()
    assert all(name.startswith("GPU-b-") for name in entry.gpus)


async def test_a_deleted_numatopology_drops_the_hardware_and_freshness_not_the_record():
    runtime = Runtime(OperatorSettings())
    await deliver(runtime, beating("n0", time.time()))
    record = runtime.ledger.record("n0")
    assert record is not None

    handlers.topology_seen(runtime, "n0", None, logger)

    assert runtime.ledger.record("n0") is record
    assert (record.topology, record.shape, record.state, record.heartbeat) == (None,) * 4
    assert [] == list(runtime.ledger.nodes())
