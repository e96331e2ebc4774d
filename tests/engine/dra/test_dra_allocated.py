"""Claims read back as devices: an assignment's devices as the claims' allocations (a
half-done write resumed), and allocated claims as the containers' pinned devices (the
extender's bind), on the AWS p4d topology with NVIDIA- and dranet-shaped slices."""

from __future__ import annotations

from typing import Any

import pytest

from dra_objects import claim, gpu_slice, nic_slice, request
from numatopo_engine.dra import api
from numatopo_engine.dra.allocated import NotFollowedError, claimed_devices
from numatopo_engine.dra.claims import PodClaim, allocations_for, pod_claims
from numatopo_engine.dra.extended import EXTENDED_ENTRY
from numatopo_engine.dra.join import DraNode, join_node
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.pod_request import request_from_pod
from numatopo_engine.resources import ResourceNames

from .test_dra_claims import NODE, classes_wire, decide, p4d, pod


def _node() -> DraNode:
    spec = p4d()
    slices = [gpu_slice(NODE, spec), nic_slice(NODE, spec)]
    return join_node(NODE, spec, [api.ResourceSlice.model_validate(s) for s in slices])


def test_an_assignment_gives_back_the_allocations_it_was_decided_with() -> None:
    constraint = [{"requests": ["gpu", "nic"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    wire = [
        claim("three", [request("gpu", "gpu.nvidia.com", 3)]),
        claim("pair", [request("gpu", "gpu.nvidia.com", 1), request("nic", "rdma.dra.net", 1)],
              constraints=constraint),
    ]  # fmt: skip
    decision, _, _ = decide(wire)
    raw_pod = pod({c["metadata"]["name"]: c["metadata"]["name"] for c in wire})
    claims = {c["metadata"]["name"]: api.ResourceClaim.model_validate(c) for c in wire}
    classes = {n: api.DeviceClass.model_validate(c) for n, c in classes_wire().items()}
    base = request_from_pod(raw_pod, ResourceNames())
    node = _node()

    found = allocations_for(
        decision.assignment,
        base,
        pod_claims(raw_pod),
        claims,
        classes,
        node,
    )

    assert {n: a.written() for n, a in found.items()} == {
        n: a.written() for n, a in decision.allocations.items()
    }
    # Devices that do not satisfy the claims (a GPU fewer): no allocation is made up.
    main = decision.assignment.containers["main"]
    short = decision.assignment.model_copy(
        update={
            "containers": {"main": main.model_copy(update={"gpu_indices": main.gpu_indices[1:]})}
        }
    )
    with pytest.raises(UnsatisfiableError):
        allocations_for(short, base, pod_claims(raw_pod), claims, classes, node)


def _allocated(name: str, devices: list[str], uid: str = "u1") -> dict[str, Any]:
    """Claim `name` as kube-scheduler leaves it by bind time: allocated `devices`,
    reserved for the pod with uid `uid`."""
    body = claim(name, [request("gpu", "gpu.nvidia.com", len(devices))])
    results = [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": d} for d in devices
    ]
    consumer = {"resource": "pods", "name": "train", "uid": uid}
    body["status"] = {"allocation": {"devices": {"results": results}}, "reservedFor": [consumer]}
    return body


def test_allocated_claims_pin_their_devices_on_the_container_using_them() -> None:
    spec = p4d()
    raw_pod = pod({"c": "c"})
    base = request_from_pod(raw_pod, ResourceNames())
    held = claimed_devices(
        spec,
        base,
        pod_claims(raw_pod),
        {"c": _allocated("c", ["gpu-5", "gpu-4"])},
        _node(),
        uid="u1",
    )
    assert held.gpus == {"main": [4, 5]}
    (main,) = held.request.containers
    assert (main.gpus, main.gpu_resource) == (2, "nvidia.com/gpu")

    unallocated = claim("c", [request("gpu", "gpu.nvidia.com", 2)])
    with pytest.raises(NotFollowedError, match="not allocated yet"):
        claimed_devices(spec, base, pod_claims(raw_pod), {"c": unallocated}, _node(), uid="u1")
    elsewhere = _allocated("c", ["gpu-9"])
    with pytest.raises(NotFollowedError, match="publishes no such device"):
        claimed_devices(spec, base, pod_claims(raw_pod), {"c": elsewhere}, _node(), uid="u1")


def test_a_claim_that_is_not_the_pods_is_not_followed() -> None:
    """By bind time every claim of the pod is reserved for it, and kube-scheduler's claim
    for its extended resources is owned by it: a claim reserved for another pod only, or
    a status naming another pod's extended-resources claim, gives this pod nothing."""
    spec = p4d()
    raw_pod = pod({"c": "c"})
    base = request_from_pod(raw_pod, ResourceNames())
    others = _allocated("c", ["gpu-4", "gpu-5"], uid="u2")
    with pytest.raises(NotFollowedError, match="claim c is not reserved for this pod"):
        claimed_devices(spec, base, pod_claims(raw_pod), {"c": others}, _node(), uid="u1")
    # A pod without a uid matches no reservation.
    with pytest.raises(NotFollowedError, match="not reserved for this pod"):
        claimed_devices(
            spec,
            base,
            pod_claims(raw_pod),
            {"c": _allocated("c", ["gpu-4"], uid="")},
            _node(),
            uid="",
        )

    extended = [PodClaim(EXTENDED_ENTRY, "x", ("main",), (("gpu", "main"),))]
    special = _allocated("x", ["gpu-4", "gpu-5"])
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "victim", "uid": "u2", "controller": True}
    special["metadata"]["ownerReferences"] = [owner]
    with pytest.raises(NotFollowedError, match="claim x is not owned by this pod"):
        claimed_devices(spec, base, extended, {"x": special}, _node(), uid="u1")
    # Owned, but not as its controller: not the scheduler's claim for this pod either.
    special["metadata"]["ownerReferences"] = [{**owner, "uid": "u1", "controller": False}]
    with pytest.raises(NotFollowedError, match="not owned by this pod"):
        claimed_devices(spec, base, extended, {"x": special}, _node(), uid="u1")
    special["metadata"]["ownerReferences"] = [{**owner, "name": "train", "uid": "u1"}]
    held = claimed_devices(spec, base, extended, {"x": special}, _node(), uid="u1")
    assert held.gpus == {"main": [4, 5]}
