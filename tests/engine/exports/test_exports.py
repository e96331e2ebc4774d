"""NodeResourceTopology and Volcano Numatopology from real topologies and real bookings.

Topologies: the fixtures of tests/fixtures/topologies (an 8x H100 NVSwitch node, an
AWS p4d with EFA NICs, a GB200-like node whose GPU memory is 32 NUMA nodes of their
own...) and the IBM x3950 M2's hwloc XML (4 NUMA nodes, SLIT 10/26). Every object is
validated against the published CRD (tests/fixtures/schemas).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from foreign_schemas import nrt_errors, volcano_errors
from numatopo_engine.allocation import allocate
from numatopo_engine.annotations import Assignment, ContainerAssignment, PolicyName
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.devices import schedulable_devices
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.exports.nrt import node_resource_topology, topology_policy
from numatopo_engine.exports.volcano import volcano_numatopology
from numatopo_engine.exports.zones import DeviceNames
from numatopo_engine.model import Numatopology, NumatopologySpec
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.state import NodeState
from numatopo_exporter.discovery.hwloc_xml import read_hwloc_xml

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
TOPOLOGIES = sorted((FIXTURES / "topologies").glob("*.json"))
GIB = 1 << 30


def load(name: str) -> NumatopologySpec:
    return Numatopology.model_validate_json((FIXTURES / "topologies" / name).read_text()).spec


def x3950() -> NumatopologySpec:
    return read_hwloc_xml(FIXTURES / "hwloc-xml" / "96em64t-4n4d3ca2co-pci.xml")


def dgx_a100_mig() -> NumatopologySpec:
    """The DGX A100 with GPUs 0, 1 and 4 in MIG mode (tests/fixtures/pods/nodes)."""
    path = FIXTURES / "pods" / "nodes" / "dgx-a100-mig.json"
    return Numatopology.model_validate_json(path.read_text()).spec


def with_policies(spec: NumatopologySpec, **changes: object) -> NumatopologySpec:
    wire = spec.to_wire()
    for key, value in changes.items():
        if key == "reservedCPUs":
            wire[key] = value
        else:
            wire["policies"][key] = value
    return NumatopologySpec.model_validate(wire)


def resources(nrt: dict[str, object], zone: str) -> dict[str, tuple[str, str, str]]:
    """Resource -> (capacity, allocatable, available) of one zone of an NRT wire dict."""
    found = next(z for z in nrt["zones"] if z["name"] == zone)  # type: ignore[union-attr,index]
    return {
        r["name"]: (r["capacity"], r["allocatable"], r["available"]) for r in found["resources"]
    }


def counted_by_name(nrt: dict[str, Any]) -> dict[str, list[int]]:
    """[capacity, available] of each resource name, summed over the zones."""
    counted: dict[str, list[int]] = {}
    for zone in nrt["zones"]:
        for r in zone["resources"]:
            slot = counted.setdefault(r["name"], [0, 0])
            slot[0] += int(r["capacity"])
            slot[1] += int(r["available"])
    return counted


def booked(spec: NumatopologySpec, pods: dict[str, ContainerAssignment]) -> NodeState:
    state = NodeState(spec)
    for key, container in pods.items():
        state.apply(key, Assignment(node="n", containers={"main": container}))
    return state


@pytest.mark.parametrize(
    "spec",
    [pytest.param(load(p.name), id=p.stem) for p in TOPOLOGIES]
    + [pytest.param(x3950(), id="x3950-4numa")],
)
def test_one_zone_per_numa_node_costed_by_slit_distance(spec: NumatopologySpec) -> None:
    nrt = node_resource_topology("node-a", spec, NodeState(spec)).to_wire()

    expected = [
        {
            "name": f"node-{n.id}",
            "type": "Node",
            "costs": [
                {"name": f"node-{other}", "value": d}
                for other, d in sorted((int(k), v) for k, v in n.distances.items())
            ],
        }
        for n in sorted(spec.numa_nodes, key=lambda n: n.id)
    ]
    assert expected == [{k: z[k] for k in ("name", "type", "costs")} for z in nrt["zones"]]
    assert [] == nrt_errors(nrt)


def test_four_numa_machine_costs_are_its_slit_matrix() -> None:
    nrt = node_resource_topology("x3950", x3950(), NodeState(x3950())).to_wire()

    matrix = [[c["value"] for c in z["costs"]] for z in nrt["zones"]]
    assert [
        [10, 26, 26, 26],
        [26, 10, 26, 26],
        [26, 26, 10, 26],
        [26, 26, 26, 10],
    ] == matrix
    assert ("24", "24", "24") == resources(nrt, "node-2")["cpu"]


def test_h100_capacity_allocatable_and_available_follow_reserved_cpus_and_bookings() -> None:
    spec = with_policies(load("h100-nvswitch.json"), reservedCPUs="0,104")
    state = booked(
        spec,
        {
            "ml/train": ContainerAssignment(
                cpus=CPUSet.parse("52-59"),
                mems=CPUSet([1]),
                gpu_indices=[4, 5],
                memory={"1": 64 * GIB},
                hugepages={"1": {"2Mi": GIB}},
            ),
            # Shared-pool CPUs are not exclusive: they leave `available` as it is.
            "ml/notebook": ContainerAssignment(
                cpus=CPUSet.parse("0-51"), exclusive=False, mems=CPUSet([0]), gpu_indices=[0]
            ),
        },
    )

    nrt = node_resource_topology("h100-a", spec, state).to_wire()

    tib, two_gib = str(1 << 40), str(2 * GIB)
    assert {
        "cpu": ("104", "102", "102"),
        "memory": (tib, tib, tib),
        "hugepages-2Mi": (two_gib, two_gib, two_gib),
        "nvidia.com/gpu": ("4", "4", "3"),
    } == resources(nrt, "node-0")
    assert {
        "cpu": ("104", "104", "96"),
        "memory": (tib, tib, str((1 << 40) - 64 * GIB)),
        "hugepages-2Mi": (two_gib, two_gib, str(GIB)),
        "nvidia.com/gpu": ("4", "4", "2"),
    } == resources(nrt, "node-1")
    assert [] == nrt_errors(nrt)


def test_every_device_resource_is_counted_under_its_own_name() -> None:
    """NICs (rdma/...) and GPUs of any vendor: a zone lists each resource name it holds."""
    wire = load("aws-p4d.json").to_wire()
    wire["gpus"][0]["resource"] = "amd.com/gpu"
    spec = NumatopologySpec.model_validate(wire)
    nic = next(n for n in spec.nics if n.numa is not None)
    state = booked(spec, {"a/b": ContainerAssignment(nics=[nic.name], mems=CPUSet([nic.numa]))})

    nrt = node_resource_topology("p4d", spec, state).to_wire()

    names = {
        r["name"]: (r["capacity"], r["available"]) for z in nrt["zones"] for r in z["resources"]
    }
    gpu_zone = f"node-{spec.gpus[0].numa}"
    assert ("1", "1") == resources(nrt, gpu_zone)["amd.com/gpu"][::2]
    per_resource: dict[str, int] = {}
    for n in spec.nics:
        if n.numa == nic.numa:
            per_resource[n.resource] = per_resource.get(n.resource, 0) + 1
    count = per_resource[nic.resource]
    zone = resources(nrt, f"node-{nic.numa}")
    assert (str(count), str(count), str(count - 1)) == zone[nic.resource]
    assert nic.resource in names
    assert [] == nrt_errors(nrt)


def test_devices_a_dra_driver_publishes_are_counted_under_the_name_given() -> None:
    """Half the GPUs and one NIC named by their DRA driver and pool: those are counted
    under that name, the others under the spec's resource; the totals are unchanged."""
    spec = load("aws-p4d.json")
    dra_gpus = [g.index for g in spec.gpus][:4]
    nic = spec.nics[0]
    names = DeviceNames(
        gpus=dict.fromkeys(dra_gpus, ("gpu.nvidia.com/p4d",)), nics={nic.name: ("dra.net/p4d",)}
    )
    state = booked(spec, {"a/b": ContainerAssignment(gpu_indices=dra_gpus[:1])})

    nrt = node_resource_topology("p4d", spec, state, names).to_wire()

    counted = counted_by_name(nrt)
    assert counted["gpu.nvidia.com/p4d"] == [4, 3]
    assert counted["nvidia.com/gpu"] == [len(spec.gpus) - 4, len(spec.gpus) - 4]
    assert counted["dra.net/p4d"] == [1, 1]
    assert counted[nic.resource][0] == sum(n.resource == nic.resource for n in spec.nics) - 1
    gpu_zone = resources(nrt, f"node-{spec.gpus[dra_gpus[0]].numa}")
    assert "gpu.nvidia.com/p4d" in gpu_zone
    assert [] == nrt_errors(nrt)


