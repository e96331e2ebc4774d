"""The agent process (`numatopo agent`): write the cpusets of this node's assigned pods
(DaemonSet, root). Its flags, its start-up and `serve()`."""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path

from numatopo_engine.resources import ResourceNames
from numatopo_engine.signing import SigningKeyError, Verifier
from numatopo_exporter import metrics
from numatopo_exporter.agent import cgroupfs
from numatopo_exporter.agent.loop import AgentLoop
from numatopo_exporter.agent.node_status import COMPONENT
from numatopo_exporter.agent.pod_resources import DEFAULT_SOCKET
from numatopo_exporter.discovery import kubelet
from numatopo_exporter.node_process import add_node_flags, check_node, start
from numatopo_exporter.steering.proxy import Steerer, SteeringConfig
from numatopo_kube import KubeClient, KubeError


async def serve(args: argparse.Namespace) -> int:
    """Run the agent that `args` describe until cancelled."""
    client = KubeClient.connect(args.api_url, component=COMPONENT, host=args.node_name)
    agent_metrics = metrics.AgentMetrics()
    patterns = tuple(p.strip() for p in args.gpu_resources.split(",") if p.strip())
    async with client, contextlib.AsyncExitStack() as stack:
        await check_node(client, args.node_name)
        loop = AgentLoop(
            client,
            node_name=args.node_name,
            cgroup_root=args.cgroup_root,
            kubelet_state=args.kubelet_state,
            metrics=agent_metrics,
            resync_seconds=args.resync_seconds,
            pod_resources_socket=args.pod_resources_socket,
            resources=ResourceNames(gpu=patterns or ResourceNames().gpu),
            verifier=trusted_keys(args),
        )
        if args.steer_resource:
            steerer = Steerer(
                candidates=lambda: loop.pods.in_flight,
                config=SteeringConfig(
                    resource_name=args.steer_resource,
                    kubelet_dir=args.steer_kubelet_dir,
                    steering_dir=args.steer_socket_dir,
                    answer_deadline_seconds=args.steer_answer_deadline_seconds,
                ),
                metrics=metrics.SteeringMetrics(agent_metrics.registry),
            )
            await stack.enter_async_context(steerer)
            loop.steered = lambda: steerer.status().steering
        if args.metrics_port:
            runner = await metrics.start_metrics_server(
                agent_metrics.registry, host=args.metrics_address, port=args.metrics_port
            )
            stack.push_async_callback(runner.cleanup)
        await loop.run()
    return 0


TRUSTED_KEYS_ENV = "NUMATOPO_TRUSTED_KEYS"


def trusted_keys(args: argparse.Namespace) -> Verifier:
    """The operator's public keys (PEM: `--trusted-keys-file`, else the variable
    NUMATOPO_TRUSTED_KEYS, which the chart fills); raises SigningKeyError without any,
    unless `--insecure-accept-unsigned` says to enforce every assignment as written."""
    if args.insecure_accept_unsigned:
        return Verifier(accept_unsigned=True)
    if args.trusted_keys_file is not None:
        try:
            pem = args.trusted_keys_file.read_bytes()
        except OSError as exc:
            raise SigningKeyError(f"cannot read --trusted-keys-file: {exc}") from None
    else:
        pem = os.environ.get(TRUSTED_KEYS_ENV, "").encode()
    if not pem.strip():
        raise SigningKeyError(
            "no trusted keys: the agent enforces only assignments signed by the operator; "
            f"pass --trusted-keys-file or set {TRUSTED_KEYS_ENV} to the operator's public "
            "key (PEM), or --insecure-accept-unsigned where every pod writer is trusted"
        )
    try:
        return Verifier.from_pem(pem)
    except SigningKeyError as exc:
        raise SigningKeyError(f"trusted keys: {exc}") from None


def run(args: argparse.Namespace) -> int:
    def check() -> None:
        # Checked once at start: a wrong mount or missing key is a configuration error.
        cgroupfs.detect_hierarchy(args.cgroup_root)
        trusted_keys(args)

    return start(
        "agent", args, serve, errors=(KubeError, cgroupfs.CgroupError, SigningKeyError), check=check
    )


HELP = "enforce CPU assignments in cgroup cpusets (DaemonSet)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--cgroup-root",
        type=Path,
        default=Path("/sys/fs/cgroup"),
        help="where cgroups are mounted (default /sys/fs/cgroup)",
    )
    add(
        "--kubelet-state",
        type=Path,
        default=kubelet.STATE_PATH,
        help="the kubelet's cpu_manager_state (default %(default)s)",
    )
    add("--resync-seconds", type=float, default=10.0, help="drift check period (default 10)")
    add(
        "--pod-resources-socket",
        type=lambda text: Path(text) if text else None,
        default=DEFAULT_SOCKET,
        help="the kubelet's PodResources socket, read to follow the GPUs the kubelet really "
        "gives (default %(default)s; an empty value turns Follow off: GPU pods are then "
        "never reported Aligned)",
    )
    add(
        "--gpu-resources",
        default="",
        help="comma list of the patterns of extended resources whose devices are GPUs, for "
        "Follow (default " + ",".join(ResourceNames().gpu) + ", as the operator's flag)",
    )
    add(
        "--trusted-keys-file",
        type=Path,
        help=f"PEM public keys or certificates of the operator's signing keys (default: the "
        f"variable {TRUSTED_KEYS_ENV}); only assignments they verify are enforced",
    )
    add(
        "--insecure-accept-unsigned",
        action="store_true",
        help="enforce assignments without checking the operator's signature (anyone who "
        "can edit a pod can then take other pods' CPUs): never in a shared cluster",
    )
    steer = parser.add_argument_group(
        "steering (opt-in): make the kubelet give each container its assigned GPUs"
    )
    steer.add_argument(
        "--steer-resource",
        default="",
        metavar="NAME",
        help="register this GPU resource (e.g. nvidia.com/gpu) with the kubelet and put the "
        "vendor's device plugin behind numatopo (default: off). Needs Topology Manager and "
        "CPU manager policy none on the node, and the vendor plugin's kubelet socket pointed "
        "at --steer-socket-dir/kubelet.sock",
    )
    steer.add_argument(
        "--steer-kubelet-dir",
        type=Path,
        default=SteeringConfig().kubelet_dir,
        help="the kubelet's device-plugins directory (default %(default)s)",
    )
    steer.add_argument(
        "--steer-socket-dir",
        type=Path,
        default=SteeringConfig().steering_dir,
        help="where numatopo serves the Registration socket the vendor plugin registers with "
        "(default %(default)s)",
    )
    steer.add_argument(
        "--steer-answer-deadline-seconds",
        type=float,
        default=SteeringConfig().answer_deadline_seconds,
        help="longest time to answer the kubelet's GetPreferredAllocation; past it the "
        "kubelet's own choice stands (default %(default)s)",
    )
    add_node_flags(parser, metrics_port=9102)
