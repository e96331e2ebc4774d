"""`kubectl numatopo explain POD`: why a pod is where it is, node by node.

The pod is judged exactly as the operator's extender judges it in a scheduling cycle
(`ClusterView.judge`: kube-scheduler's node filters, then `extender.judge_candidates` on the
bookings the operator would hold); the per-node answers are grouped by reason and counted, as
kube-scheduler counts them in "0/N nodes are available".
"""

from __future__ import annotations

from collections import Counter, defaultdict

from numatopo_cli.kubectl.nodes import format_columns
from numatopo_cli.kubectl.reports import ExplainReport, Fit, GroupSearch, RefusalGroup
from numatopo_engine import annotations as keys
from numatopo_engine import pod_request
from numatopo_engine.domains import describe_domain
from numatopo_operator import pod_view, translate
from numatopo_operator.cluster_view import ClusterView, GroupJudgement
from numatopo_operator.translate import RawPod


def _groups(kind: str, refused: dict[str, str]) -> list[RefusalGroup]:
    by_reason: dict[str, list[str]] = defaultdict(list)
    for node, reason in refused.items():
        by_reason[reason].append(node)
    return [
        RefusalGroup(kind=kind, reason=reason, count=len(nodes), nodes=sorted(nodes))
        for reason, nodes in by_reason.items()
    ]


def group_search(judged: GroupJudgement) -> GroupSearch:
    placement = judged.placement
    if placement is None:
        return GroupSearch(
            group=judged.group, members=judged.members, placed=False, reason=judged.reason
        )
    per_node = Counter(assignment.node for assignment in placement.assignments.values())
    return GroupSearch(
        group=judged.group,
        members=judged.members,
        placed=True,
        domain=describe_domain(placement.level, placement.path),
        nodes=dict(sorted(per_node.items())),
    )


def explain_report(
    view: ClusterView, pod: RawPod, group: GroupJudgement | None = None
) -> ExplainReport:
    """The pod judged node by node; `group` is its group's domain search
    (`ClusterView.judge_group`), when it names a group."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
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
        pod=pod_view.pod_key(pod),
        node_name=translate.pod_node(pod) or "",
        state=str(annotations.get(keys.STATE, "")),
        reason=str(annotations.get(keys.REASON, "")),
        wants_topology=pod_request.wants_topology(pod),
        signatures_checked=view.signatures_checked,
        nodes=len(judged.candidates) + len(judged.scheduler),
        fits=fits,
        refusals=refusals,
        group=group_search(group) if group is not None else None,
    )


def explain_text(report: ExplainReport, *, best: int = 5) -> str:
    lines = [
        f"Pod {report.pod}",
        f"  node:   {report.node_name or 'not bound (Pending)'}",
        f"  state:  {report.state or '-'}" + (f" ({report.reason})" if report.reason else ""),
    ]
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
        lines += _indented(["NODE", "SCORE", "RANK"], rows)
    search = report.group
    if search is not None:
        lines.append(f"Group {search.group} ({search.members} members not planned yet):")
        if search.placed:
            lines.append(f"  would be placed in {search.domain}")
            lines += _indented(["NODE", "MEMBERS"], [[n, str(c)] for n, c in search.nodes.items()])
        else:
            lines.append(f"  no domain holds it: {search.reason}")
    if not report.signatures_checked:
        lines.append("(signatures unchecked: every assignment counted as written)")
    return "\n".join(lines)


def _indented(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["  " + line for line in format_columns(header, rows).splitlines()]
