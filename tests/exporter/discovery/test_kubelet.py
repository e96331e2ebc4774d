"""Kubelet config + CPU manager checkpoint -> policies and reserved CPUs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import Policies
from numatopo_exporter.discovery.errors import DiscoveryError
from numatopo_exporter.discovery.hostroot import HostRoot
from numatopo_exporter.discovery.kubelet import read_kubelet

KUBELET = Path(__file__).resolve().parents[2] / "fixtures" / "kubelet"


@pytest.mark.parametrize(
    ("scenario", "policies", "reserved"),
    [
        pytest.param(
            "kubeadm-default",
            Policies(),
            "",
            id="kubeadm-defaults-are-none",
        ),
        pytest.param(
            "static-single-numa",
            Policies(
                cpu_manager_policy="static",
                topology_manager_policy="single-numa-node",
                topology_manager_scope="pod",
                topology_manager_policy_options={"prefer-closest-numa-nodes": "true"},
            ),
            "0,104",
            id="static-single-numa-node-with-reserved-list",
        ),
        pytest.param(
            "static-kube-reserved",
            Policies(cpu_manager_policy="static", topology_manager_policy="best-effort"),
            "",
            id="static-sized-by-kube-and-system-reserved",
        ),
        pytest.param(
            "flags-override",
            Policies(cpu_manager_policy="static", topology_manager_policy="restricted"),
            "",
            id="checkpoint-policy-wins-over-config",
        ),
    ],
)
def test_scenarios(scenario: str, policies: Policies, reserved: str) -> None:
    reading = read_kubelet(HostRoot(KUBELET / scenario))

    assert policies == reading.policies
    assert CPUSet.parse(reserved) == reading.reserved_cpus


def test_static_without_list_notes_the_reserved_count() -> None:
    """500m + 1 CPU reserved: the kubelet takes ceil(1.5) = 2 CPUs, which ones is unknown."""
    reading = read_kubelet(HostRoot(KUBELET / "static-kube-reserved"))

    assert 1 == len(reading.notices)
    assert "reserves 2 CPU(s)" in reading.notices[0]


def test_checkpoint_override_is_noticed() -> None:
    reading = read_kubelet(HostRoot(KUBELET / "flags-override"))

    overrides = [n for n in reading.notices if "runs cpuManagerPolicy 'static'" in n]

    assert 1 == len(overrides)


def test_missing_files_give_defaults_and_notices(tmp_path: Path) -> None:
    reading = read_kubelet(HostRoot(tmp_path))

    assert Policies() == reading.policies
    assert CPUSet() == reading.reserved_cpus
    assert 2 == len(reading.notices)
    assert str(tmp_path / "var/lib/kubelet/config.yaml") in reading.notices[0]


def test_explicit_paths_are_host_paths_under_the_root(tmp_path: Path) -> None:
    config = tmp_path / "etc/kubernetes/kubelet.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(
        "kind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: 0-1\n"
    )

    reading = read_kubelet(HostRoot(tmp_path), config=Path("/etc/kubernetes/kubelet.yaml"))

    assert ("static", CPUSet.parse("0-1")) == (
        reading.policies.cpu_manager_policy,
        reading.reserved_cpus,
    )


@pytest.mark.parametrize(
    ("config", "state", "message"),
    [
        pytest.param("cpuManagerPolicy: [static\n", None, "not valid YAML", id="broken-yaml"),
        pytest.param("- a\n- b\n", None, "not a YAML mapping", id="yaml-list"),
        pytest.param("kind: Pod\n", None, "expected kind KubeletConfiguration", id="wrong-kind"),
        pytest.param("reservedSystemCPUs: 0-x\n", None, "reservedSystemCPUs", id="bad-cpulist"),
        pytest.param("cpuManagerPolicy: 3\n", None, "must be a string", id="policy-not-a-string"),
        pytest.param(
            "cpuManagerPolicy: static\nkubeReserved: {cpu: lots}\n",
            None,
            "kubeReserved.cpu",
            id="bad-quantity",
        ),
        pytest.param(None, '{"policyName": "static",', "not valid JSON", id="truncated-checkpoint"),
        pytest.param(
            None, '{"defaultCpuSet": "0-3"}', "no policyName", id="checkpoint-without-policy"
        ),
    ],
)
def test_malformed_files_name_the_file(
    tmp_path: Path, config: str | None, state: str | None, message: str
) -> None:
    kubelet = tmp_path / "var/lib/kubelet"
    kubelet.mkdir(parents=True)
    if config is not None:
        (kubelet / "config.yaml").write_text(config)
    if state is not None:
        (kubelet / "cpu_manager_state").write_text(state)
    bad = kubelet / ("config.yaml" if config is not None else "cpu_manager_state")

    with pytest.raises(DiscoveryError, match=message) as caught:
        read_kubelet(HostRoot(tmp_path))

    assert bad == caught.value.path


@pytest.fixture
def replaced_checkpoint(tmp_path: Path):
    """`replaced_checkpoint(policy)`: a path that reads as a file mount does after the
    kubelet renamed a new checkpoint over the mounted one: the old file's content, with
    no link left on the host (an open, unlinked file seen through /proc/self/fd)."""
    opened: list[int] = []

    def make(policy: str) -> Path:
        path = tmp_path / f"cpu_manager_state-{policy}"
        path.write_text(json.dumps({"policyName": policy, "defaultCpuSet": "", "checksum": 1}))
        fd = os.open(path, os.O_RDONLY)
        opened.append(fd)
        path.unlink()
        return Path(f"/proc/self/fd/{fd}")

    yield make
    for fd in opened:
        os.close(fd)


def test_a_replaced_checkpoint_that_said_none_is_unknown(replaced_checkpoint) -> None:
    """The kubelet wrote a new checkpoint: its policy may be static now; the agent must not
    write cpusets on an old `none`."""
    from numatopo_exporter.discovery.kubelet import read_cpu_manager_policy

    with pytest.raises(DiscoveryError, match="restart the numatopo node pod"):
        read_cpu_manager_policy(replaced_checkpoint("none"))


def test_a_replaced_checkpoint_that_said_static_is_still_static(replaced_checkpoint) -> None:
    """A static kubelet rewrites its checkpoint on every pod; leaving static needs the
    checkpoint deleted, and until the pod restarts the agent keeps standing aside."""
    from numatopo_exporter.discovery.kubelet import read_cpu_manager_policy

    assert "static" == read_cpu_manager_policy(replaced_checkpoint("static"))


def test_a_checkpoint_in_place_reads_as_it_says(tmp_path: Path) -> None:
    from numatopo_exporter.discovery.kubelet import read_cpu_manager_policy

    path = tmp_path / "cpu_manager_state"
    path.write_text('{"policyName": "none", "defaultCpuSet": "", "checksum": 1}')

    assert "none" == read_cpu_manager_policy(path)
