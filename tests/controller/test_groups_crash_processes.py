"""Killing the operator in the middle of a group placement leaves no half-placed group
holding GPUs: real `numatopo operator` processes against the emulator over HTTP.

The first process exits at once (as if killed) after writing the plans of some members
(`NUMATOPO_TEST_CRASH_AFTER_PLANNED`, a fault hook only tests set); a second process
takes over from the cluster state alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, BinaryIO

import pytest

import signing_keys
from numatopo_engine import annotations as keys
from numatopo_operator.gang_state import CRASH_AFTER_PLANNED_ENV

from .conftest import Cluster
from .test_failover_processes import kubeconfig
from .test_groups_cluster import L2, LAYOUT, build_cluster, member, pod_patches, released

pytestmark = pytest.mark.alone

SIZE = 4


async def start(config: Path, log: BinaryIO, crash_after: int | None) -> asyncio.subprocess.Process:
    numatopo = Path(sys.executable).with_name("numatopo")
    env = {k: v for k, v in os.environ.items() if k != CRASH_AFTER_PLANNED_ENV}
    env["KUBECONFIG"] = str(config)
    env["NUMATOPO_SIGNING_KEY_FILE"] = signing_keys.KEY_FILE
    if crash_after is not None:
        env[CRASH_AFTER_PLANNED_ENV] = str(crash_after)
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
    processes = []
    try:
        with (tmp_path / "first.log").open("wb") as log:
            first = await start(config, log, crash_after)
            processes.append(first)
            async with asyncio.timeout(60):
                code = await first.wait()
        crashed = plans(cluster, names)

        assert 70 == code, (tmp_path / "first.log").read_text()[-3000:]
        assert crash_after == len(crashed)
        assert not any(released(cluster, n) for n in names)

        with (tmp_path / "second.log").open("wb") as log:
            second = await start(config, log, None)
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
