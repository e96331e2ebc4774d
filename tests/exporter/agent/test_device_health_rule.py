"""`follow.unhealthy_devices`: the kubelet's allocatable listing -> the spec's devices it
does not offer, per resource (listed and understood / listed in another ID scheme /
not listed)."""

from __future__ import annotations

from numatopo_engine.model import Gpu, MigDevice, Nic, NumatopologySpec
from numatopo_exporter.agent.follow import unhealthy_devices

SPEC = NumatopologySpec(
    gpus=[
        Gpu(index=0, uuid="GPU-aa", pci_bus_id="0000:1b:00.0"),
        Gpu(index=1, uuid="GPU-bb"),
        Gpu(index=2, uuid="GPU-cc", mig_mode=True,
            mig_devices=[MigDevice(index=8, profile="3g.40gb", uuid="MIG-x"),
                         MigDevice(index=9, profile="3g.40gb", uuid="MIG-y")]),
    ],
    nics=[
        Nic(name="mlx5_0", pci_bus_id="0000:1a:00.0", netdevs=["ib0"]),
        Nic(name="mlx5_1", pci_bus_id="0000:9a:00.0", netdevs=["ib1"]),
        Nic(name="mlx5_2", resource="rdma/shared"),
    ],
)  # fmt: skip


def test_a_gpu_or_nic_the_kubelet_does_not_list_is_unhealthy() -> None:
    found = unhealthy_devices(
        SPEC,
        {
            "nvidia.com/gpu": {"GPU-AA::1", "GPU-aa::2"},  # time-sliced replicas, any case
            "nvidia.com/mig-3g.40gb": {"MIG-y"},
            "rdma/ib": {"0000:1a:00.0"},
            "rdma/shared": {"1", "2"},  # a shared pool: its IDs name no NIC, no verdict
        },
    )
    assert found.gpus == [1, 8]
    assert found.nics == ["mlx5_1"]


def test_a_resource_the_kubelet_does_not_list_has_no_healthy_device() -> None:
    found = unhealthy_devices(SPEC, {"rdma/ib": {"ib1"}})
    assert found.gpus == [0, 1, 8, 9]
    assert found.nics == ["mlx5_0", "mlx5_2"]


def test_every_device_listed_is_healthy() -> None:
    found = unhealthy_devices(
        SPEC,
        {
            "nvidia.com/gpu": {"0000:1b:00.0", "GPU-bb"},
            "nvidia.com/mig-3g.40gb": {"MIG-x", "MIG-y"},
            "rdma/ib": {"mlx5_0", "mlx5_1"},
            "rdma/shared": {"mlx5_2"},
        },
    )
    assert found.to_wire() == {"gpus": [], "nics": []}