def test_a_device_with_several_names_is_counted_under_each() -> None:
    """GPUs two DeviceClasses serve as extended resources (all as `example.com/gpu`, the
    first four also as `example.com/gpu-low`): each name counts the GPUs a pod asking it
    can get, and a booked GPU is available under neither."""
    spec = load("aws-p4d.json")
    both = ("example.com/gpu", "example.com/gpu-low")
    names = DeviceNames(gpus={g.index: both if g.index < 4 else both[:1] for g in spec.gpus})
    state = booked(spec, {"a/b": ContainerAssignment(gpu_indices=[0])})

    nrt = node_resource_topology("p4d", spec, state, names).to_wire()

    counted = counted_by_name(nrt)
    assert counted["example.com/gpu"] == [8, 7]
    assert counted["example.com/gpu-low"] == [4, 3]
    assert "nvidia.com/gpu" not in counted
    assert [] == nrt_errors(nrt)


def test_a_name_dra_serves_on_the_node_counts_only_the_devices_it_serves() -> None:
    """A DeviceClass serves `nvidia.com/gpu` (the spec's name) from the six GPUs the driver
    publishes; GPUs 6 and 7 it does not publish. On that node kube-scheduler serves the
    name through DRA alone (no device plugin lists it), so the NRT counts 6 under it, 5
    available, not 8: the two unpublished GPUs no pod asking it can get. The NICs,
    named by no class, keep the spec's names."""
    spec = load("aws-p4d.json")
    gpu = spec.gpus[0].resource
    names = DeviceNames(gpus={g.index: (gpu,) for g in spec.gpus if g.index < 6})
    state = booked(spec, {"a/b": ContainerAssignment(gpu_indices=[0])})

    nrt = node_resource_topology("p4d", spec, state, names).to_wire()

    counted = counted_by_name(nrt)
    assert counted[gpu] == [6, 5]
    assert counted[spec.nics[0].resource][0] == sum(
        n.resource == spec.nics[0].resource for n in spec.nics
    )
    assert [] == nrt_errors(nrt)


