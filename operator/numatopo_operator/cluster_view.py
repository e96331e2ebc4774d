"""The operator's view of the cluster, rebuilt from one list of pods and Numatopologies.

`kubectl numatopo` and `numatopo selftest` answer "what would the operator say now?" from
outside it, with no second implementation of its decisions: the lists go through the paths
that feed a running operator (`handlers.observe_topology`, `handover.listed_bookings` into
`Ledger.end_resync` as a new holder does, the mix learner), and the extender's
`judge_candidates` judges. Signatures are checked with the keys given (none: every
assignment is taken as written, as `signatures_checked` says).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from numatopo_engine import node_rules, pod_request
from numatopo_engine.domains import GroupPlacement
from numatopo_engine.errors import InvalidRequestError
from numatopo_engine.groups import group_of
from numatopo_engine.network_topology import HOSTNAME_LABEL
from numatopo_engine.signing import Verifier
from numatopo_operator import extender, handlers, handover, indexes, pod_view, translate
from numatopo_operator.groups import indexes as group_indexes
from numatopo_operator.groups import release as group_release
from numatopo_operator.groups.members import GroupBook
from numatopo_operator.indexes import kopf_body
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings
from numatopo_operator.translate import RawPod

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Judgement:
    """One pod judged on every candidate node, as the extender's filter would judge it."""

    candidates: list[str]
    verdicts: extender.Verdicts
    scheduler: dict[str, str] = field(default_factory=dict)
    """node -> why kube-scheduler's own filters keep the pod off (the extender never sees)."""
    invalid: str = ""
    """Why the pod's request cannot be read ('' when it can): no node is judged then."""


@dataclass(frozen=True)
class GroupJudgement:
    """Where the pod's group would go now, as the operator's group worker searches."""

    group: str
    members: int
    """The members the search placed (those not planned yet)."""
    placement: GroupPlacement | None
    reason: str = ""
    """Why no domain holds them ('' when placed)."""


@dataclass(frozen=True)
class ClusterView:
    runtime: Runtime
    """A standalone operator runtime fed with the lists (never started, never writes)."""
    nodes: dict[str, dict[str, Any]]
    """Node objects by name (empty when they could not be listed)."""
    pods: list[RawPod]
    """The live pods listed (finished ones left out)."""
    signatures_checked: bool

    def node_names(self) -> list[str]:
        """Every node known from a Node object or a Numatopology, in name order."""
        return sorted(set(self.nodes) | set(self.runtime.ledger.nodes()))

    def pods_on(self, node: str) -> list[RawPod]:
        return [pod for pod in self.pods if translate.pod_node(pod) == node]

    def judge(self, pod: RawPod) -> Judgement:
        """`pod` on every node: kube-scheduler's node filters first, then `judge_candidates`."""
        runtime = self.runtime
        spec = pod.get("spec") or {}
        scheduler: dict[str, str] = {}
        candidates: list[str] = []
        for name in self.node_names():
            node = self.nodes.get(name)
            if node is not None:
                metadata = node.get("metadata") or {}
                labels = {HOSTNAME_LABEL: name, **(metadata.get("labels") or {})}
                shown = {**node, "metadata": {**metadata, "labels": labels}}
                why = node_rules.refusal(spec, shown)
                if why:
                    scheduler[name] = why
                    continue
            candidates.append(name)
        try:
            request = pod_request.request_from_pod(pod, runtime.settings.resources)
        except InvalidRequestError as exc:
            return Judgement(
                candidates, extender.Verdicts(), scheduler, translate.invalid_message(exc)
            )
        verdicts = extender.judge_candidates(
            request, extender.candidates(runtime, candidates, request.key), runtime.decisions
        )
        return Judgement(candidates, verdicts, scheduler)

    async def judge_group(self, pod: RawPod) -> GroupJudgement | None:
        """The group worker's search for the group's unplanned members; None without a group."""
        try:
            spec = group_of(pod.get("metadata") or {})
        except InvalidRequestError as exc:
            return GroupJudgement("", 0, None, str(exc))
        if spec is None:
            return None
        book = GroupBook()
        for member in self.pods:
            book.observe(member)
        views = [view for view in book.views(spec.key) if not view.planned]
        if not views:
            return GroupJudgement(spec.key, 0, None, "every member is planned already")
        try:
            placement = await group_release.search(self.runtime, spec, views)
        except group_release.GroupUnplaceableError as exc:
            return GroupJudgement(spec.key, len(views), None, str(exc))
        return GroupJudgement(spec.key, len(views), placement)


def replay(
    pods: Iterable[RawPod],
    numatopologies: Iterable[Mapping[str, Any]],
    *,
    nodes: Iterable[RawPod] = (),
    network_topologies: Iterable[Mapping[str, Any]] = (),
    verifier: Verifier | None = None,
    settings: OperatorSettings | None = None,
) -> ClusterView:
    """The cluster as an operator that just took over would see it (see the module)."""
    checked = verifier is not None
    runtime = Runtime(
        settings or OperatorSettings(), verifier=verifier or Verifier(accept_unsigned=True)
    )
    for body in numatopologies:
        readings = indexes.numatopologies(body=kopf_body(body), logger=logger)
        for node, reading in readings.items():
            handlers.observe_topology(runtime, node, reading)
    live = [pod for pod in pods if not translate.is_finished(pod)]
    runtime.ledger.begin_resync()
    runtime.ledger.end_resync(handover.listed_bookings(runtime, live))
    for pod in live:
        runtime.workload.observe_pod(pod_view.pod_key(pod), pod, runtime.settings.resources)
    named = {str((node.get("metadata") or {}).get("name")): dict(node) for node in nodes}
    # The group worker's inputs, through kopf's index functions as in the operator.
    node_views: dict[str, list[group_indexes.NodeView]] = {}
    for listed in named.values():
        for name, view in group_indexes.node_views(body=kopf_body(listed)).items():
            node_views[name] = [view]
    topologies: dict[str, list[Any]] = {}
    for body in network_topologies:
        found = group_indexes.network_topologies(body=kopf_body(body), logger=logger)
        topologies.update((name, [spec]) for name, spec in found.items())
    runtime.groups.attach({"node_views": node_views, "network_topologies": topologies})
    return ClusterView(runtime, named, live, checked)
