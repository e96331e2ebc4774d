"""The agent's connections: back promptly after an API outage, and `/metrics` bound to the
address given with `--metrics-address`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
from pathlib import Path

import aiohttp
import kmock

from numatopo_cli.main import build_parser
from numatopo_exporter.agent import serve as agent_command
from numatopo_kube.backoff import Backoff

from ..conftest import NodeClient
from ..daemon.conftest import NODE
from .conftest import CgroupTree, make_agent
from .test_agent_loop import wait_for


class Down:
    """A kmock criterion: every request fails while the API is down."""

    def __init__(self) -> None:
        self.down = True

    def __call__(self, request: kmock.Request) -> bool:
        return self.down


async def test_the_agent_is_back_promptly_after_an_outage(
    cluster: kmock.KubernetesEmulator, client: NodeClient, file_cgroups: CgroupTree
) -> None:
    """The first list fails and the backoff says 30 s; the API is back at once, and so
    must the agent be (within a couple of probes), not half a minute later."""
    outage = Down()
    cluster[outage] << 503
    agent = make_agent(client, file_cgroups, kubelet_state=None, backoff=Backoff(30.0, 60.0))
    agent.probe_seconds = 0.05
    task = asyncio.create_task(agent.watch_pods())
    try:
        await wait_for(lambda: len(list(cluster)) >= 1, "the first (failing) list")
        outage.down = False

        await wait_for(agent.synced.is_set, "the list after the outage", seconds=2.0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening_addresses(port: int) -> set[str]:
    """Local addresses of IPv4 sockets listening on `port`, from /proc/net/tcp."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:  # 0A: TCP_LISTEN
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


async def test_metrics_listen_on_the_given_address_only(
    cluster: kmock.KubernetesEmulator, file_cgroups: CgroupTree
) -> None:
    port = free_port()
    args = build_parser().parse_args(
        [
            "agent",
            f"--node-name={NODE}",
            f"--cgroup-root={file_cgroups.root}",
            f"--kubelet-state={file_cgroups.root / 'absent'}",
            f"--api-url={str(cluster.url).rstrip('/')}",
            f"--metrics-port={port}",
            "--metrics-address=127.0.0.1",
            "--insecure-accept-unsigned",
        ]
    )
    assert isinstance(args, argparse.Namespace)
    task = asyncio.create_task(agent_command.serve(args))
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(250):
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                        if response.status == 200:
                            break
                await asyncio.sleep(0.02)
        assert {"127.0.0.1"} == listening_addresses(port)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_metrics_listen_everywhere_by_default() -> None:
    """In-cluster scraping and the kubelet's liveness probe dial the pod IP."""
    args = build_parser().parse_args(["agent"])

    assert "0.0.0.0" == args.metrics_address
