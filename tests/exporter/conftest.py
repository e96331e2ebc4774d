"""The API emulator (kmock) set up like a cluster with the numatopo CRD installed, shared
by the exporter daemon, agent and command tests."""

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


@pytest.fixture
async def cluster(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    register_cluster(kmock)
    return kmock


@pytest.fixture
async def client(cluster: kmock.KubernetesEmulator) -> AsyncIterator[KubeClient]:
    async with KubeClient(str(cluster.url), request_timeout_seconds=5) as kube_client:
        yield kube_client
