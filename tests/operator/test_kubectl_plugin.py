"""`kubectl numatopo` against the emulator (real HTTP) with bookings the real operator made.

Each command reads the cluster through the client layer and answers with the operator's
own code; the answers are checked against what the operator decided.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TypeVar

import jsonschema

import signing_keys
from numatopo_cli.kubectl.reports import ExplainReport, NodesReport, TopReport
from numatopo_cli.reports import Report
from numatopo_engine import annotations as keys

from .conftest import Env, make_pod
from .kubectl_scene import (
    STALE,
    TAINTED,
    as_json,
    assigned,
    build,
    busy_name,
    free_name,
    run_plugin,
)

R = TypeVar("R", bound=Report)


def checked(out: str, model: type[R]) -> R:
    """The report, after its JSON validated against the model's schema: every field
    written, none the model does not define (docs/operations.md, "-o json")."""
    schema = model.model_json_schema(mode="serialization", by_alias=True)
    jsonschema.Draft202012Validator(schema).validate(json.loads(out))
    return model.model_validate_json(out)


async def _scene(env: Env, tmp_path: Path) -> tuple[list[str], list[str]]:
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    pods = await build(cluster, h100, topology_object, pod, busy=3, free=2)
    await start_operator()
    await wait(lambda: assigned(cluster, pods), what="the operator assigns every GPU pod")
    keys = tmp_path / "trusted.pem"
    keys.write_bytes(signing_keys.PUBLIC_PEM)
    return pods, ["--api-url", str(cluster.api.url), "--trusted-keys", str(keys)]


async def test_nodes_shows_free_and_total_per_numa(env: Env, tmp_path: Path) -> None:
    _, flags = await _scene(env, tmp_path)
    code, out, err = await run_plugin(
        *flags, "nodes", "-o", "json", "--svg", str(tmp_path / "c.svg")
    )
    assert code == 0, err
    report = checked(out, NodesReport)
    rows = {row.node: row for row in report.nodes}
    assert report.signatures_checked
    busy, free = rows[busy_name(0)], rows[free_name(0)]
    assert busy.pods == 2
    assert busy.aligned_free_gpus == 0
    assert [(n.numa, n.gpus.free, n.gpus.total) for n in busy.numa] == [(0, 0, 4), (1, 0, 4)]
    # 8 CPUs each, on the NUMA node of its GPUs; core 0 (CPUs 0 and 104) is reserved.
    assert [n.cpus.total - n.cpus.free for n in busy.numa] == [8, 8]
    assert [n.cpus.total for n in busy.numa] == [102, 104]
    assert free.pods == 0
    assert free.aligned_free_gpus == 4
    assert not free.stale
    assert rows[STALE].stale.startswith(f"Numatopology/{STALE} is stale")
    svg = (tmp_path / "c.svg").read_text()
    assert svg.startswith("<svg")
    assert busy_name(0) in svg
    assert "gpu-used" in svg

    code, table, _ = await run_plugin(*flags, "nodes")
    assert code == 0
    line = next(x for x in table.splitlines() if x.startswith(busy_name(0)))
    assert line.split()[1:6] == ["0", "94/102", "1016GiB/1TiB", "0/4", "-"]


async def test_explain_counts_refusals_as_the_extender_does(env: Env, tmp_path: Path) -> None:
    _, flags = await _scene(env, tmp_path)
    waiting = make_pod("big-job", node=None, cpu="8", gpus=4)
    await env.cluster.create_pod(waiting)

    code, out, err = await run_plugin(*flags, "explain", "big-job", "-o", "json")
    assert code == 0, err
    report = checked(out, ExplainReport)
    assert report.nodes == 7
    assert report.node_name == ""
    assert report.wants_topology
    assert {fit.node for fit in report.fits} == {free_name(0), free_name(1)}
    assert all(fit.score == 10 for fit in report.fits)
    groups = {(g.kind, g.count): g for g in report.refusals}
    unsatisfiable = groups["unsatisfiable", 3]
    assert unsatisfiable.nodes == [busy_name(i) for i in range(3)]
    assert "4" in unsatisfiable.reason
    assert "GPU" in unsatisfiable.reason
    assert groups["unresolvable", 1].nodes == [STALE]
    assert groups["scheduler", 1].nodes == [TAINTED]
    assert "team=vision:NoSchedule" in groups["scheduler", 1].reason
    assert [g.count for g in report.refusals] == [3, 1, 1]

    code, text, _ = await run_plugin(*flags, "explain", "big-job")
    assert code == 0
    assert f"  3 nodes: unsatisfiable: {unsatisfiable.reason}" in text
    assert "fits on 2 nodes" in text
    assert free_name(0) in text

    code, _, err = await run_plugin(*flags, "explain", "no-such-pod")
    assert code == 2
    assert "not found" in err
    assert "Traceback" not in err


async def test_explain_shows_the_domain_search_of_the_pods_group(env: Env, tmp_path: Path) -> None:
    """The members are not gated, so the operator leaves them alone and the search sees
    them all unplanned: where the group worker would put them now, or why not."""
    _, flags = await _scene(env, tmp_path)
    for name, size, gpus in [("fits-0", 2, 4), ("fits-1", 2, 4), ("huge-0", 3, 8)]:
        group = name.partition("-")[0]
        annotations = {keys.GROUP: group, keys.GROUP_SIZE: str(size)}
        await env.cluster.create_pod(
            make_pod(name, node=None, cpu="8", gpus=gpus, annotations=annotations)
        )

    code, out, err = await run_plugin(*flags, "explain", "fits-0", "-o", "json")
    assert code == 0, err
    search = checked(out, ExplainReport).group
    assert search is not None
    assert (search.group, search.members, search.placed) == ("default/fits", 2, True)
    assert sum(search.nodes.values()) == 2
    assert set(search.nodes) <= {free_name(0), free_name(1)}

    code, out, err = await run_plugin(*flags, "explain", "huge-0", "-o", "json")
    assert code == 0, err
    search = checked(out, ExplainReport).group
    assert search is not None
    assert (search.members, search.placed) == (1, False), search
    assert search.reason, search

    code, text, _ = await run_plugin(*flags, "explain", "fits-0")
    assert "Group default/fits (2 members not planned yet):" in text
    assert "would be placed in" in text

    code, out, _ = await run_plugin(*flags, "explain", "big-job", "-o", "json")
    assert code == 2  # no such pod: the group search is only for group members


async def test_explain_without_keys_says_signatures_are_unchecked(env: Env, tmp_path: Path) -> None:
    _, flags = await _scene(env, tmp_path)
    code, out, err = await run_plugin(*flags[:2], "explain", "train-000-0", "-o", "json")
    assert code == 0
    assert "signatures unchecked" in err
    report = as_json(out)
    assert report["signaturesChecked"] is False
    assert report["nodeName"] == busy_name(0)
    assert report["state"] == "Assigned"


async def test_top_lists_holders_per_node_and_namespace(env: Env, tmp_path: Path) -> None:
    pods, flags = await _scene(env, tmp_path)
    code, out, err = await run_plugin(*flags, "top", "-o", "json")
    assert code == 0, err
    report = checked(out, TopReport)
    assert sorted(b.pod for b in report.bookings) == sorted(f"default/{p}" for p in pods)
    on_first = [b for b in report.bookings if b.node == busy_name(0)]
    assert sorted(g for b in on_first for g in b.gpus) == list(range(8))
    assert all(len(b.exclusive_cpus.split(",")) >= 1 and b.cpus == 8 for b in on_first)
    [namespace] = report.namespaces
    assert (namespace.namespace, namespace.pods, namespace.gpus, namespace.cpus) == (
        "default", 6, 24, 48,
    )  # fmt: skip

    code, table, _ = await run_plugin(*flags, "top", busy_name(1))
    assert code == 0
    assert "default/train-001-0" in table
    assert "default/train-000-0" not in table


async def test_operator_exports_free_aligned_gpus_and_loop_lag(env: Env) -> None:
    """The series the dashboard's "free aligned GPUs" and "event-loop lag" panels read."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    pods = await build(cluster, h100, topology_object, pod, busy=1, free=1)
    operator = await start_operator()
    await wait(lambda: assigned(cluster, pods), what="the operator assigns every GPU pod")
    busy = f'numatopo_node_aligned_free_gpus{{node="{busy_name(0)}"}} 0.0'
    free = f'numatopo_node_aligned_free_gpus{{node="{free_name(0)}"}} 4.0'
    seen = ""
    for _ in range(100):
        _, seen = await operator.get("/metrics")
        if busy in seen and free in seen and "numatopo_event_loop_lag_seconds" in seen:
            break
        await asyncio.sleep(0.1)
    assert busy in seen
    assert free in seen
    assert "\nnumatopo_event_loop_lag_seconds " in seen
