"""`numatopo selftest`: is this install healthy? (what the chart's `helm test` pod runs).

Checks, in order, each printed as one `PASS`/`FAIL` line with what it found:

1. the CRDs are served (Established) by the API server;
2. every Numatopology is fresh (its exporter calls it current and its heartbeat is
   recent: the operator's own `stale_reason`), and which Nodes have none;
3. an active operator holds the Lease (a holder, renewed within the lease duration);
4. the extender answers `/filter` over its TLS, with the scheduler's client certificate
   when one is given (the chart's mutual TLS);
5. an example pod asking numatopo for one CPU on one NUMA node is placed: assigned by
   the operator and, unless `--example-until Assigned`, reported Aligned by the node
   agent. It is deleted afterwards, whatever happened.

Exit code 0 when every check passes, 1 when one fails, 2 when the cluster cannot be read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import ssl
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

import aiohttp

from numatopo_engine import annotations as keys
from numatopo_engine.model import GROUP
from numatopo_engine.network_topology import NETWORK_TOPOLOGY_PLURAL
from numatopo_kube import KubeClient, KubeError
from numatopo_kube.timestamps import unix_seconds
from numatopo_operator import translate
from numatopo_operator.cluster_view import replay

__all__ = ["HELP", "add_arguments", "run"]

HELP = "check an install end to end (CRDs, Numatopologies, Lease, extender, a pod placed)"
ALIGNED = "numatopo.io/Aligned"  # the condition the node agent writes on a pod
CRDS = (f"numatopologies.{GROUP}", f"{NETWORK_TOPOLOGY_PLURAL}.{GROUP}")
# The Lease is renewed every retry period; a holder that missed a renewal deadline is
# still the holder for this long (clock skew between this pod and the operator's).
LEASE_SLACK_SECONDS = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--api-url", default="", help="API server URL (default: in-cluster)")
    add("--namespace", default="default", help="where the example pod runs")
    add("--lease", default="", metavar="NAMESPACE/NAME", help="the operator's Lease")
    add("--extender-url", default="", help="e.g. https://numatopo-operator.numatopo.svc:8888")
    add("--tls-ca", default="", help="CA file that signed the extender's certificate")
    add("--tls-cert", default="", help="client certificate (the scheduler's)")
    add("--tls-key", default="", help="its key")
    add("--tls-server-name", default="", help="name to check in the server's certificate")
    add("--example-image", default="", help="image of the example pod ('': no example)")
    add("--example-scheduler", default="numatopo-scheduler")
    add("--example-node", default="", help="bind the example pod here (skips the scheduler)")
    add("--example-until", choices=["Assigned", "Aligned"], default="Aligned")
    add("--timeout-seconds", type=_seconds, default=120.0, help="how long the example pod may take")


def _seconds(text: str) -> float:
    # 0 or less would end the wait before the pod was looked at once.
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


@dataclass
class Report:
    checks: int = 0
    failed: int = 0

    def check(self, ok: bool, what: str, detail: str) -> None:
        self.checks += 1
        self.failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}  {what}: {detail}", flush=True)


async def _crds(kube: KubeClient, report: Report) -> None:
    for name in CRDS:
        crd = await kube.get_crd(name)
        conditions = ((crd or {}).get("status") or {}).get("conditions") or []
        established = any(
            c.get("type") == "Established" and c.get("status") == "True" for c in conditions
        )
        detail = "Established" if established else "not Established yet"
        report.check(established, f"CRD {name}", "not installed" if crd is None else detail)


async def _numatopologies(kube: KubeClient, report: Report) -> None:
    topologies = (await kube.list_numatopologies()).items
    nodes = (await kube.list_nodes()).items
    view = replay([], topologies, nodes=nodes)
    runtime = view.runtime
    published = set(runtime.ledger.nodes())
    bad = {node: why for node in published if (why := runtime.stale_reason(node))}
    report.check(
        bool(published) and not bad,
        "Numatopologies fresh",
        f"{len(published) - len(bad)} of {len(published)} current"
        + "".join(f"; {why}" for _, why in sorted(bad.items()))
        + ("" if published else "; none published (is the numatopo exporter running?)"),
    )
    missing = sorted(set(view.nodes) - published)
    if missing:
        shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
        print(f"note  {len(missing)} Nodes have no Numatopology (no exporter there): {shown}")


async def _lease(kube: KubeClient, report: Report, lease: str) -> None:
    namespace, _, name = lease.partition("/")
    try:
        spec = (await kube.get_lease(namespace, name)).get("spec") or {}
    except KubeError as exc:
        report.check(False, f"active operator (Lease {lease})", str(exc))
        return
    holder = str(spec.get("holderIdentity") or "")
    duration = float(spec.get("leaseDurationSeconds") or 15)
    renewed = unix_seconds(str(spec.get("renewTime") or ""))
    age = None if renewed is None else time.time() - renewed
    fresh = bool(holder) and age is not None and age <= duration + LEASE_SLACK_SECONDS
    detail = f"held by {holder or 'nobody'}" + ("" if age is None else f", renewed {age:.0f} s ago")
    report.check(fresh, f"active operator (Lease {lease})", detail)


def _tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    if not args.extender_url.startswith("https://"):
        return None
    context = ssl.create_default_context(cafile=args.tls_ca or None)
    if args.tls_cert:
        context.load_cert_chain(args.tls_cert, args.tls_key or None)
    return context


async def _extender(args: argparse.Namespace, report: Report) -> None:
    probe: dict[str, Any] = {
        "Pod": {
            "metadata": {"name": "numatopo-selftest-probe", "namespace": args.namespace},
            "spec": {"containers": [{"name": "probe"}]},
        },
        "Nodes": None,
        "NodeNames": [],
    }
    try:
        context = _tls(args)
        timeout = aiohttp.ClientTimeout(total=20)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(
                args.extender_url.rstrip("/") + "/filter",
                json=probe,
                ssl=context if context is not None else False,
                server_hostname=args.tls_server_name or None,
            ) as response,
        ):
            answer = json.loads(await response.text())
            error = answer.get("Error") if isinstance(answer, dict) else "not JSON"
            ok = response.status == 200 and not error
            cert = " with a client certificate" if args.tls_cert else ""
            over = f"TLS{cert}" if context else "plain HTTP"
            report.check(
                ok,
                "extender /filter",
                f"HTTP {response.status} over {over}" + (f": {error}" if error else ""),
            )
    except (aiohttp.ClientError, ssl.SSLError, OSError, ValueError, TimeoutError) as exc:
        report.check(False, "extender /filter", f"{type(exc).__name__}: {exc}")


def _example_pod(args: argparse.Namespace, name: str) -> dict[str, Any]:
    resources = {"cpu": "1", "memory": "64Mi"}
    spec: dict[str, Any] = {
        "schedulerName": args.example_scheduler,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "example",
                "image": args.example_image,
                "command": ["python", "-c", "import time; time.sleep(600)"],
                "resources": {"requests": resources, "limits": resources},
            }
        ],
    }
    if args.example_node:
        spec["nodeName"] = args.example_node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/name": "numatopo-selftest"},
            "annotations": {keys.POLICY: "single-numa-node"},
        },
        "spec": spec,
    }


def _placed(pod: dict[str, Any], until: str) -> tuple[bool, bool, str]:
    """(done, placed as asked, what the pod shows now)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    state = annotations.get(keys.STATE, "")
    node = translate.pod_node(pod) or "no node yet"
    shown = f"on {node}, state {state or 'none yet'}"
    conditions = (pod.get("status") or {}).get("conditions") or []
    ok = state == keys.State.ASSIGNED.value and (
        until == "Assigned"
        or any(c.get("type") == ALIGNED and c.get("status") == "True" for c in conditions)
    )
    if state and state != keys.State.ASSIGNED.value:
        return True, ok, shown + f" ({annotations.get(keys.REASON, '')})"
    aligned = next((c for c in conditions if c.get("type") == ALIGNED), None)
    if aligned is not None:
        shown += f", {ALIGNED}={aligned.get('status')}"
    return bool(state) if until == "Assigned" else aligned is not None, ok, shown


