"""The MIG part of the model and of the ledger: bad specs and bad bookings are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from numatopo_engine import NodeState
from numatopo_engine.annotations import Assignment, ContainerAssignment
from numatopo_engine.errors import OverlapError
from numatopo_engine.model import Gpu, MigDevice, Numatopology, NumatopologySpec

NODE = Path(__file__).resolve().parents[1] / "fixtures" / "pods" / "nodes" / "dgx-a100-mig.json"
SPEC = Numatopology.model_validate(json.loads(NODE.read_text())).spec


def test_a_mig_device_index_may_not_repeat_a_gpu_index() -> None:
    gpus = [
        Gpu(index=0, mig_mode=True, mig_devices=[MigDevice(index=1, profile="3g.40gb")]),
        Gpu(index=1),
    ]
    with pytest.raises(ValidationError, match="a MIG device needs an index no GPU"):
        NumatopologySpec(gpus=gpus)


def test_mig_devices_need_mig_mode() -> None:
    with pytest.raises(ValidationError, match="GPU 0 lists migDevices but migMode is not true"):
        Gpu(index=0, mig_mode=False, mig_devices=[MigDevice(index=8, profile="1g.10gb")])


@pytest.mark.parametrize("profile", ["", "3G.40GB", "3g 40gb", "x" * 41])
def test_a_profile_must_look_like_one(profile: str) -> None:
    with pytest.raises(ValidationError):
        MigDevice(index=8, profile=profile)


def test_resource_defaults_to_the_device_plugin_name() -> None:
    assert "nvidia.com/mig-1g.10gb.me" == MigDevice(index=8, profile="1g.10gb+me").resource
    given = MigDevice(index=8, profile="3g.40gb", resource="example.com/slice")
    assert "example.com/slice" == given.resource


def book(**container: list[int]) -> None:
    state = NodeState(SPEC)
    state.apply("ml/p", Assignment(node="n", containers={"c": ContainerAssignment(**container)}))


@pytest.mark.parametrize(
    ("container", "message"),
    [
        ({"mig_indices": [99]}, "MIG device 99 does not exist"),
        ({"mig_indices": [2]}, "MIG device 2 does not exist"),  # a whole GPU, not MIG
        ({"gpu_indices": [8]}, "GPU 8 does not exist"),  # a MIG device, not a GPU
        ({"gpu_indices": [4]}, "GPU 4 is in MIG mode"),
        ({"gpu_indices": [2], "mig_indices": [8, 8]}, "MIG device 8 is given twice"),
    ],
)
def test_bad_bookings_are_refused(container: dict[str, list[int]], message: str) -> None:
    with pytest.raises(OverlapError, match=message):
        book(**container)


def test_a_mig_device_is_never_booked_twice() -> None:
    state = NodeState(SPEC)
    mine = Assignment(node="n", containers={"c": ContainerAssignment(mig_indices=[8, 9])})
    state.apply("ml/a", mine)
    with pytest.raises(OverlapError, match="MIG device 9 is held by ml/a"):
        state.apply(
            "ml/b", Assignment(node="n", containers={"c": ContainerAssignment(mig_indices=[9])})
        )
    state.release("ml/a")
    state.apply(
        "ml/b", Assignment(node="n", containers={"c": ContainerAssignment(mig_indices=[9])})
    )
    assert 8 in state.free_gpus()
    assert 9 not in state.free_gpus()
