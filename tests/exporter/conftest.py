"""The API emulator (kmock) set up like a cluster with the numatopo CRD installed, shared
by the exporter daemon, agent and command tests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import kmock
import pytest

from numatopo_engine.model import API_VERSION, Numatopology
from numatopo_kube import MERGE_PATCH, KubeClient

NODE = "node-a"
NODE_UID = "5d0c1e2f-0000-4000-8000-00000000000a"


def register_cluster(emulator: kmock.KubernetesEmulator) -> None:
    """Discovery entries for what the node processes (and kopf) ask for, plus the Node."""
    resources = emulator.resources
    resources["v1/namespaces"] = kmock.ResourceInfo(namespaced=False, kind="Namespace")
    resources["v1/nodes"] = kmock.ResourceInfo(namespaced=False, kind="Node")
    resources["v1/pods"] = kmock.ResourceInfo(namespaced=True, kind="Pod", subresources={"status"})
    resources["v1/events"] = kmock.ResourceInfo(namespaced=True, kind="Event")
    resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = kmock.ResourceInfo(
        namespaced=False, kind="CustomResourceDefinition"
    )
    resources["numatopo.io/v1alpha1/numatopologies"] = kmock.ResourceInfo(
        namespaced=False, kind="Numatopology", subresources={"status"}
    )
    emulator.objects["v1/nodes", None, NODE] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "uid": NODE_UID},
    }


@pytest.fixture
async def cluster(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    register_cluster(kmock)
    return kmock


def numatopology_path(name: str | None = None, *, subresource: str = "") -> str:
    base = f"/apis/{API_VERSION}/{Numatopology.plural}"
    if name is None:
        return base
    return f"{base}/{name}" + (f"/{subresource}" if subresource else "")


def pod_path(namespace: str, name: str, *, subresource: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}" + (
        f"/{subresource}" if subresource else ""
    )


class NodeClient(KubeClient):
    """The node processes' client (`numatopo_kube.KubeClient`, connected to the emulator
    as the agent connects), plus plain HTTP verbs for the tests' own set-up and checks:
    creating pods, deleting objects, reading what was written."""

    def __init__(self, base_url: str, **options: Any) -> None:
        super().__init__(component="numatopo-agent", host=NODE, **options)
        self.base_url = base_url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self._session.request(
            method, self.base_url + path, data=data, params=dict(params or {}), headers=headers
        ) as response:
            text = await response.text()
            assert response.status < 400, f"{method} {path}: HTTP {response.status}: {text}"
            found: dict[str, Any] = json.loads(text) if text else {}
            return found

    async def get(self, path: str) -> dict[str, Any]:
        return await self.request("GET", path)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body=body)

    async def patch(
        self, path: str, body: dict[str, Any], *, content_type: str = MERGE_PATCH
    ) -> dict[str, Any]:
        return await self.request("PATCH", path, body=body, content_type=content_type)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        await super().close()


@pytest.fixture
async def client(cluster: kmock.KubernetesEmulator) -> AsyncIterator[NodeClient]:
    # Short retry pauses: the tests of outages would otherwise wait out the real ones.
    kube_client = NodeClient(str(cluster.url), timeout_seconds=5, retry_delays=(0.01, 0.02, 0.05))
    await kube_client.reconnect(str(cluster.url))
    async with kube_client:
        yield kube_client
