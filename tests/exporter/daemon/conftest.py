"""The API emulator (kmock) set up like a cluster with the numatopo CRD installed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import kmock
import pytest

from numatopo_exporter.kube import KubeClient

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


class Outage:
    """A kmock criterion that matches the next `count` requests, then none."""

    def __init__(self, count: int) -> None:
        self.left = count

    def __call__(self, request: kmock.Request) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True


@pytest.fixture
async def cluster(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    register_cluster(kmock)
    return kmock


@pytest.fixture
async def client(cluster: kmock.KubernetesEmulator) -> AsyncIterator[KubeClient]:
    async with KubeClient(str(cluster.url), request_timeout_seconds=5) as kube_client:
        yield kube_client


def writes(emulator: kmock.KubernetesEmulator) -> int:
    """Requests that change something (everything but GET)."""
    return sum(1 for r in emulator if r.method != kmock.method.GET)
