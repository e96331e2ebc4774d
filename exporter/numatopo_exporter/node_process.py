"""What the two DaemonSet processes, `numatopo exporter` and `numatopo agent`, share: their common
flags, the Node read at start, and how they start (exit 2 with one line on a bad start)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from numatopo_kube import (
    KubeClient,
    KubeConfigError,
    KubeError,
    KubeNotFoundError,
    KubeUnavailableError,
)
from numatopo_kube.backoff import Backoff


def add_node_flags(parser: argparse.ArgumentParser, *, metrics_port: int) -> None:
    """`--node-name`, `--api-url`, `--metrics-port` and `--metrics-address`, with the same
    meaning in both."""
    add = parser.add_argument
    add(
        "--node-name",
        default=os.environ.get("NODE_NAME", ""),
        help="this node's name (default $NODE_NAME)",
    )
    add(
        "--api-url",
        default="",
        help="API server URL without auth (e.g. kubectl proxy); "
        "default: in-cluster, else $KUBECONFIG",
    )
    add(
        "--metrics-port",
        type=int,
        default=metrics_port,
        help=f"Prometheus /metrics port, 0 = off (default {metrics_port})",
    )
    # A separate address flag (not `host:port`) so that `--metrics-port` keeps its meaning.
    add(
        "--metrics-address",
        default="0.0.0.0",
        help="address /metrics and /healthz listen on (default %(default)s: every interface, "
        "for in-cluster scraping and the liveness probe; 127.0.0.1 keeps them on the node "
        "but then the kubelet's HTTP probe, which dials the pod IP, cannot reach them)",
    )


async def check_node(client: KubeClient, node_name: str) -> dict[str, Any]:
    """The Node `node_name`, read once at start so that a wrong URL, missing
    credentials or a wrong node name end the process with a clear message."""
    try:
        return await client.get_node(node_name)
    except KubeError as exc:
        if exc.not_found:
            raise KubeNotFoundError(
                404, "NotFound", f"no node named {node_name!r} (check --node-name or NODE_NAME)"
            ) from None
        if exc.status == 0:
            raise KubeUnavailableError(
                0, f"cannot reach the API server at {client.server}", exc.message
            ) from None
        raise


def start(
    command: str,
    args: argparse.Namespace,
    serve: Callable[[argparse.Namespace], Coroutine[Any, Any, int]],
    *,
    errors: tuple[type[Exception], ...],
    problem: str = "",
    check: Callable[[], object] | None = None,
) -> int:
    """Run `serve(args)`; a missing node name, `problem`, or one of `errors` raised by
    `check` or at start-up ends the process with exit code 2 and one line on stderr."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not args.node_name:
        problem = "no node name: pass --node-name or set NODE_NAME"
    if problem:
        print(f"numatopo {command}: {problem}", file=sys.stderr)
        return 2
    try:
        if check is not None:
            check()
        return asyncio.run(serve(args))
    except errors as exc:
        # A login problem reads as the problem, without its status-less reason.
        text = exc.message if isinstance(exc, KubeConfigError) else str(exc)
        print(f"numatopo {command}: {text}", file=sys.stderr)
        return 2


async def watch_own_numatopology(
    client: KubeClient,
    node_name: str,
    backoff: Backoff,
    seen: Callable[[str, Mapping[str, Any]], None],
    log: logging.Logger,
) -> None:
    """Hand each event of `Numatopology/<node_name>` to `seen` (its type and object);
    watch again after any error. Runs until cancelled."""
    while True:
        try:
            async for event in client.watch_numatopologies(name=node_name):
                # Servers that ignore the field selector send every node's object.
                if (event.object.get("metadata") or {}).get("name") != node_name:
                    continue
                backoff.reset()
                seen(event.type, event.object)
        except KubeError as exc:
            log.warning("watching Numatopology/%s: %s", node_name, exc)
        await asyncio.sleep(backoff.next_delay())
