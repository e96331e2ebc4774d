"""A kubelet-side test harness on the real gRPC protocols over unix sockets.

The device manager of the kubelet (`pkg/kubelet/cm/devicemanager`) ported to Python,
its device plugin registration server, the PodResources v1 server, and a stand-in for
NVIDIA's device plugin: enough to test a device plugin proxy and a PodResources reader
without a cluster. See README.md for what is ported from where.
"""

from kubelet_harness.device_manager import AllocationError, DeviceManager
from kubelet_harness.harness import GPU, Harness
from kubelet_harness.kubelet import Admission, Kubelet
from kubelet_harness.pod_devices import ContainerRunOptions
from kubelet_harness.pods import Container, Pod
from kubelet_harness.vendor_plugin import FakeGpu, FakeNvidiaPlugin, RecordedCall, gpus
from kubelet_harness.wait import eventually

__all__ = [
    "GPU",
    "Admission",
    "AllocationError",
    "Container",
    "ContainerRunOptions",
    "DeviceManager",
    "FakeGpu",
    "FakeNvidiaPlugin",
    "Harness",
    "Kubelet",
    "Pod",
    "RecordedCall",
    "eventually",
    "gpus",
]
