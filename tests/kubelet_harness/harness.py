"""One kubelet in a short temporary directory, with helpers for plugins and PodResources.

async with Harness(rng=random.Random(7)) as h:
    plugin = await h.start_plugin(gpus(4))
    admission = await h.admit(Pod("u1", "p1", containers=(Container("c", {GPU: 2}),)))
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from kubelet_harness.kubelet import Admission, Kubelet
from kubelet_harness.pod_devices import ContainerRunOptions
from kubelet_harness.pods import Pod
from kubelet_harness.vendor_plugin import FakeGpu, FakeNvidiaPlugin, PluginSet, gpus
from kubelet_harness.wait import eventually
from numatopo_exporter.kubelet_api import podresources_pb2 as v1
from numatopo_exporter.kubelet_api import podresources_pb2_grpc as v1_grpc

GPU = "nvidia.com/gpu"


class Harness:
    def __init__(
        self,
        root: Path | None = None,
        *,
        rng: random.Random | None = None,
        pod_resources_get: bool = True,
    ) -> None:
        """`root` must be short (unix socket paths < 108 bytes); by default a fresh
        directory under /tmp, removed at the end."""
        self._owns_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="kh-", dir="/tmp")) if root is None else root
        self.rng = rng if rng is not None else random.Random(0)
        self.kubelet = Kubelet(self.root, self.rng, pod_resources_get=pod_resources_get)
        self._plugins = PluginSet()

    async def __aenter__(self) -> Harness:
        try:
            await self.kubelet.start()
        except BaseException:
            self._cleanup()
            raise
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        try:
            await self._plugins.stop_all()
            await self.kubelet.stop()
        finally:
            self._cleanup()

    def _cleanup(self) -> None:
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    # ---- where things are -------------------------------------------------------------

    @property
    def plugin_dir(self) -> Path:
        return self.kubelet.plugin_dir

    @property
    def registration_socket(self) -> Path:
        return self.kubelet.registration_socket

    @property
    def pod_resources_socket(self) -> Path:
        return self.kubelet.pod_resources_socket

    @property
    def checkpoint_path(self) -> Path:
        return self.kubelet.checkpoint_path

    # ---- plugins ------------------------------------------------------------------------

    async def start_plugin(
        self,
        devices: Sequence[FakeGpu] | None = None,
        *,
        kubelet_socket: Path | None = None,
        wait: bool = True,
        **options: Any,
    ) -> FakeNvidiaPlugin:
        """Start a stand-in NVIDIA plugin registering with `kubelet_socket` (default: this
        kubelet's); with `wait`, return once this kubelet has its devices."""
        plugin = FakeNvidiaPlugin(
            kubelet_socket or self.registration_socket,
            list(devices) if devices is not None else gpus(4),
            **options,
        )
        self._plugins.plugins.append(plugin)
        await plugin.start()
        if wait and plugin.kubelet_socket == self.registration_socket:
            await self.wait_for_devices(plugin.resource_name, set(plugin.devices))
        return plugin

    async def stop_plugin(self, plugin: FakeNvidiaPlugin) -> None:
        await plugin.stop()
        if plugin in self._plugins.plugins:
            self._plugins.plugins.remove(plugin)

    async def wait_for_devices(self, resource: str, ids: set[str], timeout: float = 2.0) -> None:
        """Until the kubelet knows exactly these devices of the resource (any health)."""
        await eventually(
            lambda: set(self.kubelet.device_manager.all_devices.get(resource, {})) == ids,
            timeout=timeout,
        )

    # ---- pods ---------------------------------------------------------------------------

    async def admit(self, pod: Pod, **options: Any) -> Admission:
        return await self.kubelet.admit(pod, **options)

    async def container_restart(self, pod: Pod, container: str) -> ContainerRunOptions | None:
        return await self.kubelet.container_restart(pod, container)

    def remove_pod(self, uid: str) -> None:
        self.kubelet.remove_pod(uid)

    async def restart_kubelet(self) -> None:
        await self.kubelet.restart()

    # ---- PodResources client ------------------------------------------------------------

    async def list_pod_resources(self) -> v1.ListPodResourcesResponse:
        async with grpc.aio.insecure_channel(f"unix:{self.pod_resources_socket}") as channel:
            response: v1.ListPodResourcesResponse = await v1_grpc.PodResourcesListerStub(
                channel
            ).List(v1.ListPodResourcesRequest(), timeout=5)
            return response

    async def get_pod_resources(
        self, name: str, namespace: str = "default"
    ) -> v1.GetPodResourcesResponse:
        async with grpc.aio.insecure_channel(f"unix:{self.pod_resources_socket}") as channel:
            response: v1.GetPodResourcesResponse = await v1_grpc.PodResourcesListerStub(
                channel
            ).Get(v1.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace), timeout=5)
            return response
