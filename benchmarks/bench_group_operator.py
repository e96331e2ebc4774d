"""Group placement through the real operator: kopf over HTTP against kmock's emulator.

The cluster: `--nodes` 8-GPU nodes of four shapes in turn (the conftest's 8x H100
NVSwitch; DGX-1 V100, 8x L40S PCIe and AWS p4d from tests/fixtures/topologies), each
with its own name, GPU UUIDs and bus ids as its exporter publishes them
(`simulation.fleet.build_fleet`), labelled into leaves of `--leaf` nodes, blocks of four
leaves, one spine, with a NetworkTopology of the three layers. Three measurements per
repeat, each on a fresh emulator and operator:

  baseline   `--members` ordinary 8-GPU pods already bound to distinct nodes: time
             from the last pod created to every one `Assigned` (the assigner path)
  group      the same number of gated group members (`topology-required` = the block
             level): time from the last member created to every member released
             (plan: engine + ledger + one annotation patch each; release: one JSON
             patch each)
  recovery   one member's node marked NotReady, the member deleted and recreated:
             time from the replacement created to its release

Reports medians and the ratio group / baseline (what all-or-nothing costs over
deciding the same pods one by one).

    .venv/bin/python benchmarks/bench_group_operator.py [--nodes 64] [--leaf 4]
        [--members 12] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# tests/ too: the controller conftest imports its helpers (signing_keys) from there.
sys.path[:0] = [str(REPO / p) for p in ("", "tests", "engine", "operator", "kube")]

import kmock  # noqa: E402
from tests.operator.conftest import (  # noqa: E402
    Cluster,
    OperatorStarter,
    _register,
    h100_spec,
    make_pod,
    numatopology,
)

from numatopo_cli.progress import progress_bar  # noqa: E402
from numatopo_engine import annotations as keys  # noqa: E402
from numatopo_engine.model import Numatopology  # noqa: E402
from numatopo_engine.simulation.fleet import build_fleet, node_name  # noqa: E402

LEVELS = [
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
]
GATE = "numatopo.io/group"
# The chart's status debounce: status writes of the Numatopologies do not crowd the API.
SETTINGS = {"retry_base_seconds": 0.2, "retry_max_seconds": 1.0, "status_debounce_seconds": 2.0}


async def until(check: Callable[[], bool], timeout: float = 120.0) -> float:
    """Seconds until `check()` holds (polled every 5 ms, a few µs per poll)."""
    started = time.perf_counter()
    while not check():
        if time.perf_counter() - started > timeout:
            raise TimeoutError("the operator did not finish in time")
        await asyncio.sleep(0.005)
    return time.perf_counter() - started


FIXTURES = ("dgx1-v100", "pcie-8gpu", "aws-p4d")


def shapes() -> list[Any]:
    folder = REPO / "tests" / "fixtures" / "topologies"
    return [h100_spec()] + [
        Numatopology.model_validate_json((folder / f"{name}.json").read_text()).spec
        for name in FIXTURES
    ]


async def build(cluster: Cluster, nodes: int, leaf: int) -> None:
    for i, (name, spec) in enumerate(build_fleet(shapes(), nodes)):
        leaf_no, block_no = i // leaf, i // (leaf * 4)
        labels = {
            LEVELS[0]: "spine-0",
            LEVELS[1]: f"block-{block_no}",
            LEVELS[2]: f"leaf-{leaf_no}",
        }
        await cluster.create_node(name, labels)
        await cluster.create_numatopology(numatopology(name, spec))
    await cluster.create_network_topology("default", LEVELS)


def member(name: str, members: int, rank: int) -> dict[str, Any]:
    annotations = {
        keys.GROUP: "bench",
        keys.GROUP_SIZE: str(members),
        keys.TOPOLOGY_REQUIRED: LEVELS[1],
        "batch.kubernetes.io/job-completion-index": str(rank),
    }
    pod = make_pod(name, node=None, gpus=8, cpu="8", policy="best-effort", annotations=annotations)
    pod["spec"]["schedulingGates"] = [{"name": GATE}]
    return pod


def _raw_pods(cluster: Cluster, names: list[str]) -> dict[str, Any]:
    """The stored pods named `names`, read in place (no copy: polled every few ms)."""
    wanted = set(names)
    return {
        name: obj.raw
        for (resource, _, name), obj in list(cluster.api.objects.items())
        if name in wanted and str(resource.plural) == "pods" and not obj.deleted
    }


def released(cluster: Cluster, names: list[str]) -> bool:
    pods = _raw_pods(cluster, names)
    return len(pods) == len(names) and not any(
        pod["spec"].get("schedulingGates") for pod in pods.values()
    )


def assigned(cluster: Cluster, names: list[str]) -> bool:
    pods = _raw_pods(cluster, names)
    return len(pods) == len(names) and all(
        pod["metadata"]["annotations"].get(keys.STATE) == "Assigned" for pod in pods.values()
    )


async def measure(args: argparse.Namespace, kind: str) -> dict[str, float]:
    """One fresh emulator and operator; the seconds of `kind` (and of the recovery)."""
    found: dict[str, float] = {}
    async with kmock.KubernetesEmulator() as api, kmock.Server(api):
        _register(api)
        cluster = Cluster(api)
        await build(cluster, args.nodes, args.leaf)
        starter = OperatorStarter()
        runtime = (await starter.start(cluster, **SETTINGS)).runtime
        await until(lambda: runtime.deciding and runtime.groups.nodes is not None)
        names = [f"{kind}-{i}" for i in range(args.members)]
        try:
            if kind == "baseline":
                for i, name in enumerate(names):
                    pod = make_pod(name, node=node_name(i), gpus=8, cpu="8", policy="best-effort")
                    await cluster.create_pod(pod)
                found["baseline"] = await until(lambda: assigned(cluster, names))
                return found
            for i, name in enumerate(names):
                await cluster.create_pod(member(name, args.members, i))
            found["group"] = await until(lambda: released(cluster, names))
            victim = names[args.members // 2]
            node = json.loads(cluster.pods()[victim]["metadata"]["annotations"][keys.ASSIGNMENT])
            await cluster.patch_node(
                node["node"], {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
            )
            await cluster.delete_pod(victim)
            again = [victim + "-again"]
            await cluster.create_pod(member(again[0], args.members, args.members // 2))
            found["recovery"] = await until(lambda: released(cluster, again))
        finally:
            await starter.stop_all()
    return found


async def one_round(args: argparse.Namespace) -> dict[str, float]:
    return {**await measure(args, "baseline"), **await measure(args, "group")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--leaf", type=int, default=4)
    parser.add_argument("--members", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.members >= args.leaf * 4 or args.nodes < args.leaf * 4:
        parser.error("--members must leave a spare node in one block (4 leaves of --leaf nodes)")
    logging.basicConfig(level=logging.WARNING)
    bar = progress_bar("rounds")
    rounds = []
    for done in range(1, args.repeat + 1):
        rounds.append(asyncio.run(one_round(args)))
        if bar is not None:
            bar(done, args.repeat)
    medians = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "members": args.members,
                "repeat": args.repeat,
                "median_seconds": {k: round(v, 3) for k, v in medians.items()},
                "group_over_baseline": round(medians["group"] / medians["baseline"], 2),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
