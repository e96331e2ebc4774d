"""Cluster-level fixtures: kmock's KubernetesEmulator over real HTTP, and the real operator.

The topology is a real one: the `nvidia-smi topo -m` of an 8x H100 SXM NVSwitch server
(2 NUMA nodes, 104 cores / 208 threads; tests/fixtures/topo), read by the exporter's
own reader. What the text cannot say is filled in as the machine's description says:
thread i and i+104 share a core, each NUMA node has 1 TiB, the kubelet reserves core 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import kopf
import pydantic
import pytest

import signing_keys
from numatopo_engine import annotations as keys
from numatopo_engine.model import NumatopologySpec
from numatopo_exporter.discovery.nvidia_smi_topo import parse_nvidia_smi_topo
from numatopo_operator import main
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings
from numatopo_operator.signing_keys import load_keys
from uid_preconditions import UidPreconditions

TOPO = Path(__file__).resolve().parents[1] / "fixtures" / "topo"
H100_TEXT = TOPO / "h100-sxm-8gpu-nvswitch_stas00_ht.txt"
THREADS_PER_SOCKET = 104
TIB = 1 << 40

PODS = "v1/pods"
NUMATOPOLOGIES = "numatopo.io/v1alpha1/numatopologies"
LEASES = "coordination.k8s.io/v1/leases"
NODES = "v1/nodes"
NETWORK_TOPOLOGIES = "numatopo.io/v1alpha1/networktopologies"


def h100_spec() -> NumatopologySpec:
    """The 8x H100 NVSwitch node, with core/socket rows and memory filled in."""
    spec = parse_nvidia_smi_topo(H100_TEXT.read_text()).to_wire()
    cpus = []
    for node in spec["numaNodes"]:
        node["memoryBytes"] = TIB
    for numa, node in enumerate(parse_nvidia_smi_topo(H100_TEXT.read_text()).numa_nodes):
        for cpu in node.cpus:
            core = cpu % THREADS_PER_SOCKET
            cpus.append({"id": cpu, "core": core, "socket": numa, "numa": numa})
    spec["cpus"] = sorted(cpus, key=lambda c: c["id"])
    spec["reservedCPUs"] = "0,104"
    return NumatopologySpec.model_validate(spec)


_uids = itertools.count(1)


def make_pod(
    name: str,
    *,
    node: str | None = "h100-a",
    policy: str | None = "single-numa-node",
    cpu: str = "4",
    memory: str = "8Gi",
    gpus: int = 0,
    annotations: Mapping[str, str] | None = None,
    created: str = "2024-05-01T10:00:00Z",
    signed: bool = True,
) -> dict[str, Any]:
    """A Pod manifest as the API server returns it (uid, creationTimestamp set). A
    readable assignment in `annotations` is signed for it, as the operator writes one,
    unless `signed` is false (a forged claim)."""
    resources: dict[str, str | int] = {"cpu": cpu, "memory": memory}
    if gpus:
        resources["nvidia.com/gpu"] = gpus
    found: dict[str, str] = {}
    if policy is not None:
        found[keys.POLICY] = policy
    found.update(annotations or {})
    spec: dict[str, Any] = {
        # The profile the extender serves (`OperatorSettings.scheduler_name`): its /bind
        # binds no other pod.
        "schedulerName": "numatopo-scheduler",
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {"requests": resources, "limits": resources},
            }
        ],
    }
    if node is not None:
        spec["nodeName"] = node
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{next(_uids):04d}",
            "creationTimestamp": created,
            "annotations": found,
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }
    text = found.get(keys.ASSIGNMENT)
    if signed and text is not None:
        with contextlib.suppress(pydantic.ValidationError):
            found[keys.ASSIGNMENT] = signing_keys.signed_annotation(body, text)
    return body


def numatopology(name: str, spec: NumatopologySpec, *, exported: str = "True") -> dict[str, Any]:
    return {
        "apiVersion": "numatopo.io/v1alpha1",
        "kind": "Numatopology",
        "metadata": {"name": name},
        "spec": spec.to_wire(),
        "status": {"conditions": [{"type": "Exported", "status": exported, "reason": "Published"}]},
    }


@dataclass
class Cluster:
    """The emulated API server, with helpers that go through its HTTP API like a client."""

    api: kmock.KubernetesEmulator

    async def create(self, path: str, body: Mapping[str, Any]) -> None:
        async with self.api.post(path, json=body) as response:
            assert response.status < 300, await response.text()

    async def create_pod(self, pod: Mapping[str, Any]) -> None:
        await self.create(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod)

    async def create_numatopology(self, body: Mapping[str, Any]) -> None:
        await self.create("/apis/numatopo.io/v1alpha1/numatopologies", body)

    async def patch_pod(self, name: str, patch: Mapping[str, Any]) -> None:
        async with self.api.patch(
            f"/api/v1/namespaces/default/pods/{name}", json=patch
        ) as response:
            assert response.status < 300, await response.text()

    async def delete_pod(self, name: str) -> None:
        async with self.api.delete(f"/api/v1/namespaces/default/pods/{name}") as response:
            assert response.status < 300, await response.text()

    def emulate_binding(self, *, fail: bool = False) -> list[dict[str, Any]]:
        """Serve POST pods/<name>/binding as the API server does: set spec.nodeName (or
        refuse); returns the Bindings received, as they come."""
        seen: list[dict[str, Any]] = []

        async def bind(request: kmock.Request) -> object:
            seen.append(dict(request.data))
            if fail:
                raise kmock.KubernetesError(
                    status=409, reason="Conflict", message="pod is already bound"
                )
            name = request.data["metadata"]["name"]
            await self.patch_pod(name, {"spec": {"nodeName": request.data["target"]["name"]}})
            return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

        self.api["post", kmock.subresource("binding")] << bind
        return seen

    def binding_args(self, name: str, node: str, namespace: str = "default") -> dict[str, str]:
        """ExtenderBindingArgs for a stored pod, as kube-scheduler sends them (its uid)."""
        uid = self.pod(name, namespace)["metadata"]["uid"]
        return {"PodName": name, "PodNamespace": namespace, "PodUID": uid, "Node": node}

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        """One live pod, as stored."""
        for (resource, found_namespace, found), obj in list(self.api.objects.items()):
            if (
                str(resource.plural) == "pods"
                and (found_namespace, found) == (namespace, name)
                and not obj.deleted
            ):
                return dict(json.loads(json.dumps(dict(obj.raw))))
        raise KeyError(f"{namespace}/{name}")

    def pods(self) -> dict[str, dict[str, Any]]:
        """Live pods by name, as stored."""
        found = {}
        for (resource, _, name), obj in list(self.api.objects.items()):
            if str(resource.plural) == "pods" and not obj.deleted:
                found[name] = json.loads(json.dumps(dict(obj.raw)))
        return found

    def annotations(self, name: str) -> dict[str, str]:
        return dict(self.pods()[name]["metadata"].get("annotations", {}))

    def labels(self, name: str, namespace: str = "default") -> dict[str, str]:
        for (resource, found_namespace, found), obj in list(self.api.objects.items()):
            if (
                str(resource.plural) == "pods"
                and (found_namespace, found) == (namespace, name)
                and not obj.deleted
            ):
                return dict(obj.raw["metadata"].get("labels") or {})
        raise KeyError(f"{namespace}/{name}")

    def events(self) -> list[dict[str, Any]]:
        found = []
        for (resource, _, _), obj in list(self.api.objects.items()):
            if str(resource.plural) == "events" and not obj.deleted:
                found.append(dict(obj.raw))
        return sorted(found, key=lambda e: e["metadata"]["name"])

    def events_for(self, pod: str) -> list[tuple[str, str]]:
        """(reason, message) of the Events about one pod, oldest first."""
        return [
            (e["reason"], e["message"]) for e in self.events() if e["involvedObject"]["name"] == pod
        ]

    def numatopology_status(self, name: str) -> dict[str, Any]:
        return self.status_of("numatopologies", name)

    def status_of(self, plural: str, name: str) -> dict[str, Any]:
        for (resource, _, found), obj in list(self.api.objects.items()):
            if str(resource.plural) == plural and found == name and not obj.deleted:
                return dict(obj.raw.get("status") or {})
        raise KeyError(name)

    async def create_node(
        self, name: str, labels: Mapping[str, str] | None = None, *, ready: bool = True
    ) -> None:
        """A Node with `labels` (and its hostname label), Ready or not."""
        await self.create(
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    # kopf tells objects of its indexes apart by (namespace, name, uid): a
                    # Node and the Numatopology of the same name need their own uids, as
                    # a real API server gives them.
                    "uid": f"node-uid-{next(_uids):04d}",
                    "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                },
                "status": {"conditions": [{"type": "Ready", "status": str(ready)}]},
            },
        )

    async def patch_node(self, name: str, patch: Mapping[str, Any]) -> None:
        async with self.api.patch(f"/api/v1/nodes/{name}", json=patch) as response:
            assert response.status < 300, await response.text()

    async def create_network_topology(self, name: str, levels: list[str]) -> None:
        await self.create(
            "/apis/numatopo.io/v1alpha1/networktopologies",
            {
                "apiVersion": "numatopo.io/v1alpha1",
                "kind": "NetworkTopology",
                "metadata": {"name": name, "uid": f"nettopo-uid-{next(_uids):04d}"},
                "spec": {"levels": [{"nodeLabel": level} for level in levels]},
            },
        )


EVENTS = "post /api/v1/namespaces/default/events"


@contextlib.contextmanager
def events_api_hanging(cluster: Cluster) -> Iterator[None]:
    """kmock keeps every Event POST that arrives inside the block (`cluster.api[EVENTS]`
    lists them) and answers none until the block ends, however it ends."""
    answered = asyncio.Event()

    async def hang(_: object) -> object:
        await answered.wait()
        return {"kind": "Event", "apiVersion": "v1"}

    cluster.api[EVENTS] << hang
    try:
        yield
    finally:
        answered.set()


def register_resources(api: kmock.KubernetesEmulator) -> None:
    """Teach the emulator every resource the operator reads or writes (tests that build
    their own emulator, and the operator benchmarks, call it too)."""
    verbs = {"list", "watch", "get", "create", "patch", "delete"}
    api.resources["v1/namespaces"] = kmock.ResourceInfo(
        kind="Namespace", namespaced=False, verbs=verbs
    )
    api.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = kmock.ResourceInfo(
        kind="CustomResourceDefinition", namespaced=False, verbs=verbs
    )
    api.resources[PODS] = kmock.ResourceInfo(
        kind="Pod", namespaced=True, verbs=verbs, subresources={"binding", "status"}
    )
    api.resources["v1/events"] = kmock.ResourceInfo(kind="Event", namespaced=True, verbs=verbs)
    api.resources[NUMATOPOLOGIES] = kmock.ResourceInfo(
        kind="Numatopology", namespaced=False, verbs=verbs, subresources={"status"}
    )
    api.resources[LEASES] = kmock.ResourceInfo(kind="Lease", namespaced=True, verbs=verbs)
    api.resources[NODES] = kmock.ResourceInfo(kind="Node", namespaced=False, verbs=verbs)
    for plural, kind, namespaced in (
        ("resourceclaims", "ResourceClaim", True),
        ("resourceslices", "ResourceSlice", False),
        ("deviceclasses", "DeviceClass", False),
    ):
        api.resources[f"resource.k8s.io/v1/{plural}"] = kmock.ResourceInfo(
            kind=kind, namespaced=namespaced, verbs=verbs, subresources={"status"}
        )
    api.resources[NETWORK_TOPOLOGIES] = kmock.ResourceInfo(
        kind="NetworkTopology", namespaced=False, verbs=verbs, subresources={"status"}
    )


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    # The API server's uid precondition on patches: a late write meets a namesake as it would.
    async with UidPreconditions() as api, kmock.Server(api):
        register_resources(api)
        yield Cluster(api)


def fast_kopf() -> kopf.OperatorSettings:
    """kopf with short timeouts, so a test's operator starts and stops within a second."""
    settings = kopf.OperatorSettings()
    settings.watching.server_timeout = 10
    settings.watching.client_timeout = 15
    settings.watching.connect_timeout = 2
    settings.watching.reconnect_backoff = 0.1
    settings.queueing.idle_timeout = 1.0
    settings.queueing.exit_timeout = 1.0
    settings.networking.error_backoffs = [0.1, 0.2]
    return settings


