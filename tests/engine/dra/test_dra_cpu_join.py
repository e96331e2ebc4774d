"""CPUs published by dra-driver-cpu joined with the spec: its individual mode (one
device per CPU) becomes CPUs of the model; its grouped devices and a device whose NUMA
node disagrees with the spec are not joined."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import kubernetes_validate

from dra_objects import cpu_slice, gpu_slice
from numatopo_engine.dra import api
from numatopo_engine.dra.join import DeviceKind, dra_devices, join_node
from numatopo_engine.model import Numatopology, NumatopologySpec

NODE = "p4d-a"
TOPOLOGY = Path(__file__).resolve().parents[2] / "fixtures" / "topologies" / "aws-p4d.json"


def spec() -> NumatopologySpec:
    return Numatopology.model_validate(json.loads(TOPOLOGY.read_text())).spec


def test_each_cpu_device_is_the_cpu_of_its_id() -> None:
    body = cpu_slice(NODE, spec())
    kubernetes_validate.validate(body, "1.34.0", strict=True)
    joined = join_node(NODE, spec(), [api.ResourceSlice.model_validate(body)])
    of_cpu = joined.of_cpu()
    assert sorted(of_cpu) == sorted(c.id for c in spec().cpus)
    numa = {c.id: c.numa for c in spec().cpus}
    assert all(d.kind is DeviceKind.CPU and d.numa == numa[d.cpu] for d in joined.devices)
    # Threads of one core get consecutive device names, as the driver numbers them.
    first, second = joined.devices[0], joined.devices[1]
    assert (first.id.device, second.id.device) == ("cpudev000", "cpudev001")
    assert {first.cpu, second.cpu} == {0, 48}


def test_grouped_devices_and_a_numa_node_unlike_the_specs_are_not_joined() -> None:
    body = cpu_slice(NODE, spec())
    devices = body["spec"]["devices"]
    wrong = devices[0]["attributes"]
    wrong["resource.kubernetes.io/numaNode"] = {"int": 1 - wrong["dra.cpu/cpuID"]["int"] // 48}
    grouped = copy.deepcopy(devices[1])
    grouped["name"] = "cpudevnuma000"
    del grouped["attributes"]["dra.cpu/cpuID"]
    body["spec"]["devices"] = [devices[0], grouped]
    joined = join_node(NODE, spec(), [api.ResourceSlice.model_validate(body)])
    assert [d.kind for d in joined.devices] == [DeviceKind.OTHER, DeviceKind.OTHER]
    assert "NUMA node" in joined.devices[0].why
    assert "cpuID" in joined.devices[1].why


def test_status_counts_cpus_per_driver_and_pool() -> None:
    slices = [cpu_slice(NODE, spec()), gpu_slice(NODE, spec())]
    joined = join_node(NODE, spec(), [api.ResourceSlice.model_validate(s) for s in slices])
    status = dra_devices(joined)
    assert status is not None
    assert status.summary == f"dra.cpu/{NODE}: 96 CPUs; gpu.nvidia.com/{NODE}: 8 GPUs"
    assert len([d for d in status.devices if d.cpu is not None]) == 96
