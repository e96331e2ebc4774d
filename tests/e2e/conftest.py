"""A real cluster for `pytest -m e2e`: the one `$KUBECONFIG` points to.

Everything here is skipped, with the reason, when no cluster is configured or reachable.
Knobs (environment):
  NUMATOPO_E2E_IMAGE    the numatopo image to install, `repository:tag` (default: chart's)
  NUMATOPO_E2E_VALUES   a values file merged over the e2e defaults (node selector, GPU mode)
  NUMATOPO_E2E_TIMEOUT  seconds to wait for each step (default 300)
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "helm" / "numatopo"
RELEASE = "numatopo-e2e"
NAMESPACE = "numatopo-e2e"
TIMEOUT = float(os.environ.get("NUMATOPO_E2E_TIMEOUT", "300"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/e2e is an e2e test, whatever its own marks say."""
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.e2e)


def no_cluster_reason() -> str | None:
    """Why no e2e test can run here, or None when a cluster is configured and reachable."""
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        return "no cluster configured: set KUBECONFIG to run the e2e suite (pytest -m e2e)"
    missing = [p for p in kubeconfig.split(os.pathsep) if p and not Path(p).is_file()]
    if missing:
        return f"KUBECONFIG names missing files: {', '.join(missing)}"
    try:
        import helm_python as helm
        import kubernetes  # noqa: F401
    except ImportError as exc:
        return f"the e2e suite needs the test extra ({exc.name} is not installed)"
    try:
        with helm.Config(namespace=NAMESPACE) as config:
            config.check_reachable()
    except helm.HelmError as exc:
        return f"the cluster in KUBECONFIG is not reachable: {exc}"
    return None


def wait_for(what: str, check: Callable[[], Any], *, timeout: float = TIMEOUT) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(2)


@pytest.fixture(scope="session")
def wait() -> Callable[..., Any]:
    """`wait(what, check)`: poll until `check()` is truthy, fail naming `what`."""
    return wait_for


@pytest.fixture(scope="session")
def kube(request: pytest.FixtureRequest) -> Any:
    # A developer's KUBECONFIG must never receive an install from a plain `pytest`.
    if "e2e" not in str(request.config.getoption("markexpr", "")):
        pytest.skip("e2e tests install into the cluster of KUBECONFIG: run them with -m e2e")
    reason = no_cluster_reason()
    if reason is not None:
        pytest.skip(reason)
    import kubernetes

    kubernetes.config.load_kube_config()
    return kubernetes.client


def e2e_values() -> dict[str, Any]:
    values: dict[str, Any] = {
        "scheduler": {"enabled": True},
        # Test clusters rarely label GPU nodes: run on every Linux node there.
        "node": {"nodeSelector": {"kubernetes.io/os": "linux"}},
    }
    image = os.environ.get("NUMATOPO_E2E_IMAGE")
    if image:
        repository, _, tag = image.rpartition(":")
        values["image"] = {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"}
    extra = os.environ.get("NUMATOPO_E2E_VALUES")
    if extra:
        values = _merge(values, yaml.safe_load(Path(extra).read_text()) or {})
    return values


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


@pytest.fixture(scope="session")
def release(kube: Any) -> Iterator[dict[str, Any]]:
    """The chart installed through the Helm library, operator and node pods running."""
    import helm_python as helm

    with helm.Config(namespace=NAMESPACE) as config:
        config.install(
            str(CHART_DIR),
            RELEASE,
            e2e_values(),
            namespace=NAMESPACE,
            create_namespace=True,
            timeout=int(TIMEOUT),
        )
        try:
            apps = kube.AppsV1Api()
            wait_for(
                "one Ready operator replica (the active one)",
                lambda: (
                    (
                        apps.read_namespaced_deployment(
                            f"{RELEASE}-operator", NAMESPACE
                        ).status.ready_replicas
                        or 0
                    )
                    >= 1
                ),
            )
            wait_for(
                "every node pod Ready",
                lambda: _daemonset_ready(
                    apps.read_namespaced_daemon_set(f"{RELEASE}-node", NAMESPACE)
                ),
            )
            yield {"namespace": NAMESPACE, "values": e2e_values()}
        finally:
            config.uninstall(RELEASE, ignore_not_found=True, timeout=int(TIMEOUT))


def _daemonset_ready(daemonset: Any) -> bool:
    status = daemonset.status
    return bool(status.desired_number_scheduled) and (
        status.number_ready == status.desired_number_scheduled
    )


@pytest.fixture
def workload_namespace(kube: Any, release: dict[str, Any]) -> Iterator[str]:
    """A fresh namespace for one test's pods, deleted afterwards."""
    name = f"numatopo-e2e-{uuid.uuid4().hex[:6]}"
    core = kube.CoreV1Api()
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        core.delete_namespace(name)
