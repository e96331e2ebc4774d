"""`numatopo assign`: reading the node, pod and allocations, the answer, and exit codes.

Most tests replace `numatopo_engine.allocation.allocate` with a recording fake, so they
check the command alone; `TestRealEngine` runs the real allocator on a real machine's
topology.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from numatopo_cli.main import main
from numatopo_engine import allocation
from numatopo_engine.annotations import Assignment, PolicyName
from numatopo_engine.errors import InvalidRequestError, UnsatisfiableError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.refusals import shared_pool
from numatopo_engine.request import PodRequest
from numatopo_engine.state import NodeState

REPO = Path(__file__).resolve().parents[2]
PODS = REPO / "tests" / "fixtures" / "pods"
NODE = PODS / "nodes" / "dgx1v-v100.json"

GRANTED = Assignment.model_validate(
    {
        "node": "dgx1v-01",
        "numaNodes": [0],
        "policy": "best-effort",
        "containers": {
            "jupyter": {"cpus": "1-2,25-26", "mems": "0", "gpus": ["GPU-x"], "gpuIndices": [2]}
        },
    }
)


@dataclass
class Decision:
    assignment: Assignment
    score: int


@dataclass
class FakeAllocator:
    """Stands in for `numatopo_engine.allocation`: records each call, answers as told."""

    answer: Decision | Exception = field(default_factory=lambda: Decision(GRANTED, 87))
    calls: list[dict[str, Any]] = field(default_factory=list)

    def allocate(
        self, topology: NumatopologySpec, state: NodeState, request: PodRequest, node_name: str
    ) -> Decision:
        self.calls.append(
            {"topology": topology, "state": state, "request": request, "node_name": node_name}
        )
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeAllocator:
    # Patch the attribute, not sys.modules: replacing the module would make later imports
    # load a second copy of allocation.py beside the first one's caches.
    allocator = FakeAllocator()
    monkeypatch.setattr(allocation, "allocate", allocator.allocate)
    return allocator


def assign(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main(["assign", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def write(path: Path, document: Any) -> Path:
    if path.suffix == ".json":
        path.write_text(json.dumps(document))
    else:
        path.write_text(yaml.safe_dump(document))
    return path


class TestAnswer:
    def test_fits_prints_assignment_and_score(
        self, capsys: pytest.CaptureFixture[str], fake: FakeAllocator
    ) -> None:
        code, out, err = assign(capsys, "--topology", NODE, "--pod", PODS / "single-gpu.yaml")

        assert (0, "") == (code, err)
        assert {"fits": True, "assignment": GRANTED.to_wire(), "score": 87} == json.loads(out)
        assert "dgx1v-01" == fake.calls[0]["node_name"]
        assert "research/notebook" == fake.calls[0]["request"].key
        assert 8 == fake.calls[0]["topology"].capacity.gpus

    def test_does_not_fit_prints_the_reason(
        self, capsys: pytest.CaptureFixture[str], fake: FakeAllocator
    ) -> None:
        fake.answer = UnsatisfiableError("gpu: 4 GPUs asked, 3 free on NUMA 0")

        code, out, _ = assign(capsys, "--topology", NODE, "--pod", PODS / "single-gpu.yaml")

        assert 1 == code
        assert {"fits": False, "reason": "gpu: 4 GPUs asked, 3 free on NUMA 0"} == json.loads(out)

    def test_engine_rejecting_the_request_is_invalid_input(
        self, capsys: pytest.CaptureFixture[str], fake: FakeAllocator
    ) -> None:
        """A request the engine itself refuses is the pod's fault: exit 2, not "does not fit"."""
        fake.answer = InvalidRequestError("numatopo.io/cpu", "exclusive CPUs need whole CPUs")

        code, out, err = assign(capsys, "--topology", NODE, "--pod", PODS / "single-gpu.yaml")

        assert (2, "") == (code, out)
        assert (
            "numatopo assign: error: invalid pod: numatopo.io/cpu: exclusive CPUs need whole CPUs\n"
            == err
        )

    @pytest.mark.parametrize(
        ("answer", "expected"),
        [
            pytest.param(
                Decision(GRANTED, 87),
                "research/notebook fits on dgx1v-01 (score 87): policy best-effort, NUMA nodes 0\n"
                "  jupyter: cpus 1-2,25-26, mems 0, gpus 2, nics -\n",
                id="fits",
            ),
            pytest.param(
                Decision(
                    Assignment.model_validate(
                        {"node": "n", "containers": {"a": {"cpus": "1-3", "exclusive": False}}}
                    ),
                    3,
                ),
                "research/notebook fits on n (score 3): policy none, NUMA nodes -\n"
                "  a: cpus 1-3 (shared), mems -, gpus -, nics -\n",
                id="fits-on-shared-cpus",
            ),
            pytest.param(
                UnsatisfiableError("no NUMA node has 1 free GPU"),
                "research/notebook does not fit on dgx1v-01: no NUMA node has 1 free GPU\n",
                id="does-not-fit",
            ),
        ],
    )
    def test_text_output(
        self,
        capsys: pytest.CaptureFixture[str],
        fake: FakeAllocator,
        answer: Decision | UnsatisfiableError,
        expected: str,
    ) -> None:
        fake.answer = answer

        _, out, _ = assign(
            capsys, "--topology", NODE, "--pod", PODS / "single-gpu.yaml", "-o", "text"
        )

        assert expected == out


