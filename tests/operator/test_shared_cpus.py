"""Nodes of one CPU layout share their parsed CPU rows (`indexes.shared_cpus`): most of
a parsed spec, and of the operator's memory at 1,000 nodes."""

from __future__ import annotations

import logging

import kopf

from numatopo_operator.indexes import numatopologies

from .conftest import numatopology


def reading(name, spec):
    body = kopf.Body(numatopology(name, spec))
    return numatopologies(body=body, logger=logging.getLogger("test"))[name].spec


def test_nodes_of_one_layout_share_their_cpu_rows_and_keep_their_own_devices(h100):
    wire = h100.to_wire()
    other_gpus = [{**gpu, "uuid": f"GPU-other-{gpu['index']}"} for gpu in wire["gpus"]]
    first = reading("h100-a", h100)
    second = reading("h100-b", h100.model_validate({**wire, "gpus": other_gpus}))

    assert first.cpus is second.cpus
    assert (first.cpus, first.gpus) == (h100.cpus, h100.gpus)
    assert [g.uuid for g in second.gpus] == [g["uuid"] for g in other_gpus]


def test_a_node_whose_layout_differs_keeps_its_own_rows(h100):
    wire = h100.to_wire()
    offline = [{**cpu, "online": cpu["id"] != 7} for cpu in wire["cpus"]]
    first = reading("h100-a", h100)
    changed = reading("h100-c", h100.model_validate({**wire, "cpus": offline}))

    assert first.cpus is not changed.cpus
    assert [c.id for c in changed.cpus if not c.online] == [7]
