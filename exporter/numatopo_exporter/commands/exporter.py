"""`numatopo exporter`: publish this node's topology as `Numatopology/<node>` and keep it fresh."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from numatopo_engine.model import NumatopologySpec
from numatopo_exporter import kube
from numatopo_exporter.daemon import metrics, publishing, udev
from numatopo_exporter.daemon.backoff import Backoff
from numatopo_exporter.daemon.loop import ExporterLoop
from numatopo_exporter.discovery.discover import DiscoverOptions, discover
from numatopo_exporter.discovery.errors import DiscoveryError

logger = logging.getLogger("numatopo.exporter")


def make_scan(args: argparse.Namespace) -> Callable[[], NumatopologySpec]:
    options = DiscoverOptions(
        sysfs_root=args.sysfs_root, use_nvml=not args.no_nvml, node_name=args.node_name
    )

    def scan() -> NumatopologySpec:
        found = discover(options)
        for notice in found.notices:
            logger.info("%s", notice)
        return found.spec

    return scan


async def _serve(args: argparse.Namespace) -> int:
    scan = make_scan(args)
    exporter_metrics = metrics.ExporterMetrics()
    async with contextlib.AsyncExitStack() as stack:
        sink: publishing.Sink
        publisher: publishing.Publisher | None = None
        if args.no_publish:
            sink = publishing.PrintingSink(node_name=args.node_name)
        else:
            client = (
                kube.KubeClient(args.api_url) if args.api_url else kube.KubeClient.from_cluster()
            )
            await stack.enter_async_context(client)
            publisher = publishing.Publisher(client, node_name=args.node_name, clock=time.time)
            sink = publisher
        loop = ExporterLoop(
            scan=scan,
            sink=sink,
            metrics=exporter_metrics,
            resync_seconds=args.resync_seconds,
            backoff=Backoff(1.0, 60.0),
        )
        if args.oneshot:
            return 0 if await loop.step() else 2
        if args.metrics_port:
            runner = await metrics.start_metrics_server(
                exporter_metrics.registry, port=args.metrics_port
            )
            stack.push_async_callback(runner.cleanup)
        debouncer = udev.Debouncer(loop.request_rescan, delay_seconds=args.debounce_seconds)
        watch = udev.UdevWatch(debouncer.trigger)
        try:
            watch.start()
            stack.callback(watch.stop)
        except (OSError, ImportError) as exc:
            logger.warning(
                "no udev events (%s); relying on the %ss resync", exc, args.resync_seconds
            )
        tasks = [asyncio.create_task(loop.run())]
        if publisher is not None:
            tasks.append(
                asyncio.create_task(
                    publisher.watch(loop.request_republish, backoff=Backoff(1.0, 60.0))
                )
            )
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return 0


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not args.node_name:
        print("numatopo exporter: no node name: pass --node-name or set NODE_NAME", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_serve(args))
    except (kube.ApiError, DiscoveryError) as exc:
        print(f"numatopo exporter: {exc}", file=sys.stderr)
        return 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "exporter", help="publish this node's Numatopology (DaemonSet)", description=__doc__
    )
    parser.add_argument(
        "--sysfs-root",
        type=Path,
        default=Path("/"),
        help="where the host's / is mounted (default /)",
    )
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME", ""),
        help="this node's name (default $NODE_NAME)",
    )
    parser.add_argument(
        "--resync-seconds",
        type=float,
        default=300.0,
        help="rescan and compare this often (default 300)",
    )
    parser.add_argument(
        "--debounce-seconds",
        type=float,
        default=2.0,
        help="quiet time after a burst of udev events before rescanning (default 2)",
    )
    parser.add_argument("--oneshot", action="store_true", help="scan and publish once, then exit")
    parser.add_argument(
        "--no-publish", action="store_true", help="print the object instead of writing it"
    )
    parser.add_argument("--no-nvml", action="store_true", help="do not ask the NVIDIA driver")
    parser.add_argument(
        "--api-url",
        default="",
        help="API server URL without auth (e.g. kubectl proxy); default: in-cluster",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=9101,
        help="Prometheus /metrics port, 0 = off (default 9101)",
    )
    parser.set_defaults(func=run)
