"""Follow compares RDMA NICs too: the IDs an RDMA plugin gives (PCI address, RDMA
device or netdev name) are mapped to the node's NICs and compared with the assignment's
`nics`; a shared pool's IDs name no NIC and are not compared."""

from __future__ import annotations

from numatopo_engine import DEFAULT_RESOURCES
from numatopo_engine.annotations import Assignment, ContainerAssignment, Observed
from numatopo_engine.model import Nic
from numatopo_exporter.agent.follow import gpu_words, observe

NICS = [
    Nic(name="mlx5_0", pci_bus_id="0000:18:00.0", netdevs=["ibp24s0"]),
    Nic(name="mlx5_1", pci_bus_id="0000:2a:00.0", netdevs=["ibp42s0"]),
]
GPU = "GPU-aaaa"


def given(*nics: str) -> Assignment:
    container = ContainerAssignment(gpus=[GPU], gpu_indices=[0], nics=list(nics))
    return Assignment(node="n", containers={"main": container})


def seen(assignment: Assignment, nic_ids: dict[str, list[str]]) -> Observed:
    found = observe(
        assignment,
        {"main": {"nvidia.com/gpu": [GPU], **nic_ids}},
        containers=["main"],
        is_gpu=DEFAULT_RESOURCES.is_gpu,
        is_nic=DEFAULT_RESOURCES.is_nic,
        nics=NICS,
    )
    assert found is not None
    return found


def test_held_nics_named_by_pci_address_or_netdev_that_are_the_assigned_ones_match() -> None:
    assert seen(given("mlx5_0"), {"rdma/ib": ["0000:18:00.0"]}).mismatched == []
    assert seen(given("mlx5_1"), {"rdma/ib": ["ibp42s0"]}).mismatched == []


def test_another_nic_than_assigned_is_a_mismatch_named_in_words() -> None:
    assignment = given("mlx5_0")
    found = seen(assignment, {"rdma/ib": ["0000:2a:00.0"]})
    assert found.mismatched == ["main"]
    words = gpu_words(found, assignment, DEFAULT_RESOURCES.is_gpu, DEFAULT_RESOURCES.is_nic)
    assert "NICs ['0000:2a:00.0'] but was assigned ['mlx5_0']" in words


def test_a_shared_pools_ids_name_no_nic_and_are_not_compared() -> None:
    found = seen(given("mlx5_0"), {"rdma/hca_shared_devices_a": ["1", "2"]})
    assert found.mismatched == []
