from __future__ import annotations

import pytest
from pydantic import ValidationError

from numatopo_engine.annotations import Assignment
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import Cpu, Gpu, GpuLink, NumaNode, Numatopology, NumatopologySpec


def two_numa_spec() -> NumatopologySpec:
    return NumatopologySpec(
        numa_nodes=[
            NumaNode(id=0, cpus=CPUSet.parse("0-1"), memory_bytes=2**30),
            NumaNode(id=1, cpus=CPUSet.parse("2-3"), memory_bytes=2**30),
        ],
        cpus=[Cpu(id=i, core=i, socket=i // 2, numa=i // 2) for i in range(4)],
        gpus=[Gpu(index=0, numa=0), Gpu(index=1, numa=1)],
        gpu_links=[GpuLink(a=0, b=1, links=4, bandwidth_g_bps=100)],
    )


def test_wire_roundtrip_uses_camel_case_and_cpulists() -> None:
    obj = Numatopology.model_validate({"metadata": {"name": "n1"}, "spec": two_numa_spec()})
    wire = obj.to_wire()

    assert "0-1" == wire["spec"]["numaNodes"][0]["cpus"]
    assert 100.0 == wire["spec"]["gpuLinks"][0]["bandwidthGBps"]
    assert obj == Numatopology.model_validate(wire)


def test_capacity_is_derived_not_trusted() -> None:
    wire = Numatopology(metadata={"name": "n"}, spec=two_numa_spec()).to_wire()  # type: ignore[arg-type]
    wire["spec"]["capacity"]["cpus"] = 999

    assert 4 == Numatopology.model_validate(wire).spec.capacity.cpus


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        pytest.param(
            lambda w: w["numaNodes"][0].update(cpus="0-x"), "invalid cpulist", id="bad-cpulist"
        ),
        pytest.param(lambda w: w["gpuLinks"][0].update(a=1, b=0), "a < b", id="link-order"),
        pytest.param(lambda w: w["cpus"][0].update(numa=7), "not listed", id="cpu-on-unknown-numa"),
        pytest.param(lambda w: w.update(bogus=1), "Extra inputs", id="unknown-field"),
    ],
)
def test_invalid_specs_are_rejected_with_a_reason(mutate, message) -> None:  # type: ignore[no-untyped-def]
    wire = two_numa_spec().to_wire()
    mutate(wire)

    with pytest.raises(ValidationError, match=message):
        NumatopologySpec.model_validate(wire)


def test_instances_that_named_the_same_fields_share_one_set_of_them() -> None:
    """pydantic gives each instance a set of the fields its input named (728 bytes for
    a container's assignment); instances of equal sets share one, and it stays right:
    what a dump without defaults writes, and a copy's own."""
    text = '{"node": "a", "containers": {"m": {"cpus": "0-3", "gpus": ["GPU-1"]}}}'
    first = Assignment.model_validate_json(text)
    second = Assignment.model_validate_json(text.replace('"a"', '"b"'))
    fewer = Assignment.model_validate_json('{"node": "c"}')

    assert first.model_fields_set is second.model_fields_set
    assert first.containers["m"].model_fields_set is second.containers["m"].model_fields_set
    assert fewer.model_fields_set == {"node"}
    assert second.model_dump(exclude_unset=True) == {
        "node": "b",
        "containers": {"m": {"cpus": "0-3", "gpus": ["GPU-1"]}},
    }
    copied = first.model_copy(update={"seq": 3})
    assert copied.model_fields_set == {"node", "containers", "seq"}
    assert first.model_fields_set == second.model_fields_set == {"node", "containers"}
