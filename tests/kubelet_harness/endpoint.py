"""One registered device plugin as the device manager sees it (kubelet: endpoint.go).

An endpoint is the device manager's handle for the RPCs it makes at admission and
container start. A stopped endpoint (its plugin disconnected, or rebuilt from the
checkpoint after a restart before the plugin registers again) refuses every call, as
the kubelet's `endpointImpl` does (`ErrEndpointStopped`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from numatopo_exporter.kubelet_api import deviceplugin_pb2 as api
from numatopo_exporter.kubelet_api import deviceplugin_pb2_grpc as api_grpc

# kubelet: endpointStopGracePeriod, how long a stopped endpoint's resource is still
# reported in the node's capacity (GetCapacity).
STOP_GRACE_PERIOD_S = 5 * 60.0
# kubelet: pluginapi.KubeletPreStartContainerRPCTimeoutInSecs
PRE_START_TIMEOUT_S = 30.0


class EndpointStoppedError(Exception):
    def __init__(self, resource: str) -> None:
        super().__init__(f"endpoint {resource} has been stopped")


class Endpoint:
    def __init__(self, resource: str, stub: api_grpc.DevicePluginStub | None) -> None:
        self.resource = resource
        self._stub = stub
        self.stop_time: float | None = None

    @classmethod
    def stopped(cls, resource: str) -> Endpoint:
        """kubelet: newStoppedEndpointImpl, for resources read back from the checkpoint."""
        endpoint = cls(resource, None)
        endpoint.stop_time = time.monotonic()
        return endpoint

    def set_stop_time(self, when: float) -> None:
        self.stop_time = when

    def is_stopped(self) -> bool:
        return self.stop_time is not None

    def stop_grace_period_expired(self) -> bool:
        return (
            self.stop_time is not None and time.monotonic() - self.stop_time > STOP_GRACE_PERIOD_S
        )

    def _api(self) -> api_grpc.DevicePluginStub:
        if self.is_stopped() or self._stub is None:
            raise EndpointStoppedError(self.resource)
        return self._stub

    async def get_preferred_allocation(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> api.PreferredAllocationResponse:
        request = api.PreferredAllocationRequest(
            container_requests=[
                api.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available),
                    must_include_deviceIDs=list(must_include),
                    allocation_size=size,
                )
            ]
        )
        response: api.PreferredAllocationResponse = await self._api().GetPreferredAllocation(
            request
        )
        return response

    async def allocate(self, devices: Sequence[str]) -> api.AllocateResponse:
        request = api.AllocateRequest(
            container_requests=[api.ContainerAllocateRequest(devices_ids=list(devices))]
        )
        response: api.AllocateResponse = await self._api().Allocate(request)
        return response

    async def pre_start_container(self, devices: Sequence[str]) -> api.PreStartContainerResponse:
        request = api.PreStartContainerRequest(devices_ids=list(devices))
        response: api.PreStartContainerResponse = await self._api().PreStartContainer(
            request, timeout=PRE_START_TIMEOUT_S
        )
        return response


@dataclass
class EndpointInfo:
    """kubelet: endpointInfo, the endpoint and the options its plugin announced."""

    endpoint: Endpoint
    options: api.DevicePluginOptions | None
