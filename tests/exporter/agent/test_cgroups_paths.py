"""Finding pod and container cgroups in the kubelet's layouts (names, v1 and v2 trees)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from numatopo_engine.cpuset import CPUSet
from numatopo_exporter.agent import cgroups
from numatopo_exporter.agent.cgroupfs import CgroupError, detect_hierarchy
from numatopo_exporter.agent.planning import Cpuset, CpusetWrite

UID = "0b7e3f2a-1c4d-4e5f-8a9b-0c1d2e3f4a5b"
CID = "4f5e6d7c8b9a"
Q = cgroups.QosClass
D = cgroups.Driver


@pytest.mark.parametrize(
    ("driver", "qos", "expected"),
    [
        pytest.param(D.CGROUPFS, Q.GUARANTEED, f"kubepods/pod{UID}", id="cgroupfs-guaranteed"),
        pytest.param(
            D.CGROUPFS, Q.BURSTABLE, f"kubepods/burstable/pod{UID}", id="cgroupfs-burstable"
        ),
        pytest.param(
            D.CGROUPFS, Q.BEST_EFFORT, f"kubepods/besteffort/pod{UID}", id="cgroupfs-besteffort"
        ),
        pytest.param(
            D.SYSTEMD,
            Q.GUARANTEED,
            "kubepods.slice/kubepods-pod0b7e3f2a_1c4d_4e5f_8a9b_0c1d2e3f4a5b.slice",
            id="systemd-guaranteed",
        ),
        pytest.param(
            D.SYSTEMD,
            Q.BURSTABLE,
            "kubepods.slice/kubepods-burstable.slice/"
            "kubepods-burstable-pod0b7e3f2a_1c4d_4e5f_8a9b_0c1d2e3f4a5b.slice",
            id="systemd-burstable",
        ),
    ],
)
def test_pod_dir_follows_the_driver(driver: D, qos: Q, expected: str) -> None:
    actual = cgroups.pod_dir(driver, qos, UID)

    assert PurePosixPath(expected) == actual
    assert UID == cgroups.parse_pod_dir(actual.name, driver)


@pytest.mark.parametrize(
    ("text", "driver", "expected"),
    [
        pytest.param(
            f"containerd://{CID}", D.SYSTEMD, f"cri-containerd-{CID}.scope", id="containerd-systemd"
        ),
        pytest.param(f"cri-o://{CID}", D.SYSTEMD, f"crio-{CID}.scope", id="crio-systemd"),
        pytest.param(f"containerd://{CID}", D.CGROUPFS, CID, id="containerd-cgroupfs"),
        pytest.param(f"cri-o://{CID}", D.CGROUPFS, f"crio-{CID}", id="crio-cgroupfs"),
    ],
)
def test_container_dir_names_put_the_runtime_s_form_first(
    text: str, driver: D, expected: str
) -> None:
    parsed = cgroups.parse_container_id(text)
    assert parsed is not None

    actual = cgroups.container_dir_names(parsed, driver)[0]

    assert expected == actual


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="not-started"),
        pytest.param("containerd://", id="no-id"),
        pytest.param("containerd://../../etc", id="path-traversal"),
    ],
)
def test_parse_container_id_refuses_what_is_not_an_id(text: str) -> None:
    assert cgroups.parse_container_id(text) is None


def _write(path: Path, files: dict[str, str]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (path / name).write_text(content)


V2_FILES = {
    "cpuset.cpus": "",
    "cpuset.cpus.effective": "0-7\n",
    "cpuset.mems": "",
    "cpuset.mems.effective": "0-1\n",
}


def _v2_systemd_tree(root: Path) -> PurePosixPath:
    """The cgroup v2 layout of a systemd-driver node running containerd (empty = inherit)."""
    _write(
        root,
        {
            "cgroup.controllers": "cpuset cpu io memory pids\n",
            "cpuset.cpus.effective": "0-7\n",
            "cpuset.mems.effective": "0-1\n",
        },
    )
    pod = PurePosixPath(cgroups.pod_dir(D.SYSTEMD, Q.BURSTABLE, UID))
    for part in [pod.parents[1], pod.parents[0], pod]:
        _write(root / part, {"cgroup.controllers": "cpuset\n", **V2_FILES})
    container = pod / f"cri-containerd-{CID}.scope"
    _write(root / container, {"cgroup.controllers": "cpuset\n", **V2_FILES})
    _write(root / pod / f"crio-conmon-{CID}.scope", V2_FILES)
    return container


def test_v2_tree_is_detected_and_its_containers_found(tmp_path: Path) -> None:
    container = _v2_systemd_tree(tmp_path)
    hierarchy = detect_hierarchy(tmp_path)
    parsed = cgroups.parse_container_id(f"containerd://{CID}")
    assert parsed is not None

    found = hierarchy.find_container(UID, None, parsed)
    listed = [c.path for c in hierarchy.list_containers()]
    observed = hierarchy.read(container)

    assert (2, D.SYSTEMD) == (hierarchy.version, hierarchy.driver)
    assert container == found
    assert [container] == listed
    assert Cpuset(CPUSet.parse("0-7"), CPUSet.parse("0-1")) == observed


def test_v2_write_then_read_sees_the_configured_value(tmp_path: Path) -> None:
    container = _v2_systemd_tree(tmp_path)
    hierarchy = detect_hierarchy(tmp_path)

    hierarchy.write(CpusetWrite(container, "cpuset.cpus", CPUSet.parse("2-3")))

    assert CPUSet.parse("2-3") == hierarchy.read(container).cpus


def test_v1_cgroupfs_tree_is_detected_under_the_cpuset_mount(tmp_path: Path) -> None:
    pod = cgroups.pod_dir(D.CGROUPFS, Q.GUARANTEED, UID)
    for part in [PurePosixPath("."), pod.parent, pod, pod / CID]:
        _write(tmp_path / "cpuset" / part, {"cpuset.cpus": "0-3\n", "cpuset.mems": "0\n"})

    hierarchy = detect_hierarchy(tmp_path)

    assert (1, D.CGROUPFS, tmp_path / "cpuset") == (
        hierarchy.version,
        hierarchy.driver,
        hierarchy.root,
    )
    assert [pod / CID] == [c.path for c in hierarchy.list_containers()]


def test_no_hierarchy_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CgroupError, match="no cpuset hierarchy found"):
        detect_hierarchy(tmp_path)
