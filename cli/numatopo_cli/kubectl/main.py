"""The `kubectl-numatopo` console script: `kubectl numatopo nodes|explain|top`.

A kubectl plugin by krew's conventions: an executable `kubectl-numatopo` on the PATH, its help
written as `kubectl numatopo ...`, kubectl's flag names where they mean the same (`--kubeconfig`,
`-n/--namespace`, `-o/--output`). It reads the cluster through numatopo's one client layer and
answers with the operator's own code (`numatopo_operator.cluster_view`). Exit codes: 0 success, 2 a
failure the user can act on (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from numatopo_cli.kubectl import explain, nodes, top
from numatopo_cli.kubectl.reading import Access, read_cluster
from numatopo_cli.render.cluster_svg import render_cluster_svg
from numatopo_kube import KubeError, KubeNotFoundError

PROG = "kubectl numatopo"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "The cluster as the numatopo operator sees it: free CPUs, memory, GPUs and NICs "
            "NUMA by NUMA, why a pod fits nowhere, who holds what."
        ),
    )
    add = parser.add_argument
    add("--kubeconfig", default="", help="kubeconfig file (default: $KUBECONFIG)")
    add("--api-url", default="", help="the API server's URL, e.g. that of `kubectl proxy`")
    add(
        "--release",
        default="numatopo/numatopo",
        metavar="NAMESPACE/FULLNAME",
        help="the numatopo install whose signing keys to trust (default: numatopo/numatopo)",
    )
    add(
        "--trusted-keys",
        default="",
        metavar="PEM",
        help="trusted public keys (overrides --release)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    shown = commands.add_parser(
        "nodes", help="per node, NUMA by NUMA: free/total, GPU mode, staleness"
    )
    shown.add_argument("-o", "--output", choices=["table", "json"], default="table")
    shown.add_argument("--svg", type=Path, metavar="FILE", help="also draw the cluster as SVG")
    why = commands.add_parser("explain", help="why a pod fits where it fits, node by node")
    why.add_argument("pod", metavar="POD")
    why.add_argument("-n", "--namespace", default="default")
    why.add_argument("-o", "--output", choices=["text", "json"], default="text")
    why.add_argument("--best", type=int, default=5, help="how many of the best nodes to list")
    held = commands.add_parser("top", help="bookings per node and namespace; who holds CPUs/GPUs")
    held.add_argument("node", nargs="?", metavar="NODE", help="one node only")
    held.add_argument("-o", "--output", choices=["table", "json"], default="table")
    return parser


async def _run(args: argparse.Namespace) -> str:
    access = Access(args.kubeconfig, args.api_url, args.release, args.trusted_keys)
    async with access.client() as kube:
        pod = None
        if args.command == "explain":
            pod = await kube.get_pod(args.namespace, args.pod)
        view, note = await read_cluster(access, kube)
    if note:
        print(note, file=sys.stderr)
    if args.command == "nodes":
        report = nodes.nodes_report(view)
        if args.svg is not None:
            args.svg.write_text(render_cluster_svg(report), encoding="utf-8")
        return report.to_json() if args.output == "json" else nodes.nodes_table(report)
    if pod is not None:
        explained = explain.explain_report(view, pod, await view.judge_group(pod))
        if args.output == "json":
            return explained.to_json()
        return explain.explain_text(explained, best=args.best)
    held = top.top_report(view, args.node)
    return held.to_json() if args.output == "json" else top.top_text(held)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        print(asyncio.run(_run(args)))
    except KubeNotFoundError as exc:
        print(f"{PROG}: not found: {exc}", file=sys.stderr)
        return 2
    except (KubeError, OSError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