@dataclass
class RunningOperator:
    """The operator in a thread with its own event loop, as in its own process.

    Its own loop matters: when kopf stops, it cancels every task of its loop that it did
    not start with, which in the test's loop would include the emulator's.
    """

    runtime: Runtime
    servers: main.Servers
    thread: threading.Thread
    stop_flag: threading.Event
    loop_holder: list[asyncio.AbstractEventLoop]

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The operator's own event loop (kopf's, the extender's): for probes run inside it."""
        return self.loop_holder[0]

    def url(self, path: str, *, metrics: bool = False) -> str:
        port = self.servers.metrics_port if metrics else self.servers.extender_port
        return f"http://127.0.0.1:{port}{path}"

    async def post(self, path: str, body: object) -> tuple[int, Any]:
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.url(path), json=body) as response,
        ):
            text = await response.text()
            return response.status, json.loads(
                text
            ) if response.content_type == "application/json" else text

    async def get(self, path: str) -> tuple[int, str]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.url(path, metrics=True)) as response,
        ):
            return response.status, await response.text()

    async def stop(self) -> None:
        """Stop it as SIGTERM would: kopf exits, the servers close, nothing is kept."""
        self.stop_flag.set()
        await asyncio.to_thread(self.thread.join, 15)
        assert not self.thread.is_alive(), "the operator did not stop within 15 s"


