"""Kubernetes names as the API server validates them: anything that could steer a URL path
elsewhere (`/`, `..`, NUL, surrogates, a trailing newline) is never a valid name."""

from __future__ import annotations

import pytest

from numatopo_engine import kube_names

# Invalid as any kind of name: each could change a URL path or what a log line shows.
HOSTILE = [
    "",
    ".",
    "..",
    "../../apis/numatopo.io/v1alpha1/numatopologies",
    "a/b",
    "job%2F..",
    "job\x00",
    "job\ud800",
    "job\n",
    "Job",
    "-job",
    "job-",
    "jöb",
    "job name",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_are_neither_labels_nor_subdomains(name: str) -> None:
    assert (False, False) == (kube_names.is_label(name), kube_names.is_subdomain(name))


@pytest.mark.parametrize(
    ("name", "label", "subdomain"),
    [
        pytest.param("default", True, True, id="word"),
        pytest.param("kube-system", True, True, id="hyphen"),
        pytest.param("0abc9", True, True, id="digits-at-both-ends"),
        pytest.param("a" * 63, True, True, id="63-chars"),
        pytest.param("a" * 64, False, True, id="64-chars-only-a-subdomain"),
        pytest.param("gpu-1.rack-2.example", False, True, id="dotted"),
        pytest.param(".".join(["a" * 63] * 4)[:253], False, True, id="253-chars"),
        pytest.param("a" * 254, False, False, id="254-chars"),
        pytest.param("a..b", False, False, id="empty-dns-label"),
        pytest.param(7, False, False, id="not-a-string"),
        pytest.param(None, False, False, id="none"),
    ],
)
def test_labels_and_subdomains(name: object, *, label: bool, subdomain: bool) -> None:
    assert (label, subdomain) == (kube_names.is_label(name), kube_names.is_subdomain(name))


@pytest.mark.parametrize(
    ("uid", "expected"),
    [
        pytest.param("3f2a1b4c-1234-5678-9abc-def012345678", True, id="uuid"),
        pytest.param("uid-0001", True, id="emulator-uid"),
        pytest.param("", False, id="empty"),
        pytest.param("a" * 65, False, id="too-long"),
        pytest.param("uid/../x", False, id="slash"),
        pytest.param("uid\x00", False, id="nul"),
        pytest.param(None, False, id="none"),
    ],
)
def test_uid_shape(uid: object, *, expected: bool) -> None:
    assert expected is kube_names.is_uid(uid)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("gpu", True),
        ("kubernetes.io/hostname", True),
        ("topology.kubernetes.io/zone", True),
        ("node_role.x", True),
        ("a/b/c", False),
        ("/gpu", False),
        ("example.com/", False),
        ("Example.com/gpu", False),
        ("-gpu", False),
        ("g" * 64, False),
    ],
)
def test_label_keys(key: str, *, expected: bool) -> None:
    assert expected is kube_names.is_qualified_name(key)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", True), ("h100", True), ("8", True), ("a_b.c-d", True), ("-1", False), ("v" * 64, False)],
)
def test_label_values(value: str, *, expected: bool) -> None:
    assert expected is kube_names.is_label_value(value)


def test_a_problem_shows_the_name_escaped() -> None:
    """No control character or surrogate of a caller's name is echoed as it came."""
    problem = kube_names.name_problem("PodName", "job\x00\ud800/..")

    assert (
        "PodName 'job\\x00\\ud800/..' is not a valid name (a DNS-1123 subdomain: "
        "a-z, 0-9, '-', '.', at most 253)"
    ) == problem
    assert "" == kube_names.name_problem("PodNamespace", "default", label=True)
    assert "PodNamespace is missing" == kube_names.name_problem("PodNamespace", None, label=True)
