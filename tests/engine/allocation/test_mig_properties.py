"""MIG in the engine, over random MIG layouts of a real DGX A100 topology: MIG devices are
never booked twice, never mixed with whole GPUs, always on the pod's NUMA nodes, and a
GPU in MIG mode is never handed out whole nor counted as an NVLink peer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numatopo_engine import NodeState, allocate, evaluate, request_from_pod
from numatopo_engine.allocation import evaluate_many
from numatopo_engine.annotations import GpuLinksMode
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.gpu_assignment import choose_gpus
from numatopo_engine.model import MigDevice, Numatopology, NumatopologySpec
from numatopo_engine.topology_tables import build_tables

NODE = Path(__file__).resolve().parents[2] / "fixtures" / "pods" / "nodes" / "dgx-a100-mig.json"
BASE = Numatopology.model_validate(json.loads(NODE.read_text())).spec
# Full A100-80GB layouts (`nvidia-smi mig -lgip` profiles).
LAYOUTS = [["7g.80gb"], ["3g.40gb", "3g.40gb"], ["1g.10gb"] * 7, ["4g.40gb", "2g.20gb", "1g.10gb"]]
LINKS = ["preferred", "required"]
RESOURCES = [
    "nvidia.com/gpu",
    *(f"nvidia.com/mig-{p}" for p in ("7g.80gb", "3g.40gb", "2g.20gb", "1g.10gb", "4g.40gb")),
]


@st.composite
def mig_nodes(draw: st.DrawFn) -> NumatopologySpec:
    """The A100 node with a random set of GPUs in MIG mode, each with a random layout."""
    index = len(BASE.gpus)
    gpus = []
    for gpu in BASE.gpus:
        layout = draw(st.none() | st.sampled_from(LAYOUTS))
        devices = None
        if layout is not None:
            devices = []
            for profile in layout:
                devices.append(MigDevice(index=index, profile=profile, uuid=f"MIG-{index}"))
                index += 1
        gpus.append(gpu.model_copy(update={"mig_mode": layout is not None, "mig_devices": devices}))
    return NumatopologySpec.model_validate(BASE.model_copy(update={"gpus": gpus}).model_dump())


def pod(name: str, resource: str, count: int, links: str) -> dict[str, object]:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "annotations": {
            "numatopo.io/policy": "single-numa-node", "numatopo.io/gpu-links": links}},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {
            "cpu": "2", "memory": "1Gi", resource: str(count)}}}]},
    }  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=mig_nodes(),
    pods=st.lists(
        st.tuples(st.sampled_from(RESOURCES), st.integers(1, 4), st.sampled_from(LINKS)),
        min_size=1, max_size=12,
    ),
)  # fmt: skip
def test_mig_devices_are_placed_like_gpus_and_never_twice(
    spec: NumatopologySpec, pods: list[tuple[str, int, str]]
) -> None:
    in_mig_mode = {g.index for g in spec.gpus if g.mig_mode}
    mig = {m.index: (g, m) for g in spec.gpus for m in g.mig_devices or ()}
    tables = build_tables(spec)
    assert not any(a in in_mig_mode or b in in_mig_mode for a, b in tables.gpu_bandwidth)
    state = NodeState(spec)
    taken: set[int] = set()
    for number, (resource, count, links) in enumerate(pods):
        request = request_from_pod(pod(f"p{number}", resource, count, links))
        # The extender's paths (one node, many nodes at once) agree with the decision.
        batch = evaluate_many(spec, [state, state.copy()], request)
        if not isinstance(batch[0], int):
            with pytest.raises(UnsatisfiableError) as refused:
                allocate(spec, state, request, "n")
            assert refused.value.reason == batch[0].reason
            assert not isinstance(batch[1], int)
            continue
        decision = allocate(spec, state, request, "n")
        assert decision.score == evaluate(spec, state, request) == batch[0] == batch[1]
        state.apply(request.key, decision.assignment)  # raises on any double booking
        container = decision.assignment.containers["main"]
        given_ = [*container.gpu_indices, *container.mig_indices]
        assert len(given_) == count
        assert not taken & set(given_)
        taken |= set(given_)
        numa = set(decision.assignment.numa_nodes)
        if resource == "nvidia.com/gpu":
            assert container.mig_indices == []
            assert not in_mig_mode & set(container.gpu_indices)
            assert {spec.gpus[g].numa for g in container.gpu_indices} <= numa
        else:
            assert container.gpu_indices == []
            for index in container.mig_indices:
                parent, device = mig[index]
                assert device.resource == resource
                assert parent.numa in numa
            assert container.mig == [mig[i][1].uuid for i in container.mig_indices]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=mig_nodes(), count=st.integers(2, 4))
def test_required_links_never_pick_a_gpu_in_mig_mode(spec: NumatopologySpec, count: int) -> None:
    tables = build_tables(spec)
    whole = frozenset(g for g, r in tables.gpu_resource.items() if r == "nvidia.com/gpu")
    chosen = choose_gpus(tables, whole, count, GpuLinksMode.REQUIRED)
    expected_fit = len(whole) >= count  # NVSwitch: every whole pair is linked
    assert (chosen is not None) == expected_fit
    assert chosen is None or not {g.index for g in spec.gpus if g.mig_mode} & set(chosen)
