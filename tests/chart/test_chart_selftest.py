"""`helm test`'s pod (templates/tests/selftest.yaml): a test hook running `numatopo
selftest` with the flags its checks need, mounting only the scheduler's side of the
extender's TLS, under an account granted exactly what the selftest code calls."""

from __future__ import annotations

from typing import Any

from numatopo_cli import selftest
from numatopo_cli.main import build_parser

from .conftest import NAMESPACE, RELEASE, Find, Render
from .test_chart_rbac import REPO, granted

ACCOUNT = f"{RELEASE}-selftest"
SCHEDULER_ON = {"scheduler": {"enabled": True}}
NAMESPACED = {"pods", "leases"}


def _pod(manifests: list[dict[str, Any]], find: Find) -> dict[str, Any]:
    return find(manifests, "Pod", ACCOUNT)


def _args(pod: dict[str, Any]) -> list[str]:
    [container] = pod["spec"]["containers"]
    args: list[str] = container["args"]
    return args


def test_the_pod_is_a_test_hook_running_selftest(render: Render, find: Find) -> None:
    pod = _pod(render(SCHEDULER_ON), find)
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["serviceAccountName"] == ACCOUNT
    args = _args(pod)
    assert args[0] == "selftest"
    assert f"--lease={NAMESPACE}/{RELEASE}-operator" in args
    assert f"--extender-url=https://{RELEASE}-operator.{NAMESPACE}.svc:8888" in args
    assert "--example-until=Aligned" in args
    # The rendered flags are the command's own.
    parsed = build_parser().parse_args(args)
    assert parsed.func is selftest.run
    assert parsed.tls_cert == "/etc/numatopo/extender-tls/tls.crt"


def test_the_pod_mounts_the_schedulers_side_of_the_tls_only(render: Render, find: Find) -> None:
    pod = _pod(render(SCHEDULER_ON), find)
    [volume] = pod["spec"]["volumes"]
    mounted = {
        (source["secret"]["name"], item["key"], item["path"])
        for source in volume["projected"]["sources"]
        for item in source["secret"]["items"]
    }
    assert mounted == {
        (f"{RELEASE}-extender-client-tls", "tls.crt", "tls.crt"),
        (f"{RELEASE}-extender-client-tls", "tls.key", "tls.key"),
        (f"{RELEASE}-extender-server-tls", "ca.crt", "server-ca.crt"),
    }


def test_without_the_scheduler_or_replicas_the_checks_that_need_them_are_off(
    render: Render, find: Find
) -> None:
    args = _args(_pod(render({"operator": {"replicas": 1}}), find))
    assert not [a for a in args if a.startswith(("--lease", "--extender-url", "--tls-"))]
    assert "volumes" not in _pod(render(None), find)["spec"]


def test_it_can_be_turned_off(render: Render) -> None:
    manifests = render({"selftest": {"enabled": False}})
    assert not [m for m in manifests if m["metadata"]["name"] == ACCOUNT]


def _selftest_calls() -> set[tuple[str, str, str]]:
    """What `numatopo_cli/selftest` calls of the client layer (read from its source)."""
    from .test_chart_rbac import collect_helper_calls

    calls = collect_helper_calls(REPO / "cli" / "numatopo_cli", "selftest")
    return set().union(*calls.values())


def test_its_account_is_granted_exactly_what_the_selftest_calls(render: Render) -> None:
    calls = _selftest_calls()
    assert ("", "pods", "create") in calls
    expected = {
        (NAMESPACE if resource in NAMESPACED else "cluster", group, resource, verb)
        for group, resource, verb in calls
    }
    assert granted(render(SCHEDULER_ON), ACCOUNT) == expected
