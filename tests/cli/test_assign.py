"""`numatopo assign`: reading the node, pod and allocations, the answer, and exit codes.

Every test runs the real engine (pure, milliseconds) on real machines' topologies
(`tests/fixtures/pods/nodes/`), with pods and allocations chosen so that the answer
shows what the command read: which GPUs are left, which name the node has, which
resource counts as a GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from numatopo_cli.commands import assign as assign_command
from numatopo_cli.main import main
from numatopo_engine import DEFAULT_RESOURCES, NodeState, allocate, request_from_pod
from numatopo_engine.annotations import Assignment, CpuMode
from numatopo_engine.model import Numatopology
from numatopo_engine.refusals import Kind, Shortfall, Wanted, word
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions

REPO = Path(__file__).resolve().parents[2]
PODS = REPO / "tests" / "fixtures" / "pods"
# DGX-1V: 48 CPUs (24 per NUMA node, CPUs 0 and 24 reserved), GPUs 0-3 on NUMA 0 and
# 4-7 on NUMA 1, one InfiniBand NIC (rdma/ib) on NUMA 0.
NODE = PODS / "nodes" / "dgx1v-v100.json"
NODE_NAME = "dgx1v-01"


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


def manifest(
    limits: dict[str, Any],
    *,
    name: str = "job",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A one-container Guaranteed pod in namespace `ml` (requests equal limits)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "annotations": {"numatopo.io/policy": "best-effort"}
            if annotations is None
            else annotations,
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": limits, "limits": limits},
                }
            ]
        },
    }


def booked(*gpus: int, pod: str = "ml/other", nics: tuple[str, ...] = ()) -> dict[str, Any]:
    """An `--allocated` entry: `pod` holds `gpus` and `nics` on the DGX."""
    held = {"x": {"gpuIndices": list(gpus), "nics": list(nics)}}
    return {"pod": pod, "assignment": {"node": NODE_NAME, "containers": held}}


HEADER = {"apiVersion": "cli.numatopo.io/v1", "kind": "AssignReport"}


def engine_answer(pod: Path, *, node_name: str = NODE_NAME) -> dict[str, Any]:
    """What the engine itself decides for `pod` on the empty DGX, in the command's JSON."""
    spec = Numatopology.model_validate(json.loads(NODE.read_text())).spec
    request = request_from_pod(yaml.safe_load(pod.read_text()), DEFAULT_RESOURCES)
    decision = allocate(spec, NodeState(spec), request, node_name)
    return {
        **HEADER,
        "fits": True,
        "assignment": decision.assignment.to_wire(),
        "score": decision.score,
    }


