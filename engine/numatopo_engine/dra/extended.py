"""Extended resources that DRA serves (KEP-5004): which devices a DeviceClass serves under its
`spec.extendedResourceName` or its implicit `deviceclass.resource.kubernetes.io/<class>`, and the
claim kube-scheduler made for a pod asking one; the rules (the class created last serves a name, a
device several classes select counts under each): docs/DESIGN.md, "Extended resources DRA serves".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from numatopo_engine.dra.api import DeviceClass
from numatopo_engine.dra.claims import PodClaim
from numatopo_engine.dra.join import DeviceId, DeviceKind, DraNode
from numatopo_engine.dra.pods import extended_claim_status
from numatopo_engine.dra.selectors import SelectorRefusedError, Selectors

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
EXTENDED_ENTRY = "for its extended resources"
"""The name of the pod's claim entry for them (messages say "claim for its ...")."""


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
    """Each GPU and NIC of `node` that a class naming an extended resource selects -> those
    resources, sorted. A class with fields numatopo does not model, or whose selectors it cannot
    evaluate on a device as the scheduler would (`selectors.SelectorRefusedError`), names none of
    its devices: which devices a pod asking its resource gets is not known."""
    selectors = Selectors()
    names: dict[DeviceId, list[str]] = {}
    for resource, device_class in sorted(named_classes(classes).items()):
        if device_class.extras() or device_class.spec.extras():
            continue
        devices = [d for d in node.devices if d.kind in (DeviceKind.GPU, DeviceKind.NIC)]
        try:
            chosen = [d.id for d in devices if selectors.matches(d, device_class.spec.selectors)]
        except SelectorRefusedError:
            continue
        for ident in chosen:
            names.setdefault(ident, []).append(resource)
    return {ident: tuple(found) for ident, found in names.items()}


def asked_served(pod: Mapping[str, Any], classes: Iterable[DeviceClass]) -> list[str]:
    """The extended resources the pod's containers ask that a DeviceClass serves: one names it,
    or it is the class's implicit name."""
    listed = list(classes)
    served = {IMPLICIT_PREFIX + c.metadata.name for c in listed} | named_classes(listed).keys()
    spec = pod.get("spec") or {}
    asked: set[str] = set()
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        resources = container.get("resources") or {}
        asked |= {
            str(r) for r in {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        }
    return sorted(asked & served)


def extended_claim(pod: Mapping[str, Any]) -> PodClaim | None:
    """The claim kube-scheduler made for the pod's extended resources, as an entry of its claims:
    each request's devices to the container its mapping names. None: none."""
    status = extended_claim_status(pod)
    if not status:
        return None
    pairs = tuple(
        (str(m.get("requestName")), str(m.get("containerName")))
        for m in status.get("requestMappings") or ()
        if isinstance(m, Mapping)
    )
    containers = tuple(dict.fromkeys(container for _, container in pairs))
    return PodClaim(EXTENDED_ENTRY, str(status["resourceClaimName"]), containers, pairs)
