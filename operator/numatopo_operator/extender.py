"""The kube-scheduler extender: `POST /filter`, `/prioritize`, `/bind` (aiohttp, I/O).
The JSON is kube-scheduler's (k8s.io/kube-scheduler/extender/v1, Go field names, keys read
case-insensitively as Go does); the scheduler profile that calls it (node-cache-capable:
node names, not objects) is the chart's `templates/scheduler-config.yaml`. Per node,
`filter` says why it cannot take the pod: Unsatisfiable (preemption may help) goes to
FailedNodes; no or a stale Numatopology, or an invalid pod, to FailedAndUnresolvableNodes.
Only the active replica answers: the Service selects the pod it labels
(`leadership.ACTIVE_LABEL`); another reached during a handover answers an Error (the
scheduler retries) and never binds. Body checks and JSON answers: docs/DESIGN.md, "The
scheduler extender".
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import logging
import operator
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
from aiohttp import web

from numatopo_engine import allocation, pod_request
from numatopo_engine.errors import InvalidRequestError
from numatopo_engine.packing import WorkloadMix
from numatopo_engine.request import PodRequest
from numatopo_operator import bind_guard, dra_extender, translate
from numatopo_operator import extender_wire as wire
from numatopo_operator.errors import KubeError, NodeBusyError, NotActiveError
from numatopo_operator.extender_memo import CycleMemo, pod_uid
from numatopo_operator.extender_wire import BadArgsError
from numatopo_operator.groups import members as group_members
from numatopo_operator.ledger import ShapeCandidates, released
from numatopo_operator.runtime import Runtime

logger = logging.getLogger(__name__)

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]

# k8s.io/kube-scheduler/extender/v1.MaxExtenderPriority: extender scores are 0..10.
MAX_EXTENDER_PRIORITY = 10

RUNTIME_KEY: web.AppKey[Runtime] = web.AppKey("runtime", Runtime)
# kube-scheduler sends a body at once (8 MiB at most): a caller still sending after this
# is refused, and holds its connection no longer.
BODY_SECONDS = 10.0
# How long a connection waits for a request head (first or next): above Go's idle timeout
# (90 s, kube-scheduler's), so kube-scheduler closes idle connections, never mid-request.
IDLE_SECONDS = 100.0
# A filter answer for 5,000 nodes holds thousands of entries: no spaces after separators.
_dumps = functools.partial(json.dumps, separators=(",", ":"))
MEMO_KEY: web.AppKey[CycleMemo] = web.AppKey("memo", CycleMemo)


@dataclass
class Verdicts:
    """The pod judged on many nodes: an extender score (0..10) where it fits, else why not."""

    scores: dict[str, int] = field(default_factory=dict)
    ranks: dict[str, float] = field(default_factory=dict)
    """The node rank (`numatopo_engine.packing`) where it fits; `scores` are its order."""
    failed: dict[str, str] = field(default_factory=dict)
    """Nodes where it does not fit now (preemption may help): node -> what did not fit."""
    unresolvable: dict[str, str] = field(default_factory=dict)
    """Nodes that cannot take it whatever is evicted: no or a stale Numatopology."""


@dataclass(frozen=True, slots=True)
class Candidates:
    """What `judge_candidates` reads: taken on the loop, read in the engine thread."""

    groups: Mapping[str, ShapeCandidates]
    """Those that may take a pod, by shape (`Ledger.judged_candidates`), first-seen order."""
    unresolvable: Mapping[str, str]
    """Those that can take nothing now (no or a stale Numatopology): why."""
    mix: WorkloadMix = field(default_factory=WorkloadMix)
    """The workload mix the rank packs for (learned or pinned, `workload_mix`)."""
    without: str | None = None
    """The pod whose own bookings the states leave out already (else `judge_candidates`
    leaves out those of the pod it judges)."""


def candidates(runtime: Runtime, nodes: Iterable[str], without: str | None = None) -> Candidates:
    """The candidates' topologies and bookings now (on the loop), pod `without`'s left out."""
    groups, unresolvable = runtime.ledger.judged_candidates(
        nodes, runtime.settings.heartbeat_max_age_seconds, time.time(), without=without
    )
    return Candidates(groups, unresolvable, runtime.workload.mix(), without)


async def judge_off_loop(runtime: Runtime, request: PodRequest, nodes: Iterable[str]) -> Verdicts:
    """The pod on each of `nodes` (`judge_candidates`), in the engine thread: a cold cycle
    builds per-shape tables for hundreds of milliseconds, which would hold up every watch.
    A verdict is advice (bind decides again), so the bookings may change meanwhile. A warm
    cycle (every row and verdict kept: a job's next replicas) is answered on the loop while
    the engine thread is idle: it builds nothing (~1 ms for 500 nodes, less than the hop)."""
    taken = _extended_served(runtime, request, candidates(runtime, nodes, request.key))
    with runtime.engine_if_idle() as idle:
        if idle:
            try:
                return judge_candidates(request, taken, runtime.decisions, warm_only=True)
            except allocation.NotWarmError:
                pass
    return await runtime.in_engine_thread(judge_candidates, request, taken, runtime.decisions)


async def judge_pod(
    runtime: Runtime, pod: Mapping[str, Any], request: PodRequest, nodes: Sequence[str]
) -> Verdicts:
    """A pod with ResourceClaims by its claims' devices (`dra_extender`), else by requests."""
    if (pod.get("spec") or {}).get("resourceClaims"):
        found = await dra_extender.judge_claims(runtime, pod, request, nodes)
        if found is not None:
            rank = np.array([found.ranks[n] for n in found.ranks], dtype=np.float64)
            scores = dict(zip(found.ranks, rank_scores(rank).tolist(), strict=True))
            return Verdicts(scores, found.ranks, found.failed, found.unresolvable)
    return await judge_off_loop(runtime, request, nodes)


def _extended_served(runtime: Runtime, request: PodRequest, taken: Candidates) -> Candidates:
    """`taken` with, on each node where a DeviceClass serves a GPU resource the pod asks
    (KEP-5004: `nvidia.com/gpu` from a DRA driver), the free GPUs it does not select booked
    away (`dra_extender.extended_state`): what kube-scheduler's claim can get there."""
    asked = dra_extender.extended_asked(runtime, [request])
    if not asked:
        return taken
    groups = {}
    for shape, (topology, where, states) in taken.groups.items():
        narrowed = [
            dra_extender.extended_state(runtime, node, state, asked)
            for node, state in zip(where, states, strict=True)
        ]
        groups[shape] = (topology, where, narrowed)
    return replace(taken, groups=groups)


def judge_candidates(
    request: PodRequest,
    taken: Candidates,
    engine: allocation.Engine | None = None,
    *,
    warm_only: bool = False,
) -> Verdicts:
    """The pod on each candidate (no I/O; reads only `taken`). Each shape's group is decided
    in bulk (`allocation.score_many`: each distinct row once, verdicts kept in `engine`), so
    per-node work here is a few dict and list operations. `warm_only`: from what `engine`
    keeps alone, else `allocation.NotWarmError` (the same verdicts either way)."""
    verdicts = Verdicts()
    failed, unresolvable = verdicts.failed, verdicts.unresolvable
    unresolvable.update(taken.unresolvable)
    key = request.key
    groups = list(taken.groups.values())
    if taken.without != key:
        groups = [_without_own(key, group) for group in groups]
    engine = engine or allocation.Engine()
    hosts = allocation.mix_hosts(
        ((t, states) for t, _, states in groups), taken.mix, engine=engine, warm_only=warm_only
    )
    explain = logger.isEnabledFor(logging.DEBUG)
    # Every node scored and its rank (-1 where refused), made verdicts at the end.
    judged: list[str] = []
    ranks: list[Floats] = []
    for topology, where, states in groups:
        try:
            scored = allocation.score_many(
                topology, states, request, checked=False, engine=engine,
                mix=taken.mix, hosts=hosts, warm_only=warm_only,
            )  # fmt: skip
        except InvalidRequestError as exc:
            unresolvable.update(dict.fromkeys(where, translate.invalid_message(exc)))
            continue
        judged += where
        ranks.append(scored.rank)
        for refused, summary in scored.refused:
            # The same words for every node that lacks the same thing, so kube-scheduler
            # can count them; the per-NUMA detail is in the log and in `numatopo assign`.
            at = refused.tolist()
            failed.update(dict.fromkeys(map(where.__getitem__, at), summary))
            for i in at if explain else ():
                logger.debug("node %s refuses %s: %s", where[i], key, scored.refusal(i))
    if judged:
        rank = np.concatenate(ranks)
        fit = rank >= 0
        fitting = judged
        if not fit.all():
            rank = rank[fit]
            fitting = list(itertools.compress(judged, fit.tolist()))
        verdicts.ranks.update(zip(fitting, rank.tolist(), strict=True))
        verdicts.scores.update(zip(fitting, rank_scores(rank).tolist(), strict=True))
    return verdicts


def _without_own(key: str, group: ShapeCandidates) -> ShapeCandidates:
    """The group without pod `key`'s bookings (no earlier attempt counts): the few shared
    states holding it are copied."""
    topology, where, states = group
    if not any(map(operator.contains, map(_ASSIGNMENTS, states), itertools.repeat(key))):
        return group
    return topology, where, [released(state, key) for state in states]


_ASSIGNMENTS = operator.attrgetter("assignments")


def rank_scores(ranks: Floats) -> Ints:
    """Node ranks as extender scores by their order: the best gets 10, each lower distinct
    rank one less, down to 1 (0: nodes that do not fit). 11 steps carry the order of the
    best nodes, which is what kube-scheduler's choice needs."""
    distinct = np.unique(ranks)  # ascending
    below = len(distinct) - 1 - np.searchsorted(distinct, ranks)  # distinct ranks above
    return np.maximum(1, MAX_EXTENDER_PRIORITY - below)


async def filter_result(
    runtime: Runtime, args: Mapping[str, Any], memo: CycleMemo
) -> dict[str, Any]:
    """ExtenderFilterResult for ExtenderArgs (no I/O); keeps the ranks in `memo`."""
    pod = wire.pod(args)
    names, objects = wire.node_names(args)
    verdicts = Verdicts()
    planned = group_members.planned_node(pod)
    if planned is not None:
        # A released group member: its node is part of its group's plan.
        passed = [node for node in names if node == planned]
        why = f"planned for another node with its group ({planned})"
        verdicts.unresolvable = dict.fromkeys((node for node in names if node != planned), why)
    elif not pod_request.wants_topology(pod):
        passed = list(names)
    else:
        passed = []
        try:
            request = memo.request(pod, runtime.settings.resources)
        except InvalidRequestError as exc:
            verdicts.unresolvable = dict.fromkeys(names, translate.invalid_message(exc))
        else:
            started = time.perf_counter()
            verdicts = await judge_pod(runtime, pod, request, names)
            passed = list(filter(verdicts.scores.__contains__, names))
            runtime.metrics.latency.labels("filter").observe(time.perf_counter() - started)
    result = _filter_answer(verdicts)
    if objects is None:
        result["NodeNames"] = passed
    else:
        keep = set(passed)
        result["Nodes"] = {
            "metadata": {},
            "items": [o for o in objects if (o.get("metadata") or {}).get("name") in keep],
        }
    if verdicts.ranks:
        memo.keep_ranks(pod_uid(pod), verdicts.ranks, verdicts.scores)
    return result


async def priorities(
    runtime: Runtime, args: Mapping[str, Any], memo: CycleMemo
) -> tuple[list[str], list[int]]:
    """HostPriorityList as hosts and scores (`rank_scores` over this call's nodes, 0 where
    it does not fit). The filter call's ranks for the pod are reused: a rank is advice
    (bind decides again), so the milliseconds between the calls cannot make it wrong."""
    pod = wire.pod(args)
    names, _ = wire.node_names(args)
    planned = group_members.planned_node(pod)
    if planned is not None:
        return names, [MAX_EXTENDER_PRIORITY * (n == planned) for n in names]
    if not pod_request.wants_topology(pod):
        return names, [0] * len(names)
    known, scored = memo.take_ranks(pod_uid(pod))
    ranked = list(filter(known.__contains__, names))
    if len(ranked) < len(names):
        missing = [node for node in names if node not in known]
        scored = {}
        try:
            request = memo.request(pod, runtime.settings.resources)
        except InvalidRequestError:
            return names, [0] * len(names)
        started = time.perf_counter()
        known.update((await judge_pod(runtime, pod, request, missing)).ranks)
        runtime.metrics.latency.labels("prioritize").observe(time.perf_counter() - started)
        ranked = list(filter(known.__contains__, names))
    if not ranked:
        return names, [0] * len(names)
    if len(set(ranked)) == len(scored):
        # The nodes filter passed, all of them: its scores are the order of the same ranks.
        scores = scored
    else:
        scores = dict(
            zip(ranked, rank_scores(np.array([known[n] for n in ranked])).tolist(), strict=True)
        )
    return names, list(map(scores.get, names, itertools.repeat(0)))


async def _read(request: web.Request) -> Mapping[str, Any]:
    try:
        async with asyncio.timeout(BODY_SECONDS):
            body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise BadArgsError(f"request body is larger than {wire.MAX_BODY_BYTES} bytes") from None
    except TimeoutError:
        raise BadArgsError(f"request body not received within {BODY_SECONDS:g} s") from None
    return wire.parse_body(body)


def _not_deciding(runtime: Runtime) -> str:
    """'' when this replica may decide, else the Error the scheduler gets (and retries)."""
    if not runtime.role_known.is_set():
        return "numatopo operator is starting: it does not know yet whether it is the active one"
    if not runtime.active.is_set():
        return (
            "this numatopo operator replica is not the active one (a handover is in "
            "progress); the scheduler retries"
        )
    if not runtime.indexed.is_set():
        return "numatopo operator is starting: pods and Numatopologies are not listed yet"
    if not runtime.ledger_current.is_set():
        return (
            "this numatopo operator replica is taking over: it is making its ledger current "
            "(its pod watch catching up, or a fresh list of pods); the scheduler retries"
        )
    return ""


def _json(data: object, *, status: int = 200) -> web.Response:
    return web.json_response(dumps=_dumps, data=data, status=status)


# Big answers (a filter result names every candidate): msgspec's C encoder, no spaces.
_encode = msgspec.json.Encoder().encode


def _json_of(data: object) -> bytes:
    try:
        return _encode(data)
    except UnicodeEncodeError:
        # A lone surrogate (only Python's parser lets one in): the escapes `json.dumps` writes.
        return _dumps(msgspec.to_builtins(data)).encode()


def filter_body(result: Mapping[str, Any]) -> bytes:
    """An ExtenderFilterResult as JSON."""
    return _json_of(result)


def priorities_body(hosts: Sequence[str], scores: Sequence[int]) -> bytes:
    """The HostPriorityList [{Host, Score}] of `hosts` and their `scores` as JSON."""
    if len(hosts) != len(scores):
        raise ValueError("priorities_body: a score per host")
    return _json_of(list(map(wire.HostPriorityRow, hosts, scores)))


def _filter_answer(verdicts: Verdicts, error: str = "") -> dict[str, Any]:
    """An ExtenderFilterResult passing no node (yet) and failing those of `verdicts`."""
    return {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": verdicts.failed,
        "FailedAndUnresolvableNodes": verdicts.unresolvable,
        "Error": error,
    }


def _filter_error(error: str) -> web.Response:
    """An ExtenderFilterResult passing no node; kube-scheduler retries on an Error."""
    return _json(_filter_answer(Verdicts(), error))


async def _filter(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME_KEY]
    error = _not_deciding(runtime)
    try:
        args = await _read(request)
        if error:
            raise BadArgsError(error)
        result = await filter_result(runtime, args, request.app[MEMO_KEY])
        return web.Response(body=filter_body(result), content_type="application/json")
    except BadArgsError as exc:
        return _filter_error(str(exc))


async def _prioritize(request: web.Request) -> web.Response:
    # HostPriorityList has no Error field: kube-scheduler reads any status but 200 as the
    # extender failing; the JSON body says why to whoever reads it.
    runtime = request.app[RUNTIME_KEY]
    error = _not_deciding(runtime)
    if error:
        return _json({"Error": error}, status=503)
    try:
        args = await _read(request)
        hosts, scores = await priorities(runtime, args, request.app[MEMO_KEY])
        return web.Response(body=priorities_body(hosts, scores), content_type="application/json")
    except BadArgsError as exc:
        return _json({"Error": str(exc)}, status=400)


def _bind_answer(error: str) -> web.Response:
    return _json({"Error": error})


async def _bind(request: web.Request) -> web.Response:
    """'' once the pod is bound with its assignment, else why not, as the Error."""
    runtime = request.app[RUNTIME_KEY]
    try:
        args = wire.binding_args(await _read(request))
        error = _not_deciding(runtime) or await bind_guard.bind_checked(runtime, args)
    except BadArgsError as exc:
        error = str(exc)
    except (KubeError, NotActiveError, NodeBusyError) as exc:
        error = f"binding {args.key} to {args.node}: {exc}"
    if error:
        logger.warning("bind refused: %s", error)
    return _bind_answer(error)


# Whatever goes wrong, the answer has the verb's own shape: kube-scheduler reads the
# Error of filter and bind; prioritize has none, so its status says it failed.
_ERROR_ANSWERS = {
    "/filter": _filter_error,
    "/bind": _bind_answer,
}


@web.middleware
async def json_answers(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every answer is JSON, none a traceback: aiohttp's refusals (unknown path, a GET)
    keep their status; an unexpected exception is logged, answered by its type only."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        answer = _json(
            {"Error": f"{exc.status} {exc.reason}: {request.method} {request.path}"},
            status=exc.status,
        )
        if "Allow" in exc.headers:  # a 405 says which methods the path takes
            answer.headers["Allow"] = exc.headers["Allow"]
        return answer
    except Exception as exc:
        logger.exception("extender %s %s failed", request.method, request.path)
        error = f"numatopo extender internal error ({type(exc).__name__}); see the operator log"
        shaped = _ERROR_ANSWERS.get(request.path)
        return shaped(error) if shaped is not None else _json({"Error": error}, status=500)


def build_app(runtime: Runtime) -> web.Application:
    # `client_max_size` bounds what aiohttp buffers: the body is refused while it is read.
    app = web.Application(middlewares=[json_answers], client_max_size=wire.MAX_BODY_BYTES)
    app[RUNTIME_KEY] = runtime
    app[MEMO_KEY] = CycleMemo()
    app.router.add_post("/filter", _filter)
    app.router.add_post("/prioritize", _prioritize)
    app.router.add_post("/bind", _bind)
    return app
