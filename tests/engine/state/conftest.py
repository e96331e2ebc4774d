"""A small real-shaped node for `NodeState` tests."""

from __future__ import annotations

import pytest

from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import Cpu, Gpu, Nic, NumaNode, NumatopologySpec

GiB = 2**30


def dgx1v_trimmed() -> NumatopologySpec:
    """DGX-1V's shape cut down: 2 sockets x 2 SMT cores, 2 GPUs and 1 NIC per socket.

    CPUs are numbered like the real machine (first threads, then their siblings), the
    first core is reserved for the system, and huge pages are scarce so they run out.
    """
    cpus = [Cpu(id=i, core=i % 4, socket=i % 4 // 2, numa=i % 4 // 2) for i in range(8)]
    return NumatopologySpec(
        reserved_cpus=CPUSet.parse("0,4"),
        numa_nodes=[
            NumaNode(
                id=0,
                cpus=CPUSet.parse("0-1,4-5"),
                memory_bytes=GiB,
                hugepages={"2Mi": 4, "1Gi": 1},
                distances={"0": 10, "1": 21},
            ),
            NumaNode(
                id=1,
                cpus=CPUSet.parse("2-3,6-7"),
                memory_bytes=GiB,
                hugepages={"2Mi": 4},
                distances={"0": 21, "1": 10},
            ),
        ],
        cpus=cpus,
        gpus=[Gpu(index=i, uuid=f"GPU-{i}", numa=i // 2) for i in range(4)],
        nics=[Nic(name="mlx5_0", numa=0), Nic(name="mlx5_1", numa=1)],
    )


@pytest.fixture(scope="session")
def node() -> NumatopologySpec:
    return dgx1v_trimmed()
