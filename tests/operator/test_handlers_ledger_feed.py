"""The handlers feed the ledger: the first call of a kopf handler gives it every
Numatopology kopf listed, before any one of them is handled on its own; when none was
called by the time the pod feed has listed, the feed's own list of them does.

kopf calls handlers only once its indexes hold every listed object, then for many
objects in turn; in a large cluster a pod's handler that waits on the API lets the
extender answer before most Numatopology handlers have run. Here the handler is
called as kopf calls it, with the index kopf would pass, without the emulator: the
cluster tests cannot hold kopf between two handler calls.
"""

from __future__ import annotations

import logging

import kopf

from numatopo_operator import handlers, indexes
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings

from .conftest import h100_spec, numatopology

logger = logging.getLogger(__name__)


def listed(bodies: list[kopf.Body]) -> dict[str, list[indexes.TopologyReading]]:
    """The `numatopologies` index as kopf fills it from `bodies` (node -> its values)."""
    found: dict[str, list[indexes.TopologyReading]] = {}
    for body in bodies:
        for node, reading in indexes.numatopologies(body=body, logger=logger).items():
            found.setdefault(node, []).append(reading)
    return found


async def test_the_first_numatopology_event_finds_every_listed_node_in_the_ledger():
    spec = h100_spec()
    bodies = [kopf.Body(numatopology(f"n{i}", spec)) for i in range(3)]
    bodies.append(kopf.Body(numatopology("quiet", spec, exported="False")))
    runtime = Runtime(OperatorSettings())

    await handlers.numatopology_changed(
        type=None,
        body=bodies[0],
        memo=runtime,
        logger=logger,
        numatopologies=listed(bodies),
    )

    assert ["n0", "n1", "n2", "quiet"] == list(runtime.ledger.nodes())
    assert ["quiet"] == list(runtime.ledger.stale_nodes(0))
    assert runtime.indexed.is_set()


def test_numatopologies_the_pod_feed_listed_go_in_at_once_when_kopf_gave_none():
    """No Numatopology handler ran (none exists yet, or kopf is still listing): the pod
    feed's own list opens the gate, every node of it in the ledger."""
    spec = h100_spec()
    runtime = Runtime(OperatorSettings())

    handlers.take_listed_numatopologies(
        runtime, [numatopology("n0", spec), numatopology("quiet", spec, exported="False")]
    )

    assert ["n0", "quiet"] == list(runtime.ledger.nodes())
    assert ["quiet"] == list(runtime.ledger.stale_nodes(0))
    assert runtime.indexed.is_set()


def test_a_numatopology_list_after_kopf_gave_them_changes_nothing():
    runtime = Runtime(OperatorSettings())
    runtime.indexed.set()

    handlers.take_listed_numatopologies(runtime, [numatopology("n0", h100_spec())])

    assert [] == list(runtime.ledger.nodes())


async def test_a_numatopology_left_out_of_the_index_is_dropped():
    """An invalid spec (or a deleted object) has no reading: the node is decided on no more."""
    spec = h100_spec()
    body = kopf.Body(numatopology("n0", spec))
    runtime = Runtime(OperatorSettings())
    await handlers.numatopology_changed(
        type=None,
        body=body,
        memo=runtime,
        logger=logger,
        waiting_pods={},
        numatopologies=listed([body]),
    )
    broken = numatopology("n0", spec)
    broken["spec"]["cpus"].append(broken["spec"]["cpus"][0])  # a duplicate CPU id

    await handlers.numatopology_changed(
        type=None,
        body=kopf.Body(broken),
        memo=runtime,
        logger=logger,
        waiting_pods={},
        numatopologies=listed([kopf.Body(broken)]),
    )

    assert None is runtime.ledger.topology("n0")
