"""What the two DaemonSet processes, `numatopo exporter` and `numatopo agent`, share:
their common flags and how they start (exit 2 with one line on a bad start)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any


def add_node_flags(parser: argparse.ArgumentParser, *, metrics_port: int) -> None:
    """`--node-name`, `--api-url` and `--metrics-port`, with the same meaning in both."""
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME", ""),
        help="this node's name (default $NODE_NAME)",
    )
    parser.add_argument(
        "--api-url",
        default="",
        help="API server URL without auth (e.g. kubectl proxy); "
        "default: in-cluster, else $KUBECONFIG",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=metrics_port,
        help=f"Prometheus /metrics port, 0 = off (default {metrics_port})",
    )


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
        print(f"numatopo {command}: {exc}", file=sys.stderr)
        return 2