class TestInputs:
    @pytest.mark.parametrize(
        ("make_node", "extra", "expected"),
        [
            pytest.param(lambda tmp: NODE, [], "dgx1v-01", id="object-name"),
            pytest.param(
                lambda tmp: NODE, ["--node-name", "gpu-07"], "gpu-07", id="flag-overrides"
            ),
            pytest.param(
                lambda tmp: write(tmp / "spec.yaml", json.loads(NODE.read_text())["spec"]),
                [],
                "node",
                id="bare-spec-as-yaml",
            ),
        ],
    )
    def test_node_file_forms_and_node_name(
        self,
        *,
        capsys: pytest.CaptureFixture[str],
        fake: FakeAllocator,
        tmp_path: Path,
        make_node: Any,
        extra: list[str],
        expected: str,
    ) -> None:
        code, _, _ = assign(
            capsys, "--topology", make_node(tmp_path), "--pod", PODS / "cpu-pinned.yaml", *extra
        )

        assert 0 == code
        assert expected == fake.calls[0]["node_name"]
        assert 48 == fake.calls[0]["topology"].capacity.cpus

    def test_allocated_forms_are_booked(
        self, capsys: pytest.CaptureFixture[str], fake: FakeAllocator, tmp_path: Path
    ) -> None:
        """Bare assignments, `{pod, assignment}` objects and annotation strings all count."""
        bare = {"node": "dgx1v-01", "containers": {"a": {"cpus": "1-2", "gpuIndices": [0]}}}
        b = {"gpuIndices": [1], "nics": ["mlx5_0"]}
        wrapped = {"pod": "ml/b", "assignment": {"node": "dgx1v-01", "containers": {"b": b}}}
        as_string = {
            "pod": "ml/c",
            "assignment": json.dumps({"node": "x", "containers": {"c": {"gpuIndices": [7]}}}),
        }
        allocated = write(tmp_path / "allocated.json", [bare, wrapped, as_string])

        code, _, _ = assign(
            capsys, "--topology", NODE, "--pod", PODS / "single-gpu.yaml", "--allocated", allocated
        )
        state: NodeState = fake.calls[0]["state"]

        assert 0 == code
        assert ["allocated[0]", "ml/b", "ml/c"] == sorted(state.assignments)
        assert [2, 3, 4, 5, 6] == sorted(state.free_gpus())
        assert frozenset() == state.free_nics()

    def test_the_pods_own_entry_is_dropped(
        self, capsys: pytest.CaptureFixture[str], fake: FakeAllocator, tmp_path: Path
    ) -> None:
        """Re-running for a placed pod places it afresh instead of against itself."""
        own = {"pod": "research/notebook", "assignment": GRANTED.to_wire()}
        allocated = write(tmp_path / "allocated.yaml", [own])

        assign(
            capsys, "--topology", NODE, "--pod", PODS / "single-gpu.yaml", "--allocated", allocated
        )

        assert 8 == len(fake.calls[0]["state"].free_gpus())

    def test_configured_resource_names(
        self, capsys: pytest.CaptureFixture[str], fake: FakeAllocator, tmp_path: Path
    ) -> None:
        pod = yaml.safe_load((PODS / "single-gpu.yaml").read_text())
        pod["spec"]["containers"][0]["resources"]["limits"] = {"example.com/accel": 2}
        path = write(tmp_path / "pod.json", pod)

        assign(capsys, "--topology", NODE, "--pod", path, "--gpu-resource", "example.com/*")
        container = fake.calls[0]["request"].containers[0]

        assert (2, "example.com/accel") == (container.gpus, container.gpu_resource)

    def test_pod_without_policy_is_decided_with_a_note(
        self, capsys: pytest.CaptureFixture[str], fake: FakeAllocator, tmp_path: Path
    ) -> None:
        pod = yaml.safe_load((PODS / "single-gpu.yaml").read_text())
        del pod["metadata"]["annotations"]
        path = write(tmp_path / "plain.yaml", pod)

        code, _, err = assign(capsys, "--topology", NODE, "--pod", path)

        assert 0 == code
        assert "has no numatopo.io/policy annotation; deciding with policy none" in err
        assert PolicyName.NONE == fake.calls[0]["request"].options.policy


