"""Which assignments on this node to enforce (pure: pod views in, decisions out).

An assignment is a claim only when the operator's signature for the pod verifies with a trusted key;
claims are then booked in the engine's `state.claim_order`, as the operator's ledger books them
(docs/DESIGN.md, "Pod annotations": `seq` and `sig`): the earlier decision is enforced and the later
one refused, as the kubelet would refuse a conflicting CPU request. Each assignment is also checked
against this machine before anything is written (its CPUs online, its memory nodes present with
memory), and claims that would leave the shared pool no CPU are refused, so that one bad assignment
costs only its own pod.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from numatopo_engine import state
from numatopo_engine.annotations import Assignment, ContainerAssignment, Observed
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import NumaNode, NumatopologySpec
from numatopo_engine.signing import PodIdentity, Verifier
from numatopo_exporter.agent import cgroups, planning
from numatopo_exporter.agent.pod_view import PodView, RunningContainer

UNSIGNED = "UnsignedAssignment"


@dataclass(frozen=True)
class PodAssignment:
    """A pod on this node whose assignment the agent enforces."""

    uid: str
    key: str
    """`namespace/name`, as NodeState keys pods."""
    qos: cgroups.QosClass | None
    assignment: Assignment
    annotation: str
    """The raw annotation, to notice a changed assignment."""
    running: tuple[RunningContainer, ...] = ()
    body: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    observed: Observed | None = field(default=None, compare=False, repr=False)
    """Its `numatopo.io/observed`, as parsed with the rest of the pod."""

    def container_at(self, path: PurePosixPath) -> str:
        """The container name whose running id names the cgroup `path` ('' if none)."""
        return next((c.name for c in self.running if c.container_id.id in path.name), "")

    def refused(self, reason: str, message: str) -> Refusal:
        return Refusal(self.uid, reason, message, self.annotation, self.body)


@dataclass
class PodOutcome:
    """One accepted pod in this pass: its container cgroups and their targets, and what keeps it
    from `Aligned` so far."""

    paths: dict[PurePosixPath, planning.Target] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    reason: str = ""
    pending: bool = False
    """Not (all) running or not admitted yet: reported once it is, without a verdict now."""


@dataclass(frozen=True)
class Refusal:
    """A pod whose assignment is not enforced, and why (for its Event)."""

    uid: str
    reason: str
    message: str
    annotation: str
    body: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


def _cpu_only(assignment: Assignment) -> Assignment:
    # The agent enforces CPUs and memory nodes only: GPUs and memory bytes are the operator's.
    return assignment.model_copy(
        update={
            "containers": {
                name: ContainerAssignment(cpus=c.cpus, exclusive=c.exclusive, mems=c.mems)
                for name, c in assignment.containers.items()
            }
        }
    )


def _check_on_node(assignment: Assignment, online: planning.Cpuset) -> str:
    """What in `assignment` this machine does not have ('' if nothing)."""
    problems: list[str] = []
    for name, container in sorted(assignment.containers.items()):
        if missing_cpus := container.cpus - online.cpus:
            problems.append(
                f"container {name}: CPUs {missing_cpus} are not online here (online: {online.cpus})"
            )
        if missing_mems := container.mems - online.mems:
            problems.append(
                f"container {name}: memory nodes {missing_mems} do not exist or have no "
                f"memory here (nodes with memory: {online.mems})"
            )
    return "; ".join(problems)


def exclusive_cpus(assignment: Assignment) -> CPUSet:
    return CPUSet(cpu for c in assignment.containers.values() if c.exclusive for cpu in c.cpus)


def unsigned(pod: PodView, assignment: Assignment, verifier: Verifier) -> str:
    """Why the pod's assignment is not the operator's decision for it ('' when it is)."""
    return verifier.problem(assignment, PodIdentity(pod.uid, pod.key))


def select_assignments(
    pods: Iterable[PodView],
    *,
    node_name: str,
    online: planning.Cpuset,
    verifier: Verifier,
    newest: dict[str, int] | None = None,
) -> tuple[list[PodAssignment], list[Refusal]]:
    """The pods of `node_name` to enforce, in `state.claim_order`, and those refused (invalid, not
    signed for the pod by the operator, not possible on this machine, overlapping, or taking the
    last shared CPU), in the order found; pods without the annotation and finished pods are in
    neither. `newest` (pod uid -> the highest `seq` its signed assignment showed; kept by the
    caller, updated here) makes a pod showing an older one again stale: its claim comes last."""
    newest = {} if newest is None else newest
    stale: set[str] = set()
    candidates: list[PodAssignment] = []
    refused: list[Refusal] = []
    for pod in pods:
        text = pod.annotation
        if text is None or pod.finished or pod.node_name != node_name:
            continue
        uid, key, body = pod.uid, pod.key, pod.body
        assignment = pod.assignment
        if assignment is None:
            refused.append(Refusal(uid, "InvalidAssignment", pod.invalid, text, body))
            continue
        if assignment.node != node_name:
            message = (
                f"the assignment is for node {assignment.node!r}, the pod runs on {node_name!r}"
            )
            refused.append(Refusal(uid, "WrongNode", message, text, body))
            continue
        if problem_text := unsigned(pod, assignment, verifier):
            refused.append(Refusal(uid, UNSIGNED, problem_text, text, body))
            continue
        if assignment.seq < newest.get(uid, -1):
            stale.add(key)
        else:
            newest[uid] = assignment.seq
        # Checked per pod before planning: a CPU or memory node this machine lacks would otherwise
        # make the planner widen kubepods, fail, and fail every pod with it.
        if problem_text := _check_on_node(assignment, online):
            refused.append(Refusal(uid, "AssignmentNotOnNode", problem_text, text, body))
            continue
        candidates.append(
            PodAssignment(uid, key, pod.qos, assignment, text, pod.running, body, pod.observed)
        )
    topology = NumatopologySpec(numa_nodes=[NumaNode(id=0, cpus=online.cpus)])
    accepted, overlapping = state.book_in_claim_order(
        state.NodeState(topology),
        candidates,
        booked=lambda entry: _cpu_only(entry.assignment),
        stale=stale,
    )
    for entry, why in overlapping:
        refused.append(entry.refused("AssignmentOverlaps", why))

    _keep_a_shared_cpu(accepted, refused, online)
    return accepted, refused


def _keep_a_shared_cpu(
    accepted: list[PodAssignment], refused: list[Refusal], online: planning.Cpuset
) -> None:
    """Refuse accepted claims, latest decision first (what already runs stays enforced), until
    their exclusive CPUs leave the shared pool (sandboxes, every container without exclusive CPUs)
    at least one online CPU."""
    exclusive = CPUSet(cpu for entry in accepted for cpu in exclusive_cpus(entry.assignment))
    while accepted and exclusive and not (online.cpus - exclusive):
        latest = max((e for e in accepted if exclusive_cpus(e.assignment)), key=state.claim_order)
        accepted.remove(latest)
        taken = exclusive_cpus(latest.assignment)
        message = (
            f"exclusive CPUs of this pod ({taken}) together with "
            f"those of earlier pods would take every online CPU ({online.cpus}); "
            "nothing would be left for the shared pool"
        )
        refused.append(latest.refused("SharedPoolExhausted", message))
        # Accepted claims share no exclusive CPU: the pool gets back exactly what this one held.
        exclusive = exclusive - taken
