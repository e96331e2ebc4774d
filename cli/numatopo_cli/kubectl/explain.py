"""`kubectl numatopo explain POD`: why a pod is where it is, node by node.

The pod is judged exactly as the operator's extender judges it in a scheduling cycle
(`ClusterView.judge`: kube-scheduler's node filters, then `extender.judge_candidates`
on the bookings the operator would hold); here the per-node answers are grouped by
reason and counted, as kube-scheduler counts them in "0/N nodes are available".
"""

from __future__ import annotations

from collections import defaultdict

from numatopo_cli.kubectl.nodes import format_columns
from numatopo_cli.kubectl.reports import ExplainReport, Fit, RefusalGroup
from numatopo_engine import annotations as keys
from numatopo_engine import pod_request
from numatopo_operator import translate
from numatopo_operator.cluster_view import ClusterView
from numatopo_operator.translate import RawPod

__all__ = ["explain_report", "explain_text"]


def _groups(kind: str, refused: dict[str, str]) -> list[RefusalGroup]:
    by_reason: dict[str, list[str]] = defaultdict(list)
    for node, reason in refused.items():
        by_reason[reason].append(node)
    return [
        RefusalGroup(kind=kind, reason=reason, count=len(nodes), nodes=sorted(nodes))
        for reason, nodes in by_reason.items()
    ]


def explain_report(view: ClusterView, pod: RawPod) -> ExplainReport:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    wants = pod_request.wants_topology(pod)
    judged = view.judge(pod)
    verdicts = judged.verdicts
    refusals = _groups("scheduler", judged.scheduler)
    if judged.invalid:
        refusals.append(
            RefusalGroup(
                kind="invalid",
                reason=judged.invalid,
                count=len(judged.candidates),
                nodes=judged.candidates,
            )
        )
    refusals += _groups("unresolvable", verdicts.unresolvable)
    refusals += _groups("unsatisfiable", verdicts.failed)
    refusals.sort(key=lambda group: (-group.count, group.kind, group.reason))
    fits = sorted(
        (
            Fit(node=node, score=score, rank=round(verdicts.ranks[node], 6))
            for node, score in verdicts.scores.items()
        ),
        key=lambda fit: (-fit.rank, fit.node),
    )
    return ExplainReport(
        pod=translate.pod_key(pod),
        node_name=translate.pod_node(pod) or "",
        state=str(annotations.get(keys.STATE, "")),
        reason=str(annotations.get(keys.REASON, "")),
        wants_topology=wants,
        signatures_checked=view.signatures_checked,
        nodes=len(judged.candidates) + len(judged.scheduler),
        fits=fits,
        refusals=refusals,
    )


def explain_text(report: ExplainReport, *, best: int = 5) -> str:
    lines = [f"Pod {report.pod}"]
    where = report.node_name or "not bound (Pending)"
    lines.append(f"  node:   {where}")
    lines.append(
        f"  state:  {report.state or '-'}" + (f" ({report.reason})" if report.reason else "")
    )
    if not report.wants_topology:
        lines.append(
            "  the pod asks numatopo for nothing (no numatopo.io/policy): any node will do"
        )
    lines.append(f"Judged on {report.nodes} nodes as the operator's extender judges it:")
    lines.append(f"  fits on {len(report.fits)} nodes")
    for group in report.refusals:
        noun = "node" if group.count == 1 else "nodes"
        lines.append(f"  {group.count} {noun}: {group.kind}: {group.reason}")
    if report.fits:
        lines.append(f"Best nodes (of {len(report.fits)}):")
        rows = [[fit.node, str(fit.score), f"{fit.rank:.4f}"] for fit in report.fits[:best]]
        table = format_columns(["NODE", "SCORE", "RANK"], rows)
        lines += ["  " + line for line in table.splitlines()]
    if not report.signatures_checked:
        lines.append("(signatures unchecked: every assignment counted as written)")
    return "\n".join(lines)