def invalid_inputs() -> list[Any]:
    """(files to write into tmp, arguments, expected error text)."""
    node_wire = json.loads(NODE.read_text())
    broken_node = json.loads(NODE.read_text())
    broken_node["spec"]["numaNodes"][0]["cpus"] = "0-x"
    overlap = [
        {"pod": "a/one", "assignment": {"node": "n", "containers": {"x": {"gpuIndices": [3]}}}},
        {"pod": "a/two", "assignment": {"node": "n", "containers": {"y": {"gpuIndices": [3]}}}},
    ]
    pod = str(PODS / "single-gpu.yaml")
    return [
        pytest.param(
            {}, ["--topology", "missing.json", "--pod", pod], "cannot read", id="missing-node"
        ),
        pytest.param(
            {"node.json": "{not json"},
            ["--topology", "node.json", "--pod", pod],
            "node.json: invalid JSON: Expecting property name",
            id="bad-json",
        ),
        pytest.param(
            {"node.yaml": "spec: [unclosed"},
            ["--topology", "node.yaml", "--pod", pod],
            "node.yaml: invalid YAML",
            id="bad-yaml",
        ),
        pytest.param(
            {"node.bin": b"\xff\xfe\x00"},
            ["--topology", "node.bin", "--pod", pod],
            "not UTF-8 text",
            id="binary-file",
        ),
        pytest.param(
            {"node.json": json.dumps(broken_node)},
            ["--topology", "node.json", "--pod", pod],
            "not a valid Numatopology: spec.numaNodes.0.cpus: Value error, invalid cpulist",
            id="node-fails-validation",
        ),
        pytest.param(
            {"node.json": "[1, 2]"},
            ["--topology", "node.json", "--pod", pod],
            "expected a Numatopology object or its spec, got list",
            id="node-is-a-list",
        ),
        pytest.param(
            {"pod.yaml": "kind: Pod\n---\nkind: Pod\n"},
            ["--topology", str(NODE), "--pod", "pod.yaml"],
            "pod.yaml: expected one document, found 2",
            id="two-pods",
        ),
        pytest.param(
            {},
            ["--topology", str(NODE), "--pod", str(PODS / "invalid-policy-typo.yaml")],
            "invalid pod: numatopo.io/policy: 'single-numa' is not a valid value "
            "(did you mean 'single-numa-node'?)",
            id="policy-typo",
        ),
        pytest.param(
            {},
            ["--topology", str(NODE), "--pod", str(PODS / "invalid-fractional-exclusive.yaml")],
            "numatopo.io/cpu: 'exclusive' is not possible: container 'worker' requests cpu 1500m",
            id="fractional-exclusive",
        ),
        pytest.param(
            {},
            ["--topology", str(NODE), "--pod", str(PODS / "invalid-fractional-gpu.yaml")],
            "containers[main].resources.limits.nvidia.com/gpu: 0.5 is not a whole number",
            id="half-a-gpu",
        ),
        pytest.param(
            {},
            ["--topology", str(NODE), "--pod", str(PODS / "invalid-unquoted-count.yaml")],
            "numatopo.io/max-numa-nodes: annotation values must be strings, got int",
            id="unquoted-count",
        ),
        pytest.param(
            {"a.json": json.dumps(overlap)},
            ["--topology", str(NODE), "--pod", pod, "--allocated", "a.json"],
            "a.json: allocations overlap: assignment of a/two rejected: "
            "container y: GPU 3 is held by a/one",
            id="allocations-overlap",
        ),
        pytest.param(
            {"a.json": json.dumps({"pod": "a/one"})},
            ["--topology", str(NODE), "--pod", pod, "--allocated", "a.json"],
            "expected a list of assignments, got dict",
            id="allocations-not-a-list",
        ),
        pytest.param(
            {"a.json": json.dumps([{"node": "n", "containers": {"x": {"cpus": 5}}}])},
            ["--topology", str(NODE), "--pod", pod, "--allocated", "a.json"],
            "a.json: [0]: not a valid assignment: containers.x.cpus",
            id="allocation-invalid",
        ),
        pytest.param(
            {"a.json": json.dumps([{"pod": "a/one", "assignment": "{oops"}])},
            ["--topology", str(NODE), "--pod", pod, "--allocated", "a.json"],
            "a.json: [0]: assignment is not JSON",
            id="allocation-annotation-not-json",
        ),
        pytest.param(
            {"a.json": json.dumps([{"pod": 3, "assignment": {"node": "n"}}])},
            ["--topology", str(NODE), "--pod", pod, "--allocated", "a.json"],
            "'pod' must be a 'namespace/name' string",
            id="allocation-pod-not-a-string",
        ),
        pytest.param(
            {"node.json": json.dumps(node_wire["spec"] | {"gpus": "eight"})},
            ["--topology", "node.json", "--pod", pod],
            "gpus: Input should be a valid list",
            id="bare-spec-fails-validation",
        ),
    ]


