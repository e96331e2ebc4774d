"""The kubelet, as far as devices go: device manager, registration server, PodResources
server, admission one pod at a time, container (re)starts, pod removal and a restart."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path

from kubelet_harness.device_manager import AllocationError, DeviceManager
from kubelet_harness.pod_devices import ContainerRunOptions
from kubelet_harness.podresources import PodResourcesServer
from kubelet_harness.pods import Pod
from kubelet_harness.registration import RegistrationServer

SOCKET_NAME = "kubelet.sock"
UNIX_PATH_MAX = 107  # sun_path is 108 bytes with its terminating NUL


@dataclass
class Admission:
    """The outcome of admitting a pod: the devices of each container, or the error that
    failed admission (the kubelet's UnexpectedAdmissionError)."""

    pod: Pod
    error: str | None = None
    # container -> resource -> device IDs (sorted)
    devices: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # container -> what the runtime got at the container's start (envs, mounts, ...)
    run_options: dict[str, ContainerRunOptions | None] = field(default_factory=dict)
    # container -> error of its start (PreStartContainer); the pod stays admitted
    start_errors: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def ids(self, container: str, resource: str = "nvidia.com/gpu") -> list[str]:
        return self.devices.get(container, {}).get(resource, [])

    def envs(self, container: str) -> dict[str, str]:
        options = self.run_options.get(container)
        return {} if options is None else dict(options.envs)


def check_socket_path(path: Path) -> Path:
    if len(str(path).encode()) > UNIX_PATH_MAX:
        raise ValueError(f"unix socket path too long ({len(str(path))} bytes): {path}")
    return path


class Kubelet:
    def __init__(
        self,
        root: Path,
        rng: random.Random,
        *,
        plugin_dir: Path | None = None,
        pod_resources_dir: Path | None = None,
        pod_resources_get: bool = True,
    ) -> None:
        self.rng = rng
        self.plugin_dir = plugin_dir or root / "device-plugins"
        self.pod_resources_dir = pod_resources_dir or root / "pod-resources"
        self.registration_socket = check_socket_path(self.plugin_dir / SOCKET_NAME)
        self.pod_resources_socket = check_socket_path(self.pod_resources_dir / SOCKET_NAME)
        self.pods: dict[str, Pod] = {}  # admitted and not removed: the active pods
        self._admitting: Pod | None = None
        self._affinity: dict[tuple[str, str], frozenset[int] | None] = {}
        self._admission = asyncio.Lock()
        self.device_manager = self._new_device_manager()
        self.registration = RegistrationServer(self.registration_socket, self.device_manager)
        self.pod_resources = PodResourcesServer(
            self.pod_resources_socket,
            lambda: self.device_manager,
            lambda: list(self.pods.values()),
            random.Random(rng.random()),
            get_enabled=pod_resources_get,
        )
        self.restarts = 0

    @property
    def checkpoint_path(self) -> Path:
        return self.device_manager.checkpoint_file()

    def _new_device_manager(self) -> DeviceManager:
        return DeviceManager(
            self.plugin_dir,
            self.rng,
            active_pods=self._active_pod_uids,
            topology_affinity=lambda uid, name: self._affinity.get((uid, name)),
        )

    def _active_pod_uids(self) -> list[str]:
        uids = list(self.pods)
        if self._admitting is not None:
            uids.append(self._admitting.uid)
        return uids

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        self.device_manager.read_checkpoint()
        await self.registration.start()
        await self.pod_resources.start()

    async def stop(self) -> None:
        await self.registration.stop()
        await self.pod_resources.stop()

    async def restart(self) -> None:
        """A kubelet restart: the device manager's state is rebuilt from the checkpoint
        alone, every socket in the device-plugins directory is deleted, the registration
        socket is created again, and plugins must register again. Pods (API objects) stay."""
        await self.stop()
        self.device_manager = self._new_device_manager()
        self.registration = RegistrationServer(self.registration_socket, self.device_manager)
        await self.start()
        self.restarts += 1

    # ---- pods ---------------------------------------------------------------------------

    async def admit(self, pod: Pod, *, start_containers: bool = True) -> Admission:
        """Admit one pod (Topology Manager admit -> device manager Allocate for each
        container, init containers first), then start its containers in order."""
        async with self._admission:
            result = Admission(pod)
            self._admitting = pod
            try:
                for container in pod.all_containers():
                    self._affinity[(pod.uid, container.name)] = container.numa_affinity
                    await self.device_manager.allocate(pod, container)
            except AllocationError as error:
                result.error = str(error)
                return result
            finally:
                self._admitting = None
            self.pods[pod.uid] = pod
            result.devices = self.container_devices(pod)
            if start_containers:
                for container in pod.all_containers():
                    try:
                        result.run_options[container.name] = await self.start_container(
                            pod, container.name
                        )
                    except AllocationError as error:
                        result.start_errors[container.name] = str(error)
            return result

    async def start_container(self, pod: Pod, container: str) -> ContainerRunOptions | None:
        """A start of the container: PreStartContainer where the plugin asks for it, then
        the devices and Allocate response cached (or checkpointed) for it."""
        return await self.device_manager.get_device_run_container_options(
            pod, pod.container(container), pod_active=pod.uid in self.pods
        )

    async def container_restart(self, pod: Pod, container: str) -> ContainerRunOptions | None:
        """The container restarts: its devices are replayed from the device manager's
        state (after a kubelet restart: the checkpoint), with no Allocate."""
        return await self.start_container(pod, container)

    def remove_pod(self, uid: str) -> None:
        """The pod terminated: it is no longer active, and its devices are freed (the
        kubelet's UpdateAllocatedDevices, which it runs before each allocation)."""
        self.pods.pop(uid, None)
        self.device_manager.update_allocated_devices()

    def container_devices(self, pod: Pod) -> dict[str, dict[str, list[str]]]:
        found: dict[str, dict[str, list[str]]] = {}
        for container in pod.all_containers():
            for resource in container.requests:
                ids = self.device_manager.pod_devices.container_devices(
                    pod.uid, container.name, resource
                )
                if ids is not None:
                    found.setdefault(container.name, {})[resource] = sorted(ids)
        return found