class TestAnswer:
    def test_fits_prints_the_engines_assignment_and_score(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The pod, the node and its name reach the engine unchanged: the command prints
        exactly the decision the engine makes on them."""
        code, out, err = assign(capsys, "--topology", NODE, "--pod", PODS / "single-gpu.yaml")
        answer = json.loads(out)
        jupyter = Assignment.model_validate(answer["assignment"]).containers["jupyter"]

        assert (0, "") == (code, err)
        assert engine_answer(PODS / "single-gpu.yaml") == answer
        assert (NODE_NAME, 1, 4, "0") == (
            answer["assignment"]["node"],
            len(jupyter.gpu_indices),
            len(jupyter.cpus),
            str(jupyter.mems),
        )

    def test_does_not_fit_prints_the_engines_reason(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """Every GPU held by another pod: exit 1 and the reason, free amounts per NUMA node."""
        allocated = write(tmp_path / "allocated.json", [booked(*range(8))])

        code, out, err = assign(
            capsys, "--topology", NODE, "--pod", PODS / "single-gpu.yaml", "--allocated", allocated
        )

        assert (1, "") == (code, err)
        assert {
            **HEADER,
            "fits": False,
            "reason": "best-effort: 1 GPUs requested, more than the node has free "
            "(0 GPUs free in all; NUMA 0: 22 CPUs, 188Gi memory, 0 GPUs free; "
            "NUMA 1: 24 CPUs, 188Gi memory, 0 GPUs free)",
        } == json.loads(out)

    def test_a_request_the_engine_rejects_is_invalid_input(self) -> None:
        """The engine refusing the request itself (fractional exclusive CPUs, which pod
        parsing already stops, here built by hand) is the pod's fault, not "does not fit"."""
        spec = Numatopology.model_validate(json.loads(NODE.read_text())).spec
        half = ContainerRequest(name="worker", cpu_milli=1500)
        request = PodRequest("ml", "job", (half,), (), TopologyOptions(cpu=CpuMode.EXCLUSIVE))

        with pytest.raises(assign_command.InputError) as raised:
            assign_command.decide(spec, NodeState(spec), request, NODE_NAME)

        assert str(raised.value).startswith(
            "invalid pod: numatopo.io/cpu: exclusive CPUs need whole CPU requests; "
            "container worker asks 1500m"
        )

    @pytest.mark.parametrize(
        ("pod", "allocated", "expected"),
        [
            pytest.param(
                manifest({"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 1}),
                [booked(0)],
                "ml/job fits on dgx1v-01 (score 80): policy best-effort, NUMA nodes 0\n"
                "  main: cpus 1-2,25-26, mems 0, gpus 1, nics -\n",
                id="fits",
            ),
            pytest.param(
                manifest(
                    {"cpu": "1500m", "memory": "1Gi"},
                    annotations={"numatopo.io/policy": "single-numa-node"},
                ),
                [],
                "ml/job fits on dgx1v-01 (score 100): policy single-numa-node, NUMA nodes 0\n"
                "  main: cpus 1-11,25-35 (shared), mems 0, gpus -, nics -\n",
                id="fits-on-shared-cpus",
            ),
            pytest.param(
                manifest(
                    {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": 4, "rdma/ib": 1},
                    annotations={"numatopo.io/policy": "single-numa-node"},
                ),
                [booked(0)],
                "ml/job does not fit on dgx1v-01: single-numa-node: no NUMA node has "
                "2 CPUs and 1Gi memory and 4 GPUs and 1 NICs free (NUMA 0: 22 CPUs, "
                "188Gi memory, 3 GPUs, 1 NICs free; NUMA 1: 24 CPUs, 188Gi memory, "
                "4 GPUs, 0 NICs free)\n",
                id="does-not-fit",
            ),
        ],
    )
    def test_text_output(
        self,
        *,
        capsys: pytest.CaptureFixture[str],
        tmp_path: Path,
        pod: dict[str, Any],
        allocated: list[dict[str, Any]],
        expected: str,
    ) -> None:
        _, out, _ = assign(
            capsys,
            "--topology",
            NODE,
            "--pod",
            write(tmp_path / "pod.yaml", pod),
            "--allocated",
            write(tmp_path / "allocated.json", allocated),
            "-o",
            "text",
        )

        assert expected == out


class TestInputs:
    @pytest.mark.parametrize(
        ("make_node", "extra", "expected"),
        [
            pytest.param(lambda tmp: NODE, [], NODE_NAME, id="object-name"),
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
        tmp_path: Path,
        make_node: Any,
        extra: list[str],
        expected: str,
    ) -> None:
        """Each form of the node file is the same DGX: the same placement, under the name
        from the flag, else the object, else the default."""
        code, out, err = assign(
            capsys, "--topology", make_node(tmp_path), "--pod", PODS / "cpu-pinned.yaml", *extra
        )

        assert 0 == code, err
        assert engine_answer(PODS / "cpu-pinned.yaml", node_name=expected) == json.loads(out)

    @pytest.mark.parametrize(
        ("limits", "expected"),
        [
            pytest.param(
                {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": 5},
                {"fits": True, "gpus": [2, 3, 4, 5, 6]},
                id="the-five-gpus-left-are-given",
            ),
            pytest.param(
                {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": 6},
                {"fits": False, "gpus": []},
                id="six-gpus-do-not-fit",
            ),
            pytest.param(
                {"cpu": "2", "memory": "1Gi", "rdma/ib": 1},
                {"fits": False, "gpus": []},
                id="the-only-nic-is-taken",
            ),
        ],
    )
    def test_allocated_forms_are_booked(
        self,
        *,
        capsys: pytest.CaptureFixture[str],
        tmp_path: Path,
        limits: dict[str, Any],
        expected: dict[str, Any],
    ) -> None:
        """Bare assignments, `{pod, assignment}` objects and annotation strings all count:
        between them GPUs 0, 1 and 7 and the NIC are held."""
        bare = {"node": NODE_NAME, "containers": {"a": {"cpus": "1-2", "gpuIndices": [0]}}}
        wrapped = booked(1, pod="ml/b", nics=("mlx5_0",))
        as_string = {
            "pod": "ml/c",
            "assignment": json.dumps({"node": "x", "containers": {"c": {"gpuIndices": [7]}}}),
        }
        allocated = write(tmp_path / "allocated.json", [bare, wrapped, as_string])
        pod = write(tmp_path / "pod.yaml", manifest(limits))

        code, out, _ = assign(capsys, "--topology", NODE, "--pod", pod, "--allocated", allocated)
        answer = json.loads(out)
        containers = answer.get("assignment", {}).get("containers", {})
        gpus = sorted(containers.get("main", {}).get("gpuIndices", []))

        assert (0 if expected["fits"] else 1) == code
        assert expected == {"fits": answer["fits"], "gpus": gpus}

    @pytest.mark.parametrize(
        ("owner", "expected_gpu"),
        [
            pytest.param("research/notebook", 0, id="own-entry-dropped"),
            pytest.param("research/other", 1, id="another-pods-entry-kept"),
        ],
    )
    def test_the_pods_own_entry_is_dropped(
        self,
        *,
        capsys: pytest.CaptureFixture[str],
        tmp_path: Path,
        owner: str,
        expected_gpu: int,
    ) -> None:
        """Re-running for a placed pod places it afresh instead of against itself: GPU 0,
        the one it held, is free for it again; held by another pod, it is not."""
        allocated = write(tmp_path / "allocated.yaml", [booked(0, pod=owner)])

        code, out, err = assign(
            capsys, "--topology", NODE, "--pod", PODS / "single-gpu.yaml", "--allocated", allocated
        )
        jupyter = json.loads(out)["assignment"]["containers"]["jupyter"]

        assert 0 == code, err
        assert [expected_gpu] == jupyter["gpuIndices"]

    @pytest.mark.parametrize(
        ("flags", "node_gpus", "expected"),
        [
            pytest.param(
                ["--gpu-resource", "example.com/*"], "example.com/accel", 2, id="pattern-matches"
            ),
            pytest.param(
                ["--gpu-resource", "example.com/*"],
                "nvidia.com/gpu",
                # Refusals name the accelerator resource the pod asked for.
                "best-effort: 2 example.com/accel requested, more than the node has free "
                "(0 example.com/accel free in all; NUMA 0: 22 CPUs, 188Gi memory free; "
                "NUMA 1: 24 CPUs, 188Gi memory free)",
                id="counted-as-gpus-of-its-own-kind",
            ),
            pytest.param([], "example.com/accel", 0, id="without-the-flag-not-a-gpu"),
        ],
    )
    def test_configured_resource_names(
        self,
        *,
        capsys: pytest.CaptureFixture[str],
        tmp_path: Path,
        flags: list[str],
        node_gpus: str,
        expected: int | str,
    ) -> None:
        """`--gpu-resource` makes a pod's `example.com/accel` a GPU request, which only
        GPUs the node lists under that resource can meet."""
        node = json.loads(NODE.read_text())
        for gpu in node["spec"]["gpus"]:
            gpu["resource"] = node_gpus
        pod = manifest({"cpu": "2", "memory": "1Gi", "example.com/accel": 2})

        _, out, _ = assign(
            capsys,
            "--topology",
            write(tmp_path / "node.json", node),
            "--pod",
            write(tmp_path / "pod.json", pod),
            *flags,
        )
        answer = json.loads(out)
        main_container = answer.get("assignment", {}).get("containers", {}).get("main", {})
        actual = len(main_container.get("gpuIndices", [])) if answer["fits"] else answer["reason"]

        assert expected == actual

    def test_pod_without_policy_is_decided_with_a_note(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        pod = yaml.safe_load((PODS / "single-gpu.yaml").read_text())
        del pod["metadata"]["annotations"]
        path = write(tmp_path / "plain.yaml", pod)

        code, out, err = assign(capsys, "--topology", NODE, "--pod", path)

        assert 0 == code
        assert "has no numatopo.io/policy annotation; deciding with policy none" in err
        assert "none" == json.loads(out)["assignment"]["policy"]


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
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    files: dict[str, str | bytes],
    args: list[str],
    message: str,
) -> None:
    """Nothing on stdout (no answer is given), one line naming the problem on stderr."""
    for name, content in files.items():
        target = tmp_path / name
        target.write_bytes(content if isinstance(content, bytes) else content.encode())
    monkeypatch.chdir(tmp_path)

    code, out, err = assign(capsys, *args)

    assert (2, "") == (code, out)
    assert err.startswith("numatopo assign: error: ")
    assert message in err
    assert "Traceback" not in err


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
            shortfall = Shortfall(Kind.SHARED_POOL, "best-effort", (Wanted("CPUs", 2),), bound=2)
            assert (1, False, word(shortfall)) == (code, answer["fits"], answer.get("reason"))
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
