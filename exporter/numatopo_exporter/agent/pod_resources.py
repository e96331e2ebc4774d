"""The kubelet's PodResources API: which devices each container really holds (I/O).

The kubelet serves it on a unix socket (`/var/lib/kubelet/pod-resources/kubelet.sock`). Mount the
directory, not the socket: a kubelet restart replaces the socket file, and a mount of the old file
would point at nothing. One `List` per agent pass, on a fresh channel, so a restarted kubelet is
simply dialled again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from numatopo_exporter.kubelet_api import podresources_pb2, podresources_pb2_grpc

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""What the kubelet's own PodResources client accepts (docs/DESIGN.md, "GPUs: steered, ...")."""

Holdings = Mapping[tuple[str, str], Mapping[str, Mapping[str, list[str]]]]
"""(namespace, pod name) -> container -> resource name -> device plugin IDs."""


@dataclass(frozen=True)
class Listing:
    """One `List` answer, and the pods it can speak for: PodResources names pods by namespace and
    name, so an entry is a pod's own only in a listing read after the agent saw the kubelet report
    on the pod's UID (`PodView.admitted`; docs/DESIGN.md, "GPUs: steered, followed or
    unverified", Followed)."""

    holdings: Holdings
    admitted: frozenset[str]
    """The UIDs of the pods the agent had seen admitted when the `List` was sent."""

    def held_by(self, uid: str, key: str) -> Mapping[str, Mapping[str, list[str]]] | None:
        """What the pod (`uid`, `namespace/name`) holds per container; None when unlisted, or
        when this listing may still show its predecessor."""
        if uid not in self.admitted:
            return None
        namespace, _, name = key.partition("/")
        return self.holdings.get((namespace, name))


class PodResourcesError(Exception):
    """The PodResources API could not be read (no socket, kubelet down, timeout)."""


async def list_holdings(socket: Path, *, timeout: float = 2.0) -> Holdings:
    """Every listed pod's devices, per container holding any and resource, as the
    kubelet lists them."""
    response = await _call(socket, "List", podresources_pb2.ListPodResourcesRequest(), timeout)
    holdings: dict[tuple[str, str], dict[str, dict[str, list[str]]]] = {}
    for pod in response.pod_resources:
        containers = holdings.setdefault((pod.namespace, pod.name), {})
        for container in pod.containers:
            if not container.devices:
                continue  # a listing's many containers cost nothing after it is read
            held = containers.setdefault(container.name, {})
            for devices in container.devices:
                held.setdefault(devices.resource_name, []).extend(devices.device_ids)
    return holdings


async def list_allocatable(socket: Path, *, timeout: float = 2.0) -> dict[str, set[str]]:
    """Resource name -> the device plugin IDs the kubelet can hand out (its healthy devices)."""
    request = podresources_pb2.AllocatableResourcesRequest()
    response = await _call(socket, "GetAllocatableResources", request, timeout)
    found: dict[str, set[str]] = {}
    for devices in response.devices:
        found.setdefault(devices.resource_name, set()).update(devices.device_ids)
    return found


async def _call(socket: Path, method: str, request: Any, timeout: float) -> Any:
    if not socket.exists():
        raise PodResourcesError(f"no PodResources socket at {socket}")
    options = [("grpc.max_receive_message_length", MAX_ANSWER_BYTES)]
    async with grpc.aio.insecure_channel(f"unix://{socket}", options=options) as channel:
        stub = podresources_pb2_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
        try:
            return await getattr(stub, method)(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise PodResourcesError(
                f"PodResources {method} at {socket}: {exc.code().name}: {exc.details()}"
            ) from None
