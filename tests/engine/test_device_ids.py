"""Device plugin IDs map to an assignment's GPUs under every ID strategy NVIDIA's
plugin has (uuid, index, time-slicing replicas) and never to another GPU."""

from __future__ import annotations

from numatopo_engine.device_ids import base_id, device_ids_for, same_gpu

UUID_A = "GPU-0c6c9a1d-8f5e-4b1e-9d0e-1a2b3c4d5e6f"
UUID_B = "GPU-7f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"


def test_uuid_index_and_replica_ids_name_the_same_gpu() -> None:
    assert same_gpu(UUID_A, UUID_A, 0)
    assert same_gpu(UUID_A.upper(), UUID_A, 0)
    assert same_gpu(UUID_A + "::3", UUID_A, 0)
    assert same_gpu("0", UUID_A, 0)
    assert same_gpu("00000000:17:00.0", "0000:17:00.0", 2)
    assert not same_gpu(UUID_B, UUID_A, 0)
    assert not same_gpu("1", UUID_A, 0)
    assert base_id(UUID_A + "::12") == UUID_A


def test_device_ids_follow_assignment_order_and_need_every_gpu() -> None:
    available = ["1", "0", "3"]
    assert device_ids_for([UUID_B, UUID_A], [1, 0], available) == ["1", "0"]
    assert device_ids_for([UUID_A], [2], available) is None
    # Two replicas of one GPU are two devices: each is used once.
    replicas = [UUID_A + "::0", UUID_A + "::1"]
    assert device_ids_for([UUID_A, UUID_A], [0, 0], replicas) == replicas


def test_device_ids_map_to_the_nodes_gpu_indices() -> None:
    from numatopo_engine.device_ids import gpu_indices
    from numatopo_engine.model import Gpu

    gpus = [Gpu(index=0, uuid=UUID_A), Gpu(index=1, uuid=UUID_B), Gpu(index=2)]
    assert gpu_indices([UUID_B, UUID_A + "::1"], gpus) == [1, 0]
    assert gpu_indices(["2", "0"], gpus) == [2, 0]
    assert gpu_indices(["mlx5_0"], gpus) is None
