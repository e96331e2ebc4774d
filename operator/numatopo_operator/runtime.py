"""`Runtime`: the operator's long-lived parts, handed to every handler as kopf's `memo`.

kopf gives each object a shallow copy of the memo (`copy.copy`, when it first sees it), so
every field is a shared object changed in place, never rebound: a copy made before would
keep the old value as long as kopf remembers that object. Frozen, so a rebinding fails
where it is written rather than silently in the handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import kopf

from numatopo_engine import allocation
from numatopo_engine.annotations import PREFIX, Assignment
from numatopo_engine.signing import PodIdentity, Signer, Verifier
from numatopo_kube import KubeClient
from numatopo_operator.dra_holds import DraHolds
from numatopo_operator.errors import NotActiveError
from numatopo_operator.event_posts import EventPosts
from numatopo_operator.gpu_admissions import GpuAdmissions
from numatopo_operator.groups.state import GroupState
from numatopo_operator.ledger import Ledger
from numatopo_operator.metrics import Metrics
from numatopo_operator.pod_records import PodRecords, WaitingPods
from numatopo_operator.pod_view import PodView
from numatopo_operator.retrying import RetryQueue
from numatopo_operator.settings import OperatorSettings, SettingsError
from numatopo_operator.workload_mix import MixLearner

# The source of the operator's Events.
COMPONENT = "numatopo-operator"

P = ParamSpec("P")
T = TypeVar("T")


# One thread for the whole process: the engine's memos and per-shape tables are plain
# module-level dicts, safe only while one thread at a time decides, whichever `Runtime`
# asks; decisions queue in arrival order.
ENGINE_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="numatopo-engine")
# Held by whoever works with the engine's memos: the engine thread for each job, and a
# loop judging a warm scheduling cycle itself (`engine_if_idle`), so never both at once.
ENGINE_LOCK = threading.Lock()


def _exclusive(work: Callable[[], T]) -> T:
    with ENGINE_LOCK:
        return work()


@dataclass
class LeaseTerm:
    """Our hold on the Lease, one object for every copy of the memo."""

    renewed_at: float | None = None
    """`time.monotonic()` when our last successful renewal was sent; None while we hold
    none. Fencing: writes stop `renew_deadline_seconds` after it."""


# On the operator's own pod only: the token of its latest catch-up.
CAUGHT_UP = PREFIX + "caught-up"


@dataclass
class CatchUp:
    """Proof that this replica's pod watch has handed over every pod write stored before a
    moment of its choosing: a new holder writes a fresh token on its own pod (`handover`)
    and waits for the feed to hand it over. A watch delivers events in stored order, so
    every earlier pod write (the replaced holder's decisions among them) was handed over
    too: no list of pods is needed."""

    key: str = ""
    """The pod (namespace/name) whose token is awaited; '' while none is."""
    token: str = ""
    seen: asyncio.Event = field(default_factory=asyncio.Event)

    def expect(self, key: str, token: str) -> None:
        self.key, self.token = key, token
        self.seen.clear()

    def observe(self, key: str, pod: Mapping[str, Any]) -> None:
        """A pod as the feed hands it over: the awaited one with the token sets `seen`."""
        if not self.token or key != self.key:
            return
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if annotations.get(CAUGHT_UP) == self.token:
            self.seen.set()


@dataclass(frozen=True, eq=False)
class Runtime:
    settings: OperatorSettings
    ledger: Ledger = field(default_factory=Ledger)
    kube: KubeClient = field(
        default_factory=lambda: KubeClient(component=COMPONENT, lean_writes=True)
    )
    metrics: Metrics = field(default_factory=Metrics)
    connection: kopf.ConnectionInfo | None = None
    """Fixed credentials (an explicit API URL, tests); None logs in from the environment."""
    gpu_admissions: GpuAdmissions = field(init=False)
    """One GPU pod in flight per steered node (`gpu_admissions`)."""
    workload: MixLearner = field(init=False)
    """The request shapes of the GPU pods seen (`workload_mix`): what the node rank packs for."""
    retries: RetryQueue[PodView] = field(init=False)
    """Pods to judge again later (a failed write, a pod still waiting)."""
    groups: GroupState = field(init=False)
    """Groups placed across nodes (`group_worker`): their members, plans and retries."""
    lease: LeaseTerm = field(default_factory=LeaseTerm)
    """When our Lease was last renewed (`leadership` updates it in place)."""
    pods: PodRecords = field(default_factory=PodRecords)
    """What is remembered of each pod between its events, one record per pod."""
    redriven: dict[str, object] = field(default_factory=dict)
    """node -> the topology its waiting pods were last retried against."""
    waiting: WaitingPods = field(default_factory=WaitingPods)
    """Pods bound to a node that wait for a decision (kept by the pod handler)."""
    dra_holds: DraHolds = field(default_factory=DraHolds)
    """Allocated ResourceClaims and ResourceSlices as watched (`dra_feed`): what DRA holds
    on each node, booked in the ledger."""
    statuses: dict[str, Mapping[str, object]] = field(default_factory=dict)
    """node -> the fields numatopo writes in its Numatopology's status, as last watched or
    written (`status`): a new holder writes only the nodes that differ."""
    indexed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once `cluster_feed`'s first list gave every Numatopology to the ledger."""
    pods_listed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once `pod_feed` has listed every pod (and the Numatopologies are in)."""
    catch_up: CatchUp = field(default_factory=CatchUp)
    """The token a new holder awaits on its pod watch (`CatchUp`, `handover`)."""
    pod_lists: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while a list of pods is applied (`pod_feed`, `handover`): one at a time."""
    ledger_current: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the ledger is current (`handover`) since this replica last became active;
    cleared on every change of role: `indexed` alone would let a replica decide against
    the bookings it had before it stood by."""
    active: asyncio.Event = field(default_factory=asyncio.Event)
    """Set while this replica is the one that decides (always, when standalone)."""
    role_known: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once this replica knows whether it holds the Lease (read once; at once when
    standalone): until then it is not Ready."""
    binding: set[str] = field(default_factory=set)
    """Pods (namespace/name) whose extender `/bind` runs now (`bind_guard`): one at a time."""
    engine: ThreadPoolExecutor = ENGINE_THREAD
    """Where engine calls run (`in_engine_thread`): a 64-NUMA decision or a 5,000-node
    filter must not hold up the watches and the Lease renewals."""
    decisions: allocation.Engine = field(default_factory=allocation.Engine)
    """The engine's memo tables, used only under `ENGINE_LOCK` (in the engine thread, or
    on the loop inside `engine_if_idle`)."""
    signer: Signer | None = None
    """Signs every assignment written (`signed`); `main.run` refuses to start without one
    (`signing_keys.load_keys`). None: no assignment can be written."""
    verifier: Verifier = field(default_factory=Verifier)
    """Whose signatures make an assignment a claim; empty: none does."""
    events: EventPosts = field(init=False)
    """The Events of decisions, posted off the decision's path (`event_posts`)."""

    def signed(self, pod: PodView, assignment: Assignment) -> Assignment:
        """`assignment` signed for `pod`: the one way an assignment reaches a pod."""
        if self.signer is None:
            raise SettingsError("no signing key loaded: the operator cannot write assignments")
        return self.signer.sign(assignment, PodIdentity(pod.uid, pod.key))

    def forget_pod(self, key: str, *, uid: str = "") -> str | None:
        """Pod `key` (of `uid`) ended: nothing of it is kept; returns the node it was booked on."""
        self.pods.forget(key)
        self.waiting.forget(key)
        self.retries.discard(key)
        self.gpu_admissions.admitted(key)
        self.workload.forget(key)
        self.metrics.retry_queue.set(len(self.retries))
        node = self.ledger.forget(key, uid=uid)
        self.metrics.ledger_pods.set(len(self.ledger))
        return node

    def steered(self, node: str) -> bool:
        """Whether the kubelet on `node` takes numatopo's GPUs (its agent says Steered)."""
        found = self.ledger.record(node)
        return found is not None and found.steered

    def __post_init__(self) -> None:
        settings = self.settings
        parts: dict[str, object] = {
            "workload": MixLearner(
                settings.workload_mix_half_life_seconds, pinned=settings.pinned_mix
            ),
            "retries": RetryQueue(settings.retry_base_seconds, settings.retry_max_seconds),
            "gpu_admissions": GpuAdmissions(settings.gpu_admission_timeout_seconds),
            "groups": GroupState(settings.retry_base_seconds, settings.retry_max_seconds),
            "events": EventPosts(self.metrics),
        }
        for name, part in parts.items():
            object.__setattr__(self, name, part)  # frozen: set once, here

    async def in_engine_thread(self, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`work(*args, **kwargs)` in the engine thread, given only values the loop will
        not change meanwhile (`Ledger.frozen_state` copies, never live states). The GIL
        goes back to the loop every switch interval (5 ms): `bench_loop_lag.py`."""
        loop = asyncio.get_running_loop()
        job = functools.partial(work, *args, **kwargs)
        return await loop.run_in_executor(self.engine, _exclusive, job)

    @contextlib.contextmanager
    def engine_if_idle(self) -> Iterator[bool]:
        """True, with the engine's memos held until the block ends, when no engine job runs
        now; else False. For ~1 ms work that builds nothing (`allocation.NotWarmError`),
        where the hop to the engine thread costs a fair part. Never await inside it."""
        taken = ENGINE_LOCK.acquire(blocking=False)
        try:
            yield taken
        finally:
            if taken:
                ENGINE_LOCK.release()

    def lease_fresh(self) -> bool:
        """True while our Lease was renewed within the renew deadline (always, standalone),
        measured from when the renewal was *sent* (fencing: `leadership`)."""
        if self.settings.standalone:
            return True
        renewed = self.lease.renewed_at
        return (
            renewed is not None
            and time.monotonic() < renewed + self.settings.renew_deadline_seconds
        )

    def check_may_write(self) -> None:
        """Raise `NotActiveError` unless this replica may write a decision now."""
        if not self.active.is_set() or not self.lease_fresh():
            raise NotActiveError("this replica does not hold a fresh lease; not writing")

    def stale_reason(self, node: str, now: float | None = None) -> str | None:
        """Why nothing may go on `node` now (stale, or heartbeat too old); None if current."""
        return self.ledger.stale_reason(node, self.settings.heartbeat_max_age_seconds, now)

    def stale_nodes(self) -> dict[str, str]:
        """Every node `stale_reason` refuses now: node -> why (one pass, for the extender)."""
        return self.ledger.stale_nodes(self.settings.heartbeat_max_age_seconds)

    @property
    def deciding(self) -> bool:
        """Active with a fresh lease, its ledger complete and current."""
        return (
            self.indexed.is_set()
            and self.active.is_set()
            and self.ledger_current.is_set()
            and self.lease_fresh()
        )