@pytest.mark.parametrize(("files", "args", "message"), invalid_inputs())
def test_invalid_input_exits_2_with_a_message(
    *,
    capsys: pytest.CaptureFixture[str],
    fake: FakeAllocator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    files: dict[str, str | bytes],
    args: list[str],
    message: str,
) -> None:
    for name, content in files.items():
        target = tmp_path / name
        target.write_bytes(content if isinstance(content, bytes) else content.encode())
    monkeypatch.chdir(tmp_path)

    code, out, err = assign(capsys, *args)

    assert (2, "") == (code, out)
    assert err.startswith("numatopo assign: error: ")
    assert message in err
    assert "Traceback" not in err
    assert [] == fake.calls


def test_console_script_reports_invalid_pods() -> None:
    """The installed `numatopo` entry point runs `assign` and keeps the exit code."""
    script = Path(sys.executable).parent / "numatopo"

    done = subprocess.run(
        [script, "assign", "--topology", NODE, "--pod", PODS / "invalid-fractional-gpu.yaml"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )

    assert (2, "") == (done.returncode, done.stdout)
    assert "0.5 is not a whole number" in done.stderr


class TestRealEngine:
    """The real allocator on DGX-1V (8 V100s, hybrid cube-mesh NVLink, 2 NUMA nodes)."""

    @pytest.mark.parametrize(
        "pod",
        [
            pytest.param("single-gpu.yaml", id="single-gpu"),
            pytest.param("cpu-pinned.yaml", id="cpu-pinned"),
            pytest.param("multi-container-pod-scope.yaml", id="multi-container"),
            pytest.param("init-containers.yaml", id="init-containers"),
        ],
    )
    def test_fixture_pods_fit_an_empty_node(
        self, capsys: pytest.CaptureFixture[str], pod: str
    ) -> None:
        code, out, err = assign(capsys, "--topology", NODE, "--pod", PODS / pod)
        answer = json.loads(out)
        assignment = Assignment.model_validate(answer["assignment"])

        assert (0, True) == (code, answer["fits"]), err
        assert "dgx1v-01" == assignment.node
        assert isinstance(answer["score"], int)

    def test_four_nvlink_gpus_land_on_one_linked_numa_node(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """GPUs 0-3 are the only free 4-clique that shares a NUMA node with the NIC."""
        code, out, err = assign(
            capsys, "--topology", NODE, "--pod", PODS / "nvlink-4gpu-required.yaml"
        )
        train = Assignment.model_validate(json.loads(out)["assignment"]).containers["train"]

        assert 0 == code, err
        assert ([0, 1, 2, 3], ["mlx5_0"], "0") == (
            sorted(train.gpu_indices),
            train.nics,
            str(train.mems),
        )
        assert 8 == len(train.cpus)

    def test_four_nvlink_gpus_do_not_fit_once_gpu_0_is_taken(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """GPUs 4-7 are linked, but single-numa-node also needs the NIC, which is on NUMA 0."""
        gpu_0 = {"x": {"gpuIndices": [0]}}
        taken = [{"pod": "ml/other", "assignment": {"node": "dgx1v-01", "containers": gpu_0}}]
        allocated = write(tmp_path / "allocated.json", taken)

        code, out, _ = assign(
            capsys,
            "--topology",
            NODE,
            "--pod",
            PODS / "nvlink-4gpu-required.yaml",
            "--allocated",
            allocated,
        )

        assert (1, False) == (code, json.loads(out)["fits"])
        assert json.loads(out)["reason"]

    @pytest.mark.parametrize(
        ("reserved", "cpus", "expected"),
        [
            pytest.param("", 2, None, id="both-cpus-would-empty-the-shared-pool"),
            pytest.param("", 1, "cpus 0 or 1", id="one-cpu-leaves-one-shared"),
            pytest.param("0", 1, "1", id="the-reserved-cpu-stays-shared"),
        ],
    )
    def test_a_two_cpu_node_keeps_a_shared_cpu(
        self,
        *,
        capsys: pytest.CaptureFixture[str],
        tmp_path: Path,
        reserved: str,
        cpus: int,
        expected: str | None,
    ) -> None:
        """Issue 10: the kubelet never empties its shared pool, so neither may numatopo."""
        node = {
            "apiVersion": "numatopo.io/v1alpha1",
            "kind": "Numatopology",
            "metadata": {"name": "tiny"},
            "spec": {
                "reservedCPUs": reserved,
                "numaNodes": [
                    {"id": 0, "cpus": "0-1", "memoryBytes": 2**32, "distances": {"0": 10}}
                ],
                "cpus": [{"id": c, "core": c, "socket": 0, "numa": 0} for c in (0, 1)],
            },
        }
        guaranteed = {"cpu": str(cpus), "memory": "1Gi"}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "pinned",
                "namespace": "default",
                "annotations": {"numatopo.io/policy": "single-numa-node"},
            },
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "busybox",
                        "resources": {"requests": guaranteed, "limits": guaranteed},
                    }
                ]
            },
        }

        code, out, err = assign(
            capsys,
            "--topology",
            write(tmp_path / "node.json", node),
            "--pod",
            write(tmp_path / "pod.yaml", pod),
        )
        answer = json.loads(out)

        if expected is None:
            assert (1, False, shared_pool(2, 2)) == (code, answer["fits"], answer.get("reason"))
        else:
            given = str(Assignment.model_validate(answer["assignment"]).containers["app"].cpus)
            assert 0 == code, err
            assert given in expected.removeprefix("cpus ").split(" or ")

    def test_console_script_places_a_pod(self) -> None:
        script = Path(sys.executable).parent / "numatopo"

        done = subprocess.run(
            [script, "assign", "--topology", NODE, "--pod", PODS / "single-gpu.yaml", "-o", "text"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

        assert 0 == done.returncode, done.stderr
        assert done.stdout.startswith("research/notebook fits on dgx1v-01 (score ")