@pytest.mark.parametrize(
    ("policy", "scope", "word"),
    [
        ("single-numa-node", "container", "SingleNUMANodeContainerLevel"),
        ("single-numa-node", "pod", "SingleNUMANodePodLevel"),
        ("restricted", "pod", "RestrictedPodLevel"),
        ("best-effort", "container", "BestEffortContainerLevel"),
        ("none", "container", "None"),
        ("prefer-closest-numa", "pod", "None"),
    ],
)
def test_kubelet_policy_and_scope_are_attributes(policy: str, scope: str, word: str) -> None:
    spec = with_policies(
        load("dgx1-v100.json"), topologyManagerPolicy=policy, topologyManagerScope=scope
    )

    nrt = node_resource_topology("dgx", spec, NodeState(spec)).to_wire()

    assert [
        {"name": "topologyManagerPolicy", "value": policy},
        {"name": "topologyManagerScope", "value": scope},
    ] == nrt["attributes"]
    assert [word] == nrt["topologyPolicies"] == [topology_policy(policy, scope)]
    assert {"name": "dgx", "labels": {"app.kubernetes.io/managed-by": "numatopo"}} == nrt[
        "metadata"
    ]


def test_a_key_that_is_no_page_size_is_left_out() -> None:
    wire = load("pcie-8gpu.json").to_wire()
    wire["numaNodes"][0]["hugepages"]["huge"] = 3
    spec = NumatopologySpec.model_validate(wire)

    nrt = node_resource_topology("n", spec, NodeState(spec)).to_wire()

    assert not any(r.startswith("hugepages-huge") for r in resources(nrt, "node-0"))
    assert "hugepages-2Mi" in resources(nrt, "node-0")