async def _example(kube: KubeClient, args: argparse.Namespace, report: Report) -> None:
    name = f"numatopo-selftest-{uuid.uuid4().hex[:6]}"
    await kube.create_pod(args.namespace, _example_pod(args, name))
    try:
        deadline = time.monotonic() + args.timeout_seconds
        shown = ""
        while time.monotonic() < deadline:
            pod = await kube.get_pod(args.namespace, name)
            done, ok, shown = _placed(pod, args.example_until)
            if done:
                break
            await asyncio.sleep(1.0)
        report.check(ok, f"example pod {args.namespace}/{name} {args.example_until}", shown)
    finally:
        await kube.delete_pod(args.namespace, name)


async def _checks(args: argparse.Namespace) -> Report:
    report = Report()
    async with KubeClient.connect(args.api_url, component="numatopo-selftest") as kube:
        await _crds(kube, report)
        await _numatopologies(kube, report)
        if args.lease:
            await _lease(kube, report, args.lease)
        if args.extender_url:
            await _extender(args, report)
        if args.example_image:
            await _example(kube, args, report)
    return report


def run(args: argparse.Namespace) -> int:
    try:
        report = asyncio.run(_checks(args))
    except KubeError as exc:
        print(f"numatopo selftest: {exc}", file=sys.stderr)
        return 2
    print(f"{report.checks - report.failed} of {report.checks} checks passed")
    return 1 if report.failed else 0
