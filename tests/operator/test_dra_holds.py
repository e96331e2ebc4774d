"""What DRA holds, booked in the ledger (pure): allocated ResourceClaims read from their
results, joined with the node's slices and Numatopology, booked on what no pod took."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate

from dra_objects import (
    GPU_CLASS_SELECTOR,
    RDMA_CLASS_SELECTOR,
    claim,
    device_class,
    gpu_slice,
    nic_slice,
    request,
)
from numatopo_engine.annotations import Assignment, ContainerAssignment
from numatopo_engine.model import Numatopology, NumatopologySpec
from numatopo_operator.dra_holds import DraHolds
from numatopo_operator.ledger import Ledger
from numatopo_operator.translate import Booking

NODE = "p4d-a"
TOPOLOGY = Path(__file__).resolve().parents[1] / "fixtures" / "topologies" / "aws-p4d.json"


def spec() -> NumatopologySpec:
    return Numatopology.model_validate(json.loads(TOPOLOGY.read_text())).spec


def allocated(name: str, devices: list[str]) -> dict[str, Any]:
    body = claim(name, [request("gpu", "gpu.nvidia.com", len(devices))])
    results = [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": d} for d in devices
    ]
    selector = {"key": "metadata.name", "operator": "In", "values": [NODE]}
    body["status"] = {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [selector]}]},
        }
    }
    kubernetes_validate.validate(body, "1.34.0", strict=True)
    return body


def pod(key: str, *gpus: int) -> Booking:
    held = ContainerAssignment(gpu_indices=list(gpus), exclusive=False)
    return Booking(key=key, node=NODE, assignment=Assignment(node=NODE, containers={"m": held}))


def setup() -> tuple[Ledger, DraHolds]:
    ledger, holds = Ledger(), DraHolds()
    ledger.set_topology(NODE, spec())
    for body in (gpu_slice(NODE, spec()), nic_slice(NODE, spec())):
        kubernetes_validate.validate(body, "1.34.0", strict=True)
        holds.slice_seen(False, body)
    return ledger, holds


def booked(ledger: Ledger) -> set[int]:
    state = ledger.state(NODE)
    assert state is not None
    return set(range(8)) - set(state.free_gpus())


def test_a_claim_books_its_gpus_and_is_no_pod() -> None:
    ledger, holds = setup()
    nodes = holds.claim_seen(False, allocated("theirs", ["gpu-2", "gpu-6"]))
    assert nodes == {NODE}
    assert holds.sync(ledger, NODE)
    assert booked(ledger) == {2, 6}
    assert ledger.pods_on(NODE) == 0
    assert not holds.sync(ledger, NODE), "nothing changed: nothing booked again"


def test_pods_come_first_and_a_claim_keeps_what_an_ended_pod_left() -> None:
    ledger, holds = setup()
    ledger.observe(pod("ns/train", 2))
    holds.claim_seen(False, allocated("mine", ["gpu-2", "gpu-3"]))
    holds.sync(ledger, NODE)
    assert booked(ledger) == {2, 3}
    # A pod arriving on a device a claim holds is booked, not untrusted: the claim yields.
    ledger.observe(pod("ns/late", 3))
    assert ledger.untrusted(NODE) == {}
    assert ledger.pods_on(NODE) == 2
    ledger.forget("ns/train")
    ledger.forget("ns/late")
    assert booked(ledger) == {2, 3}, "the claim, still allocated, holds both"
    holds.claim_seen(True, allocated("mine", ["gpu-2", "gpu-3"]))
    holds.sync(ledger, NODE)
    assert booked(ledger) == set()


def test_a_claim_seen_before_its_slices_is_booked_when_they_come() -> None:
    ledger, holds = Ledger(), DraHolds()
    ledger.set_topology(NODE, spec())
    assert holds.claim_seen(False, allocated("theirs", ["gpu-1"])) == set()
    assert holds.slices_listed([gpu_slice(NODE, spec())]) == {NODE}
    holds.sync(ledger, NODE)
    assert booked(ledger) == {1}


def test_a_fresh_list_of_claims_drops_those_gone_unwatched() -> None:
    ledger, holds = setup()
    holds.claim_seen(False, allocated("a", ["gpu-0"]))
    holds.claim_seen(False, allocated("b", ["gpu-1"]))
    holds.sync(ledger, NODE)
    assert holds.claims_listed([allocated("b", ["gpu-1"]), claim("c", [])]) == {NODE}
    holds.sync(ledger, NODE)
    assert booked(ledger) == {1}


def test_a_device_of_no_gpu_of_the_node_books_nothing() -> None:
    ledger, holds = setup()
    holds.claim_seen(False, allocated("odd", ["gpu-9"]))
    holds.sync(ledger, NODE)
    assert booked(ledger) == set()


def test_a_slice_gone_takes_its_holds_and_joins_with_it() -> None:
    ledger, holds = setup()
    holds.claim_seen(False, allocated("theirs", ["gpu-3"]))
    holds.sync(ledger, NODE)
    assert booked(ledger) == {3}
    assert holds.slice_seen(True, gpu_slice(NODE, spec())) == {NODE}
    holds.sync(ledger, NODE)
    assert booked(ledger) == set()
    joined = holds.joined(NODE, spec())
    assert joined is not None
    assert {d.id.driver for d in joined.devices} == {"dra.net"}
    # Back again (a driver restart): the claim's device is booked again.
    assert holds.slice_seen(False, gpu_slice(NODE, spec())) == {NODE}
    holds.sync(ledger, NODE)
    assert booked(ledger) == {3}
    assert holds.joined("elsewhere", spec()) is None


def test_extended_names_follow_the_device_classes() -> None:
    """The GPUs a DeviceClass naming an extended resource selects carry its name, kept
    (the same object: the export writer skips unchanged nodes by identity) until a class
    changes; a class renamed or deleted takes its name off them."""
    _, holds = setup()
    named = device_class("gpu.nvidia.com", GPU_CLASS_SELECTOR, extended="example.com/gpu")
    kubernetes_validate.validate(named, "1.34.0", strict=True)
    assert holds.extended(NODE, spec()) == {}
    holds.classes_listed([named, device_class("rdma.dra.net", RDMA_CLASS_SELECTOR)])
    found = holds.extended(NODE, spec())
    assert {d.device: n for d, n in found.items()} == {
        f"gpu-{i}": ("example.com/gpu",) for i in range(8)
    }
    assert holds.extended(NODE, spec()) is found
    renamed = device_class("gpu.nvidia.com", GPU_CLASS_SELECTOR, extended="example.com/a100")
    holds.class_seen(False, renamed)
    assert set(holds.extended(NODE, spec()).values()) == {("example.com/a100",)}
    holds.class_seen(True, renamed)
    assert holds.extended(NODE, spec()) == {}
