"""Flags shared by the two DaemonSet processes, `numatopo exporter` and `numatopo agent`."""

from __future__ import annotations

import argparse
import os


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