class OperatorStarter:
    """Starts real operators (kopf + extender + status) against an emulator; stops them."""

    def __init__(self) -> None:
        self.running: list[RunningOperator] = []

    async def start(self, cluster: Cluster, **overrides: Any) -> RunningOperator:
        """`overrides`: `OperatorSettings` fields (Lease, pod name...) for this replica.

        Plain HTTP unless TLS files are given: these tests are about decisions, and
        `test_extender_tls.py` drives the extender over mutual TLS."""
        tls = "extender_tls_cert" in overrides
        settings = OperatorSettings(
            **{
                "listen_host": "127.0.0.1",
                "extender_port": 0,
                "metrics_port": 0,
                "status_debounce_seconds": 0.1,
                "extender_insecure_plain_http": not tls,
                "signing_key_file": signing_keys.KEY_FILE,
                **overrides,
            }
        )
        signer, verifier = load_keys(settings)
        runtime = Runtime(
            settings,
            connection=kopf.ConnectionInfo(server=str(cluster.api.url)),
            signer=signer,
            verifier=verifier,
        )
        servers = main.Servers(runtime)
        stop_flag = threading.Event()
        loop_holder: list[asyncio.AbstractEventLoop] = []

        async def serving() -> None:
            loop_holder.append(asyncio.get_running_loop())
            await main.serve(
                runtime, servers=servers, kopf_settings=fast_kopf(), stop_flag=stop_flag
            )

        thread = threading.Thread(
            target=lambda: asyncio.run(serving()), name="numatopo-operator", daemon=True
        )
        thread.start()
        operator = RunningOperator(runtime, servers, thread, stop_flag, loop_holder)
        self.running.append(operator)
        await eventually(lambda: servers.extender_port != 0, what="extender listening")
        return operator

    async def stop_all(self) -> None:
        for operator in self.running:
            if operator.thread.is_alive():
                await operator.stop()


