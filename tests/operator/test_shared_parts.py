"""Nodes of one hardware shape share the parts of their parsed specs that name nothing
of one node (`indexes.shared_parts`): the CPU rows and NUMA nodes' CPU sets were most of
the operator's memory at 1,000 nodes. Their GPUs (UUIDs) stay their own."""

from __future__ import annotations

import logging

import kopf

from numatopo_operator.indexes import SHARED_PARTS, numatopologies

from .conftest import numatopology


def reading(name, spec):
    body = kopf.Body(numatopology(name, spec))
    return numatopologies(body=body, logger=logging.getLogger("test"))[name].spec


def test_nodes_of_one_shape_share_every_part_but_their_own_devices(h100):
    wire = h100.to_wire()
    other_gpus = [{**gpu, "uuid": f"GPU-other-{gpu['index']}"} for gpu in wire["gpus"]]
    first = reading("h100-a", h100)
    second = reading("h100-b", h100.model_validate({**wire, "gpus": other_gpus}))

    for part in SHARED_PARTS:
        assert getattr(first, part) is getattr(second, part), part
    assert first.numa_nodes[0].cpus is second.numa_nodes[0].cpus
    assert (first.cpus, first.numa_nodes, first.gpus) == (h100.cpus, h100.numa_nodes, h100.gpus)
    assert first.gpus is not second.gpus
    assert [g.uuid for g in second.gpus] == [g["uuid"] for g in other_gpus]


def test_a_node_whose_layout_differs_keeps_its_own_rows(h100):
    wire = h100.to_wire()
    offline = [{**cpu, "online": cpu["id"] != 7} for cpu in wire["cpus"]]
    first = reading("h100-a", h100)
    changed = reading("h100-c", h100.model_validate({**wire, "cpus": offline}))

    assert first.cpus is not changed.cpus
    assert [c.id for c in changed.cpus if not c.online] == [7]
    assert first.numa_nodes is changed.numa_nodes


def test_a_node_whose_numa_memory_differs_keeps_its_own_numa_nodes(h100):
    wire = h100.to_wire()
    numas = [{**numa, "memoryBytes": numa["memoryBytes"] + 1} for numa in wire["numaNodes"]]
    first = reading("h100-a", h100)
    changed = reading("h100-d", h100.model_validate({**wire, "numaNodes": numas}))

    assert first.numa_nodes is not changed.numa_nodes
    assert [n.memory_bytes - 1 for n in changed.numa_nodes] == [
        n.memory_bytes for n in first.numa_nodes
    ]
    assert first.cpus is changed.cpus
