"""The exporter process (`numatopo exporter`): publish this node's topology as
`Numatopology/<node>` and keep it fresh. Its flags, its start-up and `serve()`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from numatopo_engine.model import NumatopologySpec
from numatopo_exporter import metrics
from numatopo_exporter.daemon import publishing, udev
from numatopo_exporter.daemon.loop import ExporterLoop, ScanError
from numatopo_exporter.discovery.accelerator_flag import add_accelerator_flag
from numatopo_exporter.discovery.discover import DiscoverOptions, Discovery, discover
from numatopo_exporter.node_process import add_node_flags, check_node, start
from numatopo_kube import KubeClient, KubeError
from numatopo_kube.backoff import Backoff

logger = logging.getLogger("numatopo.exporter")


def make_discovery_scan(options: DiscoverOptions) -> Callable[[], Discovery]:
    """The exporter's scan: live discovery (sysfs, NVML, kubelet) of `options`, with what it
    ignored (the exporter's `Degraded` condition)."""

    def scan() -> Discovery:
        found = discover(options)
        for notice in found.notices:
            logger.log(logging.WARNING if notice in found.ignored else logging.INFO, "%s", notice)
        return found

    return scan


async def serve(
    args: argparse.Namespace,
    *,
    scan: Callable[[], NumatopologySpec | Discovery] | None = None,
    udev_monitor: Any = None,
) -> int:
    """Run the exporter that `args` describe until cancelled (or once, with --oneshot); `scan`
    and `udev_monitor` (tests) replace live discovery and the kernel's netlink socket."""
    scan = scan or make_discovery_scan(DiscoverOptions.from_args(args))
    exporter_metrics = metrics.ExporterMetrics()
    async with contextlib.AsyncExitStack() as stack:
        sink: publishing.Sink
        if args.no_publish:
            sink = publishing.PrintingSink(node_name=args.node_name)
        else:
            client = KubeClient.connect(
                args.api_url, component=publishing.FIELD_MANAGER, host=args.node_name
            )
            await stack.enter_async_context(client)
            await check_node(client, args.node_name)
            sink = publishing.Publisher(client, node_name=args.node_name, clock=time.time)
        loop = ExporterLoop(
            scan=scan,
            sink=sink,
            metrics=exporter_metrics,
            resync_seconds=args.resync_seconds,
            backoff=Backoff(1.0, 60.0),
        )
        if args.oneshot:
            # Not loop.step(): a single run reports its failure instead of retrying.
            spec = await loop.scan_once()
            await sink.publish(spec, scanned_at=loop.scanned_at, ignored=loop.ignored)
            return 0
        if args.metrics_port:
            runner = await metrics.start_metrics_server(
                exporter_metrics.registry, host=args.metrics_address, port=args.metrics_port
            )
            stack.push_async_callback(runner.cleanup)
        debouncer = udev.Debouncer(loop.request_rescan, delay_seconds=args.debounce_seconds)
        stack.callback(debouncer.cancel)
        watch = udev.UdevWatch(debouncer.trigger, monitor=udev_monitor)
        try:
            watch.start()
            stack.callback(watch.stop)
        except (OSError, ImportError) as exc:
            logger.warning(
                "no udev events (%s); relying on the %ss resync", exc, args.resync_seconds
            )
        tasks = [asyncio.create_task(loop.run())]
        if isinstance(sink, publishing.Publisher):
            watch_object = sink.watch(loop.request_republish, backoff=Backoff(1.0, 60.0))
            tasks.append(asyncio.create_task(watch_object))
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return 0


def run(args: argparse.Namespace) -> int:
    problem = ""
    if not args.sysfs_root.is_dir():
        problem = f"--sysfs-root {args.sysfs_root}: no such directory"
    return start("exporter", args, serve, errors=(KubeError, ScanError), problem=problem)


HELP = "publish this node's Numatopology (DaemonSet)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--sysfs-root",
        type=Path,
        default=Path("/"),
        help="where the host's / is mounted (default /)",
    )
    add(
        "--resync-seconds",
        type=float,
        default=300.0,
        help="rescan and compare this often (default 300)",
    )
    add(
        "--debounce-seconds",
        type=float,
        default=2.0,
        help="quiet time after a burst of udev events before rescanning (default 2)",
    )
    add("--oneshot", action="store_true", help="scan and publish once, then exit")
    add("--no-publish", action="store_true", help="print the object instead of writing it")
    add("--no-nvml", action="store_true", help="do not ask the NVIDIA driver")
    add_accelerator_flag(parser)
    add(
        "--kubelet-config",
        type=Path,
        metavar="FILE",
        help="the kubelet's config file as a path on the host, read under --sysfs-root "
        "(default /var/lib/kubelet/config.yaml)",
    )
    add(
        "--kubelet-state",
        type=Path,
        metavar="FILE",
        help="the kubelet's cpu_manager_state as a path on the host "
        "(default /var/lib/kubelet/cpu_manager_state)",
    )
    add_node_flags(parser, metrics_port=9101)
