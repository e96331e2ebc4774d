"""The workload mix the operator learns from the pods it sees (decay, rebuild, pinned)."""

from __future__ import annotations

from typing import Any

import pytest

from numatopo_engine import annotations as keys
from numatopo_engine.packing import Shape, WorkloadMix
from numatopo_engine.resources import DEFAULT_RESOURCES
from numatopo_operator.settings import OperatorSettings, SettingsError, from_env
from numatopo_operator.workload_mix import MixLearner, shape_of_pod


def shares(learner: MixLearner) -> dict[Shape, float]:
    mix = learner.mix()
    return dict(zip(mix.shapes, mix.weights, strict=True))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gpu_pod(name: str, gpus: int, cpu: str) -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": "1Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": name,
            "annotations": {keys.POLICY: "best-effort"},
        },
        "spec": {
            "containers": [
                {"name": "main", "resources": {"requests": resources, "limits": resources}}
            ]
        },
    }


ONE = Shape.of(1, 8)
EIGHT = Shape.of(8, 64)


def test_a_pods_shape_is_its_gpus_and_cpus():
    found = (
        shape_of_pod(gpu_pod("a", 2, "12"), DEFAULT_RESOURCES),
        shape_of_pod(gpu_pod("b", 1, "2500m"), DEFAULT_RESOURCES),
        shape_of_pod(gpu_pod("c", 0, "4"), DEFAULT_RESOURCES),
    )

    assert (Shape(2, 16, True), Shape(1, 4, False), None) == found


def test_weights_are_gpus_and_each_pod_counts_once():
    learner = MixLearner(3600, clock=Clock())
    for name in ("a", "b", "c", "a", "a"):
        learner.observe(name, ONE)
    learner.observe("big", EIGHT)

    assert {ONE: 3 / 11, EIGHT: 8 / 11} == shares(learner)


def test_older_pods_weigh_half_per_half_life():
    clock = Clock()
    learner = MixLearner(600, clock=clock)
    learner.observe("old", EIGHT)
    clock.now += 1200  # two half-lives
    learner.observe("new-1", ONE)
    learner.observe("new-2", ONE)

    assert {ONE: 2 / 4, EIGHT: 2 / 4} == shares(learner)


def test_weights_stay_finite_over_a_long_run():
    clock = Clock()
    learner = MixLearner(1, clock=clock)
    for step in range(2000):
        clock.now += 1
        learner.observe(f"p{step}", ONE if step % 2 else EIGHT)

    assert pytest.approx(1.0) == sum(shares(learner).values())


def test_rebuilt_from_the_live_pods_on_start():
    """A new replica lists the live pods: its mix is theirs, whatever the old one saw."""
    live = [gpu_pod("a", 1, "8"), gpu_pod("b", 1, "8"), gpu_pod("c", 8, "64")]
    old = MixLearner(3600, clock=Clock())
    old.observe("gone", Shape.of(4, 32))
    for pod in live:
        old.observe_pod(pod["metadata"]["name"], pod, DEFAULT_RESOURCES)
    fresh = MixLearner(3600, clock=Clock())
    for pod in live:
        fresh.observe_pod(pod["metadata"]["name"], pod, DEFAULT_RESOURCES)

    assert ({ONE: 0.2, EIGHT: 0.8}, True) == (
        shares(fresh),
        Shape.of(4, 32) in shares(old),
    )


def test_a_pinned_mix_ignores_the_pods_seen():
    pinned = WorkloadMix.parse("1x8:1,8x64:1")
    learner = MixLearner(3600, pinned=pinned, clock=Clock())
    learner.observe("big", Shape.of(4, 32))

    assert pinned == learner.mix()


def test_the_environment_pins_the_mix_and_the_half_life():
    settings = from_env(
        {
            "NUMATOPO_WORKLOAD_MIX": "1x8:3,8x64:1",
            "NUMATOPO_WORKLOAD_MIX_HALF_LIFE_SECONDS": "86400",
        }
    )

    assert (WorkloadMix.parse("1x8:3,8x64:1"), 86400.0, None) == (
        settings.pinned_mix,
        settings.workload_mix_half_life_seconds,
        OperatorSettings().pinned_mix,
    )


@pytest.mark.parametrize(
    "environ",
    [
        pytest.param({"NUMATOPO_WORKLOAD_MIX": "eight:1"}, id="unreadable-mix"),
        pytest.param({"NUMATOPO_WORKLOAD_MIX_HALF_LIFE_SECONDS": "0"}, id="zero-half-life"),
    ],
)
def test_a_bad_mix_setting_is_refused(environ):
    with pytest.raises(SettingsError):
        from_env(environ)
