"""`numatopo selftest` (the chart's `helm test`) against the emulator: a real operator
holding its Lease and serving the extender over mutual TLS, the example pod assigned by
it and reported Aligned by the node agent (played here by the test, as the agent would
patch the pod's status), and each check failing when its part is broken."""

from __future__ import annotations

import asyncio
import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from numatopo_cli import main as cli
from numatopo_engine import annotations as keys

from .conftest import Cluster, Env
from .test_extender_tls import HOSTNAME, NODE, Pki, pki  # noqa: F401  (the fixture)
from .test_leadership_lease import FAST_LEASE

LEASE_NAMESPACE = "numatopo-system"
LEASE = "numatopo-operator"


CRDS = Path(__file__).resolve().parents[2] / "crds"


def crd(file: str) -> dict[str, Any]:
    """The project's CRD as the API server serves it once it is Established."""
    body: dict[str, Any] = yaml.safe_load((CRDS / file).read_text())
    body["status"] = {"conditions": [{"type": "Established", "status": "True"}]}
    return body


async def selftest(*argv: str) -> tuple[int, str]:
    out = io.StringIO()

    def call() -> int:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            return cli.main(["selftest", *argv])

    code = await asyncio.to_thread(call)
    return code, out.getvalue()


async def play_agent(cluster: Cluster) -> None:
    """Report the example pod Aligned once the operator assigned it, as the agent does."""
    while True:
        for name, pod in cluster.pods().items():
            annotations = pod["metadata"].get("annotations") or {}
            conditions = (pod.get("status") or {}).get("conditions") or []
            if (
                name.startswith("numatopo-selftest-")
                and annotations.get(keys.STATE) == keys.State.ASSIGNED.value
                and not conditions
            ):
                aligned = {"type": "numatopo.io/Aligned", "status": "True", "reason": "Enforced"}
                await cluster.patch_pod(name, {"status": {"conditions": [aligned]}})
        await asyncio.sleep(0.05)


async def _install(env: Env, pki: Pki, *, exported: str = "True") -> Any:  # noqa: F811
    cluster, start_operator, h100, _, topology_object, wait = env.parts()
    for file in ("numatopology.yaml", "networktopology.yaml"):
        await cluster.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd(file))
    await cluster.create_node(NODE)
    await cluster.create_numatopology(topology_object(NODE, h100, exported=exported))
    operator = await start_operator(
        **pki.settings(),
        lease_name=LEASE,
        lease_namespace=LEASE_NAMESPACE,
        pod_name="numatopo-operator-0",
        pod_namespace=LEASE_NAMESPACE,
        **FAST_LEASE,
    )
    await wait(lambda: operator.runtime.deciding, what="the operator holds the Lease")
    return operator


def _flags(cluster: Cluster, operator: Any, pki: Pki, tmp_path: Path) -> list[str]:  # noqa: F811
    cert, key = pki.client.write(tmp_path, "scheduler")
    return [
        *("--api-url", str(cluster.api.url), "--lease", f"{LEASE_NAMESPACE}/{LEASE}"),
        *("--extender-url", f"https://127.0.0.1:{operator.servers.extender_port}"),
        *("--tls-ca", str(pki.ca_file), "--tls-cert", str(cert), "--tls-key", str(key)),
        *("--tls-server-name", HOSTNAME, "--example-image", "numatopo:test"),
        *("--example-node", NODE, "--timeout-seconds", "20"),
    ]


async def test_a_healthy_install_passes_every_check(env: Env, pki: Pki, tmp_path: Path) -> None:  # noqa: F811
    operator = await _install(env, pki)
    agent = asyncio.create_task(play_agent(env.cluster))
    try:
        code, out = await selftest(*_flags(env.cluster, operator, pki, tmp_path))
    finally:
        agent.cancel()
    lines = [line for line in out.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert code == 0, out
    assert len(lines) == 6, out
    assert all(line.startswith("PASS") for line in lines), out
    assert "held by numatopo-operator-0" in out
    assert "HTTP 200 over TLS with a client certificate" in out
    assert "numatopo.io/Aligned=True" in out
    assert "6 of 6 checks passed" in out
    # The example pod is gone afterwards.
    assert not [n for n in env.cluster.pods() if n.startswith("numatopo-selftest-")]


async def test_each_broken_part_fails_its_check(env: Env, pki: Pki, tmp_path: Path) -> None:  # noqa: F811
    operator = await _install(env, pki, exported="False")
    flags = _flags(env.cluster, operator, pki, tmp_path)
    # No agent reports the pod, no client certificate, a Lease nobody holds.
    flags[flags.index("--tls-cert") : flags.index("--tls-cert") + 4] = []
    flags[flags.index("--lease") + 1] = f"{LEASE_NAMESPACE}/nobody"
    flags[flags.index("--timeout-seconds") + 1] = "2"
    code, out = await selftest(*flags)
    failed = [line.split(":")[0] for line in out.splitlines() if line.startswith("FAIL")]
    assert code == 1, out
    assert failed == [
        "FAIL  Numatopologies fresh",
        f"FAIL  active operator (Lease {LEASE_NAMESPACE}/nobody)",
        "FAIL  extender /filter",
        "FAIL  example pod default/numatopo-selftest-"
        + out.split("numatopo-selftest-")[1][:6]
        + " Aligned",
    ], out
    assert "is stale" in out
    assert "PASS  CRD numatopologies.numatopo.io" in out


def test_a_timeout_that_ends_before_the_first_look_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A wait of 0 s used to skip the loop and crash on an unset result (UnboundLocalError).
    for text, error in [
        ("0", "0 is not a positive number of seconds"),
        ("-5", "-5 is not a positive number of seconds"),
        ("inf", "inf is not a positive number of seconds"),
        ("nan", "nan is not a positive number of seconds"),
        ("soon", "'soon' is not a number of seconds"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            cli.main(["selftest", "--timeout-seconds", text])
        assert exit_.value.code == 2
        assert f"argument --timeout-seconds: {error}" in capsys.readouterr().err