# -- Volcano -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [pytest.param(load(p.name), id=p.stem) for p in TOPOLOGIES]
    + [pytest.param(x3950(), id="x3950-4numa")],
)
def test_volcano_cpu_detail_maps_every_online_cpu_to_its_numa_node(
    spec: NumatopologySpec,
) -> None:
    volcano = volcano_numatopology("n", spec, NodeState(spec)).to_wire()

    detail = volcano["spec"]["cpuDetail"]
    rows = {c.id: c for c in spec.cpus}
    for node in spec.numa_nodes:
        for cpu in node.cpus:
            assert node.id == detail[str(cpu)]["numa"]
            if cpu in rows:
                assert (rows[cpu].socket, rows[cpu].core) == (
                    detail[str(cpu)]["socket"],
                    detail[str(cpu)]["core"],
                )
    assert len(spec.online_cpus()) == len(detail)
    assert [] == volcano_errors(volcano)


def test_volcano_allocatable_is_the_cpus_numaaware_may_still_hand_out() -> None:
    spec = with_policies(
        load("h100-nvswitch.json"),
        reservedCPUs="0,104",
        cpuManagerPolicy="static",
        topologyManagerPolicy="single-numa-node",
    )
    state = booked(
        spec,
        {
            "ml/train": ContainerAssignment(
                cpus=CPUSet.parse("2-5,106-109"),
                mems=CPUSet([0]),
                gpu_indices=[1],
                memory={"0": 8 * GIB},
                hugepages={"0": {"2Mi": 4 << 20}},
            ),
            "ml/shared": ContainerAssignment(cpus=CPUSet.parse("1"), exclusive=False),
        },
    )

    volcano = volcano_numatopology("h100-a", spec, state).to_wire()

    assert {
        "CPUManagerPolicy": "static",
        "TopologyManagerPolicy": "single-numa-node",
    } == volcano["spec"]["policies"]
    assert {"cpu": "2"} == volcano["spec"]["resReserved"]
    cpu = volcano["spec"]["numares"]["cpu"]
    assert 208 == cpu["capacity"]
    assert CPUSet.parse("0-207") - CPUSet.parse("0,104,2-5,106-109") == CPUSet.parse(
        cpu["allocatable"]
    )
    assert [
        {
            "name": "shared",
            "namespace": "ml",
            "containerAllocations": [{"name": "main", "allocations": {}}],
        },
        {
            "name": "train",
            "namespace": "ml",
            "containerAllocations": [
                {
                    "name": "main",
                    "allocations": {
                        "nvidia.com/gpu": "1",
                        "cpu": "2-5,106-109",
                        "memory": str(8 * GIB),
                        "hugepages-2Mi": str(4 << 20),
                    },
                }
            ],
        },
    ] == volcano["spec"]["podAllocations"]
    assert [] == volcano_errors(volcano)


def test_volcano_without_per_cpu_rows_still_maps_cpus_to_numa_nodes() -> None:
    wire = load("cpu-2socket-ht.json").to_wire()
    wire["cpus"] = []
    spec = NumatopologySpec.model_validate(wire)

    detail = volcano_numatopology("n", spec, NodeState(spec)).to_wire()["spec"]["cpuDetail"]

    for node in spec.numa_nodes:
        assert {node.id} == {detail[str(c)]["numa"] for c in node.cpus}


# -- filled by the engine, emptied again ------------------------------------------------


def _fill_requests(spec: NumatopologySpec, seed: int) -> list[PodRequest]:
    rng = random.Random(seed)
    gpu_resources = sorted({d.resource for d in schedulable_devices(spec)})
    pods = []
    for i in range(12):
        gpus = rng.choice([0, 1, 2]) if gpu_resources else 0
        container = ContainerRequest(
            name="main",
            cpu_milli=1000 * rng.choice([1, 2, 4, 8]),
            memory_bytes=GIB * rng.choice([1, 4]),
            gpus=gpus,
            gpu_resource=rng.choice(gpu_resources) if gpus else None,
        )
        pods.append(
            PodRequest(
                namespace="fill",
                name=f"p{i}",
                containers=(container,),
                options=TopologyOptions(policy=PolicyName.BEST_EFFORT),
            )
        )
    return pods


