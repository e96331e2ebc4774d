"""`numatopo.io/*` annotations: defaults, accepted values and the errors for bad ones."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from numatopo_engine.annotations import CpuMode, GpuLinksMode, PolicyName, Scope, SmtMode
from numatopo_engine.errors import InvalidRequestError
from numatopo_engine.pod_request import request_from_pod
from numatopo_engine.request import TopologyOptions


def pod(annotations: Any, *cpus: str | None, init_cpus: tuple[str | None, ...] = ()) -> Any:
    """A pod with one container per CPU request (None: no request) and these annotations."""

    def containers(prefix: str, requests: tuple[str | None, ...]) -> list[dict[str, Any]]:
        return [
            {"name": f"{prefix}{i}", "resources": {"limits": {"cpu": cpu}} if cpu else {}}
            for i, cpu in enumerate(requests)
        ]

    return {
        "metadata": {"name": "p", "annotations": annotations},
        "spec": {
            "initContainers": containers("init", init_cpus),
            "containers": containers("app", cpus or ("2",)),
        },
    }


P = "numatopo.io/"


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        pytest.param(pod({}), TopologyOptions(), id="nothing-set"),
        pytest.param(
            pod(
                {
                    P + "policy": "single-numa-node",
                    P + "scope": "container",
                    P + "cpu": "exclusive",
                    P + "smt": "full-cores",
                    P + "gpu-links": "required",
                    P + "max-numa-nodes": "1",
                }
            ),
            TopologyOptions(
                policy=PolicyName.SINGLE_NUMA_NODE,
                scope=Scope.CONTAINER,
                cpu=CpuMode.EXCLUSIVE,
                smt=SmtMode.FULL_CORES,
                gpu_links=GpuLinksMode.REQUIRED,
                max_numa_nodes=1,
            ),
            id="everything-set",
        ),
        pytest.param(
            pod({P + "policy": " restricted\n", P + "max-numa-nodes": "1024"}),
            TopologyOptions(policy=PolicyName.RESTRICTED, max_numa_nodes=1024),
            id="whitespace-stripped-and-largest-count",
        ),
        pytest.param(
            pod({P + "gpu-links": "ignore", P + "cpu": "none"}, "500m"),
            TopologyOptions(gpu_links=GpuLinksMode.IGNORE, cpu=CpuMode.NONE),
            id="cpu-none-with-fractional-request",
        ),
        pytest.param(
            pod({P + "assignment": "{not json", P + "state": 7, "other.io/x": 1, 5: None}),
            TopologyOptions(),
            id="operator-and-foreign-annotations-ignored",
        ),
        pytest.param(pod(None), TopologyOptions(), id="annotations-null"),
    ],
)
def test_options(manifest: Any, expected: TopologyOptions) -> None:
    actual = request_from_pod(manifest).options

    assert expected == actual


@pytest.mark.parametrize(
    ("cpus", "init_cpus", "expected"),
    [
        pytest.param(("2", "4"), (), CpuMode.EXCLUSIVE, id="all-whole"),
        pytest.param(("2", "100m"), (), CpuMode.NUMA, id="one-fractional"),
        pytest.param(("2", None), (), CpuMode.NUMA, id="one-without-request"),
        pytest.param(("2",), (None, "1"), CpuMode.EXCLUSIVE, id="regular-init-whole-or-none"),
        pytest.param(("2",), ("250m",), CpuMode.NUMA, id="regular-init-fractional"),
    ],
)
def test_cpu_mode_default(
    cpus: tuple[str | None, ...], init_cpus: tuple[str | None, ...], expected: CpuMode
) -> None:
    """Exclusive exactly when an explicit `cpu: exclusive` would be accepted."""
    actual = request_from_pod(pod({}, *cpus, init_cpus=init_cpus)).options.cpu

    assert expected == actual


def test_restartable_sidecar_needs_whole_cpus_for_exclusive() -> None:
    """A sidecar runs beside the app containers, so it needs whole CPUs like them."""
    manifest = pod({P + "cpu": "exclusive"})
    manifest["spec"]["initContainers"] = [
        {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}
    ]

    with pytest.raises(InvalidRequestError) as caught:
        request_from_pod(manifest)

    assert "init container 'proxy' requests cpu 100m" in caught.value.message


@pytest.mark.parametrize(
    ("manifest", "field", "message"),
    [
        pytest.param(
            pod({P + "policy": "single-numa"}),
            P + "policy",
            "'single-numa' is not a valid value (did you mean 'single-numa-node'?); allowed: "
            "none, best-effort, restricted, single-numa-node",
            id="policy-typo-suggests",
        ),
        pytest.param(
            pod({P + "policy": "Best-Effort"}),
            P + "policy",
            "(did you mean 'best-effort'?)",
            id="policy-case-suggests",
        ),
        pytest.param(
            pod({P + "scope": "node"}),
            P + "scope",
            "'node' is not a valid value; allowed: pod, container",
            id="scope-unknown-no-close-match",
        ),
        pytest.param(
            pod({P + "gpu-links": "require"}),
            P + "gpu-links",
            "did you mean 'required'?",
            id="gpu-links-typo",
        ),
        pytest.param(pod({P + "smt": ""}), P + "smt", "'' is not a valid value", id="empty"),
        pytest.param(
            pod({P + "cpu": "exclusive"}, "1500m"),
            P + "cpu",
            "container 'app0' requests cpu 1500m; exclusive CPUs need a whole number",
            id="exclusive-with-fractional-cpu",
        ),
        pytest.param(
            pod({P + "cpu": "exclusive"}, "2", None),
            P + "cpu",
            "container 'app1' requests no cpu",
            id="exclusive-with-missing-cpu",
        ),
        pytest.param(
            pod({P + "smt": "full-cores"}, "250m"),
            P + "smt",
            "'full-cores' places exclusive CPUs only, but cpu is 'numa'",
            id="full-cores-without-exclusive",
        ),
        pytest.param(
            pod({P + "max-numa-nodes": "0"}),
            P + "max-numa-nodes",
            "0 is out of range; expected a whole number from 1 to 1024",
            id="zero-numa-nodes",
        ),
        pytest.param(
            pod({P + "max-numa-nodes": "1025"}),
            P + "max-numa-nodes",
            "out of range",
            id="too-many-numa-nodes",
        ),
        pytest.param(
            pod({P + "max-numa-nodes": "-1"}),
            P + "max-numa-nodes",
            "'-1' is not a whole number",
            id="negative-numa-nodes",
        ),
        pytest.param(
            pod({P + "max-numa-nodes": "9" * 400}),
            P + "max-numa-nodes",
            "(400 characters)",
            id="huge-numa-nodes",
        ),
        pytest.param(
            pod({P + "max-numa-nodes": "2", P + "policy": "single-numa-node"}),
            P + "max-numa-nodes",
            "2 contradicts policy single-numa-node",
            id="two-numa-nodes-with-single-numa-node",
        ),
        pytest.param(
            pod({P + "max-numa-nodes": 2}),
            P + "max-numa-nodes",
            "must be strings, got int (quote the value in YAML)",
            id="unquoted-number",
        ),
        pytest.param(
            pod({P + "policy": {"name": "restricted"}}),
            P + "policy",
            "got dict",
            id="json-object-value",
        ),
        pytest.param(
            pod({P + "polcy": "restricted"}),
            P + "polcy",
            "unknown annotation (did you mean 'numatopo.io/policy'?); known: numatopo.io/policy",
            id="unknown-annotation-suggests",
        ),
        pytest.param(
            pod({P + "x" * 10_000: "1"}),
            P + "x" * 48 + "... (10012 characters)",
            "unknown annotation",
            id="ten-thousand-character-key",
        ),
        pytest.param(
            pod(["numatopo.io/policy"]),
            "metadata.annotations",
            "expected a mapping, got list",
            id="annotations-not-a-mapping",
        ),
    ],
)
def test_invalid_annotations(manifest: Any, field: str, message: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        request_from_pod(manifest)

    assert field == caught.value.field
    assert message in caught.value.message


def test_long_values_are_echoed_short() -> None:
    """A 10,000-character value appears in the message cut to about 60 characters."""
    manifest = pod({P + "cpu": "exclusive-" + "x" * 10_000})

    with pytest.raises(InvalidRequestError) as caught:
        request_from_pod(manifest)

    assert len(str(caught.value)) < 250


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
annotation_keys = st.sampled_from(
    [
        P + "policy",
        P + "scope",
        P + "cpu",
        P + "smt",
        P + "gpu-links",
        P + "max-numa-nodes",
        P + "assignment",
        P + "foo",
        "other/key",
    ]
) | st.text(max_size=20)
annotation_values = (
    st.sampled_from(["single-numa-node", "exclusive", "full-cores", "pod", "1", "0", "-3"])
    | st.text(max_size=40)
    | json_like
)


@given(
    annotations=st.dictionaries(annotation_keys, annotation_values, max_size=6) | json_like,
    cpus=st.lists(st.sampled_from(["1", "2", "500m", "1.5", None]), min_size=1, max_size=3),
)
def test_any_annotations_give_options_or_invalid_request(annotations: Any, cpus: list[Any]) -> None:
    """Whatever the annotations hold, the only error is `InvalidRequestError`."""
    outcome: TopologyOptions | InvalidRequestError
    try:
        outcome = request_from_pod(pod(annotations, *cpus)).options
    except InvalidRequestError as exc:
        outcome = exc

    if isinstance(outcome, InvalidRequestError):
        assert outcome.field
        assert len(outcome.message) < 600
    else:
        assert isinstance(outcome, TopologyOptions)
