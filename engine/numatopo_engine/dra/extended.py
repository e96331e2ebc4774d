"""Extended resources that DRA serves (KEP-5004, alpha in Kubernetes 1.34, feature gate
DRAExtendedResource): a DeviceClass may name an extended resource
(`spec.extendedResourceName`); every class also has the implicit name
`deviceclass.resource.kubernetes.io/<class>`. A pod asking such a resource in a
container, on a node where no device plugin advertises it, gets devices of that class:
kube-scheduler allocates them and creates a ResourceClaim for the pod, named in the
pod's `status.extendedResourceClaimStatus`.

Several classes naming one resource: the scheduler serves it from the class created
last (of classes created in the same second, the name sorted first), and so does this
module. One device several classes select is a device of each of their resources.
"""

from __future__ import annotations

from collections.abc import Iterable

from numatopo_engine.dra.api import DeviceClass
from numatopo_engine.dra.join import DeviceId, DeviceKind, DraNode
from numatopo_engine.dra.selectors import SelectorRefusedError, Selectors


def named_classes(classes: Iterable[DeviceClass]) -> dict[str, DeviceClass]:
    """Each extended resource the classes name -> the class the scheduler serves it from."""
    by_name: dict[str, list[DeviceClass]] = {}
    for device_class in classes:
        if device_class.spec.extended_resource_name:
            by_name.setdefault(device_class.spec.extended_resource_name, []).append(device_class)
    # max() keeps the first of equal keys: sorted by name first, ties go to the first name.
    return {
        resource: max(
            sorted(group, key=lambda c: c.metadata.name),
            key=lambda c: c.metadata.creation_timestamp,
        )
        for resource, group in by_name.items()
    }


def extended_names(
    node: DraNode, classes: Iterable[DeviceClass]
) -> dict[DeviceId, tuple[str, ...]]:
    """Each GPU and NIC of `node` that a class naming an extended resource selects ->
    those resources, sorted. A class with fields numatopo does not model, or whose
    selectors it cannot evaluate on a device as the scheduler would
    (`selectors.SelectorRefusedError`), names none of its devices: which devices a pod
    asking its resource gets is not known."""
    selectors = Selectors()
    names: dict[DeviceId, list[str]] = {}
    for resource, device_class in sorted(named_classes(classes).items()):
        if device_class.extras() or device_class.spec.extras():
            continue
        chosen: list[DeviceId] = []
        try:
            for device in node.devices:
                if device.kind in (DeviceKind.GPU, DeviceKind.NIC) and selectors.matches(
                    device_class.spec.selectors, device.id.driver, device.device, str(device.id)
                ):
                    chosen.append(device.id)
        except SelectorRefusedError:
            continue
        for ident in chosen:
            names.setdefault(ident, []).append(resource)
    return {ident: tuple(found) for ident, found in names.items()}