def _check_agrees_with_state(spec: NumatopologySpec, state: NodeState) -> None:
    """Every amount of both exports is what the ledger's state says is free."""
    nrt = node_resource_topology("n", spec, state).to_wire()
    free = state.free_cpus()
    free_gpus = state.free_gpus()
    devices = schedulable_devices(spec)
    for node in spec.numa_nodes:
        zone = resources(nrt, f"node-{node.id}")
        assert str(len(free & node.cpus)) == zone["cpu"][2]
        assert str(state.free_memory(node.id)) == zone["memory"][2]
        for resource in {d.resource for d in devices if d.numa == node.id}:
            unbooked = [d for d in devices if d.numa == node.id and d.resource == resource]
            assert str(sum(d.index in free_gpus for d in unbooked)) == zone[resource][2]
    volcano = volcano_numatopology("n", spec, state).to_wire()
    assert free == CPUSet.parse(volcano["spec"]["numares"]["cpu"]["allocatable"])
    assert sorted(k.partition("/")[2] for k in state.assignments) == [
        p["name"] for p in volcano["spec"]["podAllocations"]
    ]


@pytest.mark.parametrize(
    "spec",
    [pytest.param(load(p.name), id=p.stem) for p in TOPOLOGIES]
    + [pytest.param(x3950(), id="x3950-4numa"), pytest.param(dgx_a100_mig(), id="dgx-a100-mig")],
)
def test_exports_follow_the_engine_filling_and_emptying_a_node(spec: NumatopologySpec) -> None:
    state = NodeState(spec)
    empty = (
        node_resource_topology("n", spec, state).to_wire(),
        volcano_numatopology("n", spec, state).to_wire(),
    )
    placed = []
    for request in _fill_requests(spec, seed=len(spec.numa_nodes)):
        try:
            decision = allocate(spec, state, request, "n")
        except UnsatisfiableError:
            continue
        key = f"{request.namespace}/{request.name}"
        state.apply(key, decision.assignment)
        placed.append(key)
        _check_agrees_with_state(spec, state)
    assert placed, "the engine placed nothing: the check above never ran"
    full = node_resource_topology("n", spec, state).to_wire()
    assert [] == nrt_errors(full)
    assert [] == volcano_errors(volcano_numatopology("n", spec, state).to_wire())

    for key in placed:
        state.release(key)
        _check_agrees_with_state(spec, state)

    assert empty == (
        node_resource_topology("n", spec, state).to_wire(),
        volcano_numatopology("n", spec, state).to_wire(),
    )


# -- MIG ---------------------------------------------------------------------------------


def test_mig_devices_are_counted_under_their_own_resource_and_the_gpu_is_not() -> None:
    """The DGX A100 with GPUs 0, 1 (NUMA 0) and 4 (NUMA 1) in MIG mode: a GPU in MIG mode
    is advertised as its MIG devices only, as NVIDIA's device plugin (mixed strategy) does."""
    spec = dgx_a100_mig()
    state = booked(
        spec,
        {
            "ml/small": ContainerAssignment(
                cpus=CPUSet.parse("8-9"), mems=CPUSet([0]), mig_indices=[8, 10, 11]
            ),
            "ml/whole": ContainerAssignment(
                cpus=CPUSet.parse("10-11"), mems=CPUSet([0]), gpu_indices=[2]
            ),
        },
    )

    nrt = node_resource_topology("dgx", spec, state).to_wire()
    volcano = volcano_numatopology("dgx", spec, state).to_wire()

    zone0, zone1 = resources(nrt, "node-0"), resources(nrt, "node-1")
    assert ("2", "2", "1") == zone0["nvidia.com/gpu"]  # GPUs 2, 3; 2 is booked
    assert ("2", "2", "1") == zone0["nvidia.com/mig-3g.40gb"]
    assert ("7", "7", "5") == zone0["nvidia.com/mig-1g.10gb"]
    assert ("3", "3", "3") == zone1["nvidia.com/gpu"]
    assert ("2", "2", "2") == zone1["nvidia.com/mig-3g.40gb"]
    assert "nvidia.com/mig-1g.10gb" not in zone1
    small = next(p for p in volcano["spec"]["podAllocations"] if p["name"] == "small")
    allocations = small["containerAllocations"][0]["allocations"]
    assert ("1", "2") == (
        allocations["nvidia.com/mig-3g.40gb"],
        allocations["nvidia.com/mig-1g.10gb"],
    )
    assert ([], []) == (nrt_errors(nrt), volcano_errors(volcano))