@pytest.fixture
async def start_operator_on() -> AsyncIterator[Callable[..., Any]]:
    """`await start_operator_on(cluster, **settings)`: an operator against any emulator."""
    starter = OperatorStarter()
    yield starter.start
    await starter.stop_all()


@pytest.fixture
async def start_operator(cluster: Cluster) -> AsyncIterator[Callable[..., Any]]:
    """Starts the real operator (kopf + extender + status) against the emulator."""
    starter = OperatorStarter()

    async def start(**overrides: Any) -> RunningOperator:
        return await starter.start(cluster, **overrides)

    yield start
    await starter.stop_all()


async def eventually(check: Callable[[], bool], *, what: str, timeout: float = 10.0) -> None:
    """Wait until `check()` holds (polling), or fail saying what never happened."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for: {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
def h100() -> NumatopologySpec:
    return h100_spec()


@pytest.fixture
def pod() -> Callable[..., dict[str, Any]]:
    """`pod(name, **options)` builds a Pod manifest (see `make_pod`)."""
    return make_pod


@pytest.fixture
def topology_object() -> Callable[..., dict[str, Any]]:
    return numatopology


@pytest.fixture
def wait() -> Callable[..., Any]:
    return eventually


@dataclass
class Env:
    """Everything a cluster-level test needs, as one fixture."""

    cluster: Cluster
    start_operator: Callable[[], Any]
    h100: NumatopologySpec
    pod: Callable[..., dict[str, Any]]
    topology_object: Callable[..., dict[str, Any]]
    wait: Callable[..., Any]

    def parts(self) -> tuple[Any, ...]:
        """(cluster, start_operator, h100, pod, topology_object, wait)."""
        return (
            self.cluster,
            self.start_operator,
            self.h100,
            self.pod,
            self.topology_object,
            self.wait,
        )


@pytest.fixture
def env(cluster: Cluster, start_operator: Callable[[], Any], h100: NumatopologySpec) -> Env:
    return Env(cluster, start_operator, h100, make_pod, numatopology, eventually)
