"""Killing the operator in the middle of a group placement leaves no half-placed group
holding GPUs: real `numatopo operator` processes against the emulator over HTTP.

The first process talks to the emulator through a gate in the test (`KillAfterPlans`)
that counts the members' plan writes: once the emulator has stored the chosen number
of them, the gate SIGKILLs the process, and a plan write still on its way is never
stored (the process died before it could reach the API server). A second process takes
over from the cluster state alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp.test_utils
import aiohttp.web
import pytest

import signing_keys
from numatopo_engine import annotations as keys

from .conftest import Cluster
from .test_failover_processes import kubeconfig
from .test_groups_cluster import L2, LAYOUT, build_cluster, member, pod_patches, released

pytestmark = pytest.mark.alone

SIZE = 4


async def start(config: Path, log: BinaryIO) -> asyncio.subprocess.Process:
    numatopo = Path(sys.executable).with_name("numatopo")
    env = {**os.environ, "KUBECONFIG": str(config)}
    env["NUMATOPO_SIGNING_KEY_FILE"] = signing_keys.KEY_FILE
    return await asyncio.create_subprocess_exec(
        str(numatopo),
        "operator",
        "--listen-host=127.0.0.1",
        "--extender-port=0",
        "--extender-insecure-plain-http",  # the extender's TLS is tested apart
        "--metrics-port=0",
        "--retry-base-seconds=0.2",
        "--retry-max-seconds=1",
        "--status-debounce-seconds=0.2",
        env=env,
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
    )


class KillAfterPlans:
    """Serves the emulator to one operator process; SIGKILLs that process as soon as the
    emulator has stored `count` member plans (`numatopo.io/group-placement` written).
    Plan writes pass one at a time, so exactly `count` are stored: one that comes after
    is answered 503 unstored, as if the process had died before sending it."""

    def __init__(self, cluster: Cluster, count: int) -> None:
        self.cluster, self.count = cluster, count
        self.process: asyncio.subprocess.Process | None = None
        self.stored = 0
        self._one_at_a_time = asyncio.Lock()

    async def __call__(self, request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if not await self._is_plan(request):
            return await self.cluster.api(request)
        async with self._one_at_a_time:
            if self.stored >= self.count:
                return aiohttp.web.Response(status=503, text="the writer is dead")
            response = await self.cluster.api(request)
            if response.status < 300:
                self.stored += 1
            if self.stored >= self.count and self.process is not None:
                self.process.send_signal(signal.SIGKILL)
            return response

    @staticmethod
    async def _is_plan(request: aiohttp.web.BaseRequest) -> bool:
        if request.method != "PATCH" or "/pods/" not in request.path:
            return False
        body = json.loads(await request.read() or b"{}")  # aiohttp keeps it for the emulator
        written = (
            (body.get("metadata") or {}).get("annotations") or {} if isinstance(body, dict) else {}
        )
        return written.get(keys.GROUP_PLACEMENT) is not None


def plans(cluster: Cluster, names: list[str]) -> dict[str, dict[str, Any]]:
    """member -> its placement record, for the members that carry one."""
    found = {}
    for name in names:
        text = cluster.annotations(name).get(keys.GROUP_PLACEMENT)
        if text is not None:
            found[name] = json.loads(text)
    return found


def free_gpus(cluster: Cluster) -> dict[str, int]:
    return {n: cluster.numatopology_status(n).get("freeGPUs", -1) for n in LAYOUT}


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("crash_after", "same_plan"),
    [
        pytest.param(2, False, id="half-planned-group-is-voided-then-placed-again"),
        pytest.param(SIZE, True, id="fully-planned-group-is-released-after-restart"),
    ],
)
async def test_operator_killed_mid_group(env, tmp_path, crash_after, same_plan):
    cluster, _, _, _, _, wait = env.parts()
    await build_cluster(env)
    names = [f"job-{i}" for i in range(SIZE)]
    for i, name in enumerate(names):
        await cluster.create_pod(
            member(env, name, "job", SIZE, rank=i, annotations={keys.TOPOLOGY_REQUIRED: L2})
        )
    config = kubeconfig(tmp_path / "kubeconfig", str(cluster.api.url))
    gate = KillAfterPlans(cluster, crash_after)
    processes = []
    try:
        async with aiohttp.test_utils.RawTestServer(gate, host="127.0.0.1") as gated:
            gated_config = kubeconfig(tmp_path / "gated-kubeconfig", str(gated.make_url("")))
            with (tmp_path / "first.log").open("wb") as log:
                first = gate.process = await start(gated_config, log)
                processes.append(first)
                async with asyncio.timeout(60):
                    code = await first.wait()
        crashed = plans(cluster, names)

        assert -signal.SIGKILL == code, (tmp_path / "first.log").read_text()[-3000:]
        assert crash_after == len(crashed)
        assert not any(released(cluster, n) for n in names)

        with (tmp_path / "second.log").open("wb") as log:
            second = await start(config, log)
            processes.append(second)
            await wait(
                lambda: all(released(cluster, n) for n in names),
                what="the second operator places the whole group",
                timeout=60,
            )
            final = plans(cluster, names)
            nodes = {json.loads(cluster.annotations(n)[keys.ASSIGNMENT])["node"] for n in names}
            await wait(
                lambda: sorted(free_gpus(cluster).values()) == [0] * SIZE + [8] * (8 - SIZE),
                what="Numatopology statuses show exactly the group's GPUs booked",
                timeout=30,
            )
            free = free_gpus(cluster)
        old_plan = {r["planned"] for r in crashed.values()}
        new_plan = {r["planned"] for r in final.values()}
        voids = [name for name, kind in pod_patches(cluster) if kind == "void" and name in names]

        assert 1 == len(new_plan)
        assert (old_plan == new_plan) is same_plan
        assert {n for n, f in free.items() if f == 0} == nodes
        assert SIZE == len(nodes)
        # The half-planned members' plans were taken back before the new plan.
        assert sorted(voids) == ([] if same_plan else sorted(crashed))
    finally:
        for process in processes:
            if process.returncode is None:
                process.send_signal(signal.SIGKILL)
            await process.wait()
