"""A small cluster for `kubectl numatopo`: GPU nodes filled by the real operator.

Shared by tests/operator/test_kubectl_plugin.py and scripts/kubectl_explain_demo.py
(the README's sample output): `busy` nodes have both NUMA nodes' GPUs booked by pods
the operator assigned, `free` nodes are empty, one node is stale, one is tainted.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import Callable
from typing import Any

from numatopo_cli.kubectl import main as kubectl
from numatopo_engine import annotations as keys
from numatopo_engine.model import NumatopologySpec

TAINTED = "gpu-tainted"
STALE = "gpu-stale"


def busy_name(i: int) -> str:
    return f"gpu-busy-{i:03d}"


def free_name(i: int) -> str:
    return f"gpu-free-{i:03d}"


async def build(
    cluster: Any,
    spec: NumatopologySpec,
    topology_object: Callable[..., dict[str, Any]],
    pod: Callable[..., dict[str, Any]],
    *,
    busy: int,
    free: int,
) -> list[str]:
    """Nodes and their Numatopologies, and two 4-GPU pods per busy node (bound there:
    the operator assigns them). Returns the names of those pods."""
    names = [busy_name(i) for i in range(busy)] + [free_name(i) for i in range(free)]
    for name in [*names, STALE, TAINTED]:
        exported = "False" if name == STALE else "True"
        await cluster.create_numatopology(topology_object(name, spec, exported=exported))
        await cluster.create_node(name)
    await cluster.patch_node(
        TAINTED,
        {"spec": {"taints": [{"key": "team", "value": "vision", "effect": "NoSchedule"}]}},
    )
    pods = []
    for i in range(busy):
        for half in range(2):
            name = f"train-{i:03d}-{half}"
            await cluster.create_pod(pod(name, node=busy_name(i), cpu="8", gpus=4))
            pods.append(name)
    return pods


def assigned(cluster: Any, pods: list[str]) -> bool:
    found = cluster.pods()
    return all(
        (found.get(name, {}).get("metadata", {}).get("annotations") or {}).get(keys.STATE)
        == keys.State.ASSIGNED.value
        for name in pods
    )


async def run_plugin(*argv: str) -> tuple[int, str, str]:
    """`kubectl numatopo ARGV` in a thread of its own (it runs its own event loop);
    returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()

    def call() -> int:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return kubectl.main(list(argv))

    code = await asyncio.to_thread(call)
    return code, out.getvalue(), err.getvalue()


def as_json(text: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(text)
    return found
