"""A MIG node pool for `numatopo simulate` (pure): some nodes split every GPU into MIG devices, and
the trace's small GPU-sharing pods ask for one such device.

`--mig-pool SHARE:PROFILE[:MODEL,...]` picks SHARE of the nodes of the given trace GPU models
(default `G3`: 8x A100 on NVSwitch in the default map) by the run's seed, and splits each of their
GPUs into as many PROFILE devices as fit in its 7 slices (A100/H100 80GB: 1g.10gb x7, 2g.20gb x3,
3g.40gb x2, 4g.40gb x1, 7g.80gb x1): devices on their GPU's NUMA node, without NVLinks (MIG turns
them off), under the model name `<model>/mig-<profile>`.

The mapping of the trace's pods:
  * a fractional pod (one GPU, a share below 1000 milli) whose share fits the profile's compute
    share (`slices / 7`: 1g = 142 milli, 2g = 285, 3g = 428, 4g = 571, 7g = 1000) asks for one
    MIG device (`nvidia.com/mig-<profile>: 1`), on pool nodes only;
  * every other GPU pod stays off the pool: a GPU in MIG mode is never handed out whole nor shared;
  * CPU-only pods go anywhere.

So on pool nodes a "GPU" of the replay's counters (GPU counts, allocation rates) is a MIG device.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from numatopo_engine.simulation.layouts import Layout, TopologyMap
from numatopo_engine.simulation.trace import GPU_MILLI, NodeRow, PodRow

GPU_SLICES = 7
# Compute slices of each A100/H100 80GB GPU instance profile (`nvidia-smi mig -lgip`).
MIG_PROFILES = {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 3, "4g.40gb": 4, "7g.80gb": 7}
DEFAULT_MODELS = ("G3",)


class MigPoolError(ValueError):
    """`--mig-pool` cannot be used as given; the message says why."""


@dataclass(frozen=True, slots=True)
class MigPool:
    share: float
    profile: str
    models: tuple[str, ...] = DEFAULT_MODELS

    @property
    def per_gpu(self) -> int:
        return GPU_SLICES // MIG_PROFILES[self.profile]

    @property
    def device_milli(self) -> int:
        """The compute share of one device, in the trace's GPU milli."""
        return MIG_PROFILES[self.profile] * GPU_MILLI // GPU_SLICES

    def model_of(self, model: str) -> str:
        return f"{model}/mig-{self.profile}"


def parse_mig_pool(text: str) -> MigPool:
    """`0.25:1g.10gb` or `0.5:3g.40gb:G3,V100M32`."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise MigPoolError(f"--mig-pool {text!r}: expected SHARE:PROFILE[:MODEL,...]")
    try:
        share = float(parts[0])
    except ValueError:
        raise MigPoolError(f"--mig-pool {text!r}: share {parts[0]!r} is not a number") from None
    if not 0 < share <= 1:
        raise MigPoolError(f"--mig-pool {text!r}: share must be in (0, 1]")
    if parts[1] not in MIG_PROFILES:
        raise MigPoolError(
            f"--mig-pool {text!r}: unknown profile {parts[1]!r}; one of {', '.join(MIG_PROFILES)}"
        )
    models = tuple(m.strip() for m in parts[2].split(",") if m.strip()) if len(parts) == 3 else ()
    return MigPool(share, parts[1], models or DEFAULT_MODELS)


@dataclass(frozen=True, slots=True)
class MigPoolPlan:
    """The replay's input with the pool applied, and what the pool took."""

    nodes: list[NodeRow]
    workload: list[PodRow]
    topology_map: TopologyMap
    pool_nodes: int
    mig_devices: int
    mig_pods: int
    resource: str

    def summary(self) -> dict[str, object]:
        return {
            "resource": self.resource,
            "nodes": self.pool_nodes,
            "devices": self.mig_devices,
            "pods": self.mig_pods,
        }


def apply_mig_pool(
    nodes: Sequence[NodeRow],
    workload: Sequence[PodRow],
    topology_map: TopologyMap,
    pool: MigPool,
    *,
    seed: int,
) -> MigPoolPlan:
    """Split the pool's nodes into MIG devices and map the pods (module docstring)."""
    eligible = [i for i, n in enumerate(nodes) if n.model in pool.models and n.gpus]
    if not eligible:
        raise MigPoolError(
            f"--mig-pool: no node of model {', '.join(pool.models)} with GPUs in the cluster"
        )
    count = max(1, round(pool.share * len(eligible)))
    chosen = set(random.Random(seed).sample(eligible, count))
    layouts = dict(topology_map.layouts)
    models = {m: dict(by_count) for m, by_count in topology_map.models.items()}
    rows: list[NodeRow] = []
    for index, node in enumerate(nodes):
        if index not in chosen:
            rows.append(node)
            continue
        devices = node.gpus * pool.per_gpu
        parent = topology_map.layout_for(node.model, node.gpus)
        name = f"{parent.name}/mig-{pool.profile}"
        layouts[name] = Layout(
            name,
            tuple(
                parent.numa_of(g, node.gpus) for g in range(node.gpus) for _ in range(pool.per_gpu)
            ),
        )
        models.setdefault(pool.model_of(node.model), {})[str(devices)] = name
        rows.append(replace(node, gpus=devices, model=pool.model_of(node.model)))
    pool_models = tuple(sorted({r.model for r in rows if r.model.endswith(f"/mig-{pool.profile}")}))
    other_models = tuple(sorted({r.model for r in rows if r.gpus} - set(pool_models)))
    mapped: list[PodRow] = []
    mig_pods = 0
    for pod in workload:
        small = pod.fractional and pod.gpu_milli <= pool.device_milli
        if small and (not pod.gpu_spec or set(pod.gpu_spec) & set(pool.models)):
            mapped.append(replace(pod, gpu_milli=GPU_MILLI, gpu_spec=pool_models))
            mig_pods += 1
        elif pod.num_gpu and not pod.gpu_spec:
            mapped.append(replace(pod, gpu_spec=other_models))
        else:
            mapped.append(pod)
    return MigPoolPlan(
        nodes=rows,
        workload=mapped,
        topology_map=TopologyMap(layouts=layouts, models=models, default=topology_map.default),
        pool_nodes=len(chosen),
        mig_devices=sum(r.gpus for i, r in enumerate(rows) if i in chosen),
        mig_pods=mig_pods,
        resource=f"nvidia.com/mig-{pool.profile}",
    )
