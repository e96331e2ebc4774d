"""What the extender's `/bind` checks before it binds anything (I/O: reads the pod and the node).

`/bind` writes a Binding with the operator's rights, so it binds only what kube-scheduler's
profile would have bound itself (docs/operations.md, "Security"). Only then does
`assigning.bind_pod` decide (claimed devices: `dra_bind`) and write the assignment and the
Binding, whose uid keeps a pod replaced since unbound.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from numatopo_engine import node_rules
from numatopo_operator import assigning, dra_bind
from numatopo_operator.errors import KubeForbiddenError, KubeNotFoundError
from numatopo_operator.extender_wire import BindingArgs
from numatopo_operator.pod_view import PodView
from numatopo_operator.runtime import Runtime

# What an API server puts in `spec.schedulerName` when the pod names none.
DEFAULT_SCHEDULER = "default-scheduler"


def not_ours(args: BindingArgs) -> str:
    """The one answer for a pod that is missing, has another uid, or is out of reach."""
    return f"pod {args.key} with uid {args.uid} is not a pending pod of this scheduler"


def pod_refusal(pod: Mapping[str, Any], scheduler_name: str) -> str:
    """'' when profile `scheduler_name` could be binding `pod` now, else why not (pure)."""
    view = PodView.of(pod)
    spec = view.spec
    if view.deleting:
        return "it is being deleted"
    if spec.get("nodeName"):
        return "it is bound to a node already"
    phase = view.status.get("phase")
    if phase != "Pending":
        return f"it is {phase or 'in no phase'}, not Pending"
    if spec.get("schedulingGates"):
        return "it still has scheduling gates"
    scheduler = spec.get("schedulerName") or DEFAULT_SCHEDULER
    if scheduler != scheduler_name:
        return f"its schedulerName is {scheduler}, not {scheduler_name}"
    return ""


async def bind_checked(runtime: Runtime, args: BindingArgs) -> str:
    """Bind the pod `args` names if every check passes: '' when bound, else why not;
    `KubeError` when the API cannot be asked. One bind of a pod at a time: kube-scheduler
    binds again after its extender timeout while the first may still run (a steered node's
    GPU slot, a slow API); the second would bind the pod before its assignment is written
    and the first, refused, take a bound pod's assignment back. The scheduler retries."""
    key = args.key
    if key in runtime.binding:
        return f"pod {key}: another bind of it is still running; try again"
    runtime.binding.add(key)
    try:
        return await _bind_checked(runtime, args)
    finally:
        runtime.binding.discard(key)


async def _bind_checked(runtime: Runtime, args: BindingArgs) -> str:
    settings = runtime.settings
    if settings.namespaces and args.namespace not in settings.namespaces:
        return not_ours(args)
    try:
        pod = PodView(await runtime.kube.get_pod(args.namespace, args.name))
    except (KubeNotFoundError, KubeForbiddenError):
        return not_ours(args)
    if pod.uid != args.uid:
        return not_ours(args)
    refused = pod_refusal(pod, settings.scheduler_name)
    if refused:
        return f"{not_ours(args)}: {refused}"
    try:
        node = await runtime.kube.get_node(args.node)
    except KubeNotFoundError:
        return f"pod {args.key} cannot go to node {args.node}: there is no such node"
    refused = node_rules.refusal(pod.spec, node)
    if refused:
        return f"pod {args.key} cannot go to node {args.node}: {refused}"
    plugin = dra_bind.plugin_served(node)
    await dra_bind.follow_member(runtime, pod, args.node, plugin=plugin)
    return await assigning.bind_pod(runtime, pod, args.node, first=dra_bind.decider(plugin))
