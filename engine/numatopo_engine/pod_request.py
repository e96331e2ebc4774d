"""Read a Pod manifest (a plain dict, as the API returns it) into a `PodRequest` (pure).

What is read, per container and init container:
  cpu            millicores: `requests`, else `limits` (the API server defaults a missing
                 request to the limit)
  memory         bytes, the same way
  hugepages-<s>  bytes per page size `s` ("2Mi", "1Gi"); requests must equal limits
  GPUs, NICs     counts of the extended resources `ResourceNames` matches; whole numbers,
                 requests equal to limits (as the API server enforces for extended
                 resources); one GPU and one NIC resource per pod

The engine sizes pods from these (`allocation._sized`: the kubelet's KEP-753 rule for init and
sidecar containers). Everything the manifest gets wrong raises `InvalidRequestError` with a `field`
such as `containers[train].resources.limits.nvidia.com/gpu`; nothing else escapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from numatopo_engine import annotations as keys
from numatopo_engine import pod_options
from numatopo_engine.errors import InvalidRequestError
from numatopo_engine.quantity import QuantityError, page_bytes, parse_bytes, parse_milli
from numatopo_engine.request import ContainerRequest, PodRequest
from numatopo_engine.resources import DEFAULT_RESOURCES, ResourceNames

# Far above any node (the largest have 8-16 GPUs and a few hundred RDMA VFs) yet small enough that a
# typo such as "1e12" is refused instead of being searched for.
MAX_DEVICES = 10**6
# Real quantities are a dozen characters; the limit also keeps hostile strings away from the
# quantity regular expression, which backtracks quadratically on long input.
MAX_QUANTITY_CHARS = 64
HUGEPAGES_PREFIX = "hugepages-"

_Parser = Callable[[str], int]


def wants_topology(pod: object) -> bool:
    """True when the pod opted in with a `numatopo.io/policy` annotation (any value)."""
    metadata = pod.get("metadata") if isinstance(pod, Mapping) else None
    found = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return isinstance(found, Mapping) and keys.POLICY in found


def request_from_pod(
    pod: Mapping[str, Any], resources: ResourceNames = DEFAULT_RESOURCES
) -> PodRequest:
    """`pod`'s validated request (policy `none` without one); raises `InvalidRequestError`."""
    pod_map = _mapping(pod, "pod", required=True)
    kind = pod_map.get("kind", "Pod")
    if kind != "Pod":
        raise InvalidRequestError("kind", f"expected a Pod, got {pod_options.echo(kind)}")
    metadata = _mapping(pod_map.get("metadata"), "metadata", required=True)
    spec = _mapping(pod_map.get("spec"), "spec", required=True)
    containers = _containers(spec, "containers", resources, required=True)
    init_containers = _containers(spec, "initContainers", resources, required=False)
    _check_unique_names([*init_containers, *containers])
    _check_one_device_resource([*init_containers, *containers])
    options = pod_options.options_from_annotations(
        _mapping(metadata.get("annotations"), "metadata.annotations", required=False),
        containers=containers,
        init_containers=init_containers,
    )
    node_name = spec.get("nodeName")
    uid = metadata.get("uid")
    return PodRequest(
        namespace=_optional_text(metadata, "namespace", "metadata.namespace") or "default",
        name=_pod_name(metadata),
        containers=tuple(containers),
        init_containers=tuple(init_containers),
        options=options,
        uid=uid if isinstance(uid, str) else "",
        node_name=node_name if isinstance(node_name, str) and node_name else None,
    )


# -- manifest reading -----------------------------------------------------------------


def _mapping(value: object, where: str, *, required: bool) -> Mapping[Any, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        found = "nothing" if value is None else type(value).__name__
        raise InvalidRequestError(where, f"expected a mapping, got {found}")
    return value


def _optional_text(metadata: Mapping[Any, Any], key: str, where: str) -> str | None:
    value = metadata.get(key)
    if value is None or isinstance(value, str):
        return value
    raise InvalidRequestError(where, f"expected a string, got {type(value).__name__}")


def _pod_name(metadata: Mapping[Any, Any]) -> str:
    name = _optional_text(metadata, "name", "metadata.name")
    if name:
        return name
    # A manifest meant for `kubectl create` may carry only generateName.
    generated = _optional_text(metadata, "generateName", "metadata.generateName")
    if generated:
        return generated
    raise InvalidRequestError("metadata.name", "a pod needs a name (or generateName)")


def _containers(
    spec: Mapping[Any, Any], key: str, resources: ResourceNames, *, required: bool
) -> list[ContainerRequest]:
    raw = spec.get(key)
    if raw is None and not required:
        return []
    if not isinstance(raw, list) or (required and not raw):
        found = "nothing" if raw is None else type(raw).__name__
        if isinstance(raw, list):
            found = "an empty list"
        raise InvalidRequestError(f"spec.{key}", f"expected a list of containers, got {found}")
    return [
        _container(item, key=key, index=index, resources=resources)
        for index, item in enumerate(raw)
    ]


def _container(raw: object, *, key: str, index: int, resources: ResourceNames) -> ContainerRequest:
    item = _mapping(raw, f"{key}[{index}]", required=True)
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequestError(f"{key}[{index}].name", "a container needs a non-empty name")
    where = f"{key}[{pod_options.shorten(name)}]"
    res = _mapping(item.get("resources"), f"{where}.resources", required=False)
    requests = _mapping(res.get("requests"), f"{where}.resources.requests", required=False)
    limits = _mapping(res.get("limits"), f"{where}.resources.limits", required=False)
    restart_policy = item.get("restartPolicy")
    if key == "initContainers" and restart_policy not in (None, "Always"):
        raise InvalidRequestError(
            f"{where}.restartPolicy",
            f"{pod_options.echo(restart_policy)} is not allowed; init containers take only "
            "'Always' (a sidecar) or nothing",
        )
    reading = _Reading(where=where, requests=requests, limits=limits)
    hugepages: dict[str, int] = {}
    gpus: dict[str, int] = {}
    nics: dict[str, int] = {}
    for resource in sorted({*requests, *limits}, key=str):
        if not isinstance(resource, str):
            raise InvalidRequestError(f"{where}.resources", "resource names must be strings")
        if resource.startswith(HUGEPAGES_PREFIX):
            size = resource.removeprefix(HUGEPAGES_PREFIX)
            side = "limits" if resource in limits else "requests"
            if not page_bytes(size, longest=MAX_QUANTITY_CHARS):
                raise InvalidRequestError(
                    reading.path(side, resource),
                    f"{pod_options.echo(size)} is not a page size (expected e.g. hugepages-2Mi)",
                )
            hugepages[size] = reading.request(resource, parse_bytes, equal=True)
        elif resources.is_gpu(resource):
            gpus[resource] = reading.device_count(resource)
        elif resources.is_nic(resource):
            nics[resource] = reading.device_count(resource)
    gpu_resource, gpu_count = _single_device(gpus, "GPU", where)
    nic_resource, nic_count = _single_device(nics, "NIC", where)
    return ContainerRequest(
        name=name,
        cpu_milli=reading.request("cpu", parse_milli),
        memory_bytes=reading.request("memory", parse_bytes),
        hugepages={size: amount for size, amount in hugepages.items() if amount},
        gpus=gpu_count,
        gpu_resource=gpu_resource,
        nics=nic_count,
        nic_resource=nic_resource,
        restartable=restart_policy == "Always",
    )


@dataclass(frozen=True, slots=True)
class _Reading:
    """One container's `requests` and `limits`, read with errors that name the field."""

    where: str
    requests: Mapping[Any, Any]
    limits: Mapping[Any, Any]

    def path(self, side: str, resource: str) -> str:
        return f"{self.where}.resources.{side}.{pod_options.shorten(resource)}"

    def parse(self, side: str, resource: str, parse: _Parser) -> int | None:
        raw = (self.requests if side == "requests" else self.limits).get(resource)
        if raw is None:
            return None
        where = self.path(side, resource)
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise InvalidRequestError(
                where, f"expected a quantity such as '2' or '500m', got {type(raw).__name__}"
            )
        text = str(raw)
        if len(text) > MAX_QUANTITY_CHARS:
            raise InvalidRequestError(where, f"{pod_options.echo(text)} is not a quantity")
        try:
            return parse(text)
        except (QuantityError, ArithmeticError) as exc:
            # ArithmeticError: decimal overflow on exponents such as "1e999999999".
            raise InvalidRequestError(
                where, f"{pod_options.echo(text)} is not a valid quantity ({exc})"
            ) from None

    def request(self, resource: str, parse: _Parser, *, equal: bool = False) -> int:
        """The request, defaulting to the limit; one above the limit (with `equal`: other than the
        limit) is invalid."""
        requested = self.parse("requests", resource, parse)
        limit = self.parse("limits", resource, parse)
        if requested is not None and limit is not None and equal and requested != limit:
            raise InvalidRequestError(
                self.path("requests", resource),
                f"{self.requests[resource]} differs from the limit {self.limits[resource]}; "
                f"{pod_options.shorten(resource)} requests must equal limits",
            )
        if requested is not None and limit is not None and requested > limit:
            raise InvalidRequestError(
                self.path("requests", resource),
                f"{self.requests[resource]} is above the limit {self.limits[resource]}",
            )
        return requested if requested is not None else limit or 0

    def device_count(self, resource: str) -> int:
        milli = self.request(resource, parse_milli, equal=True)
        side = "limits" if resource in self.limits else "requests"
        if milli % 1000:
            raise InvalidRequestError(
                self.path(side, resource),
                f"{milli / 1000:g} is not a whole number; devices are counted in units",
            )
        if milli // 1000 > MAX_DEVICES:
            raise InvalidRequestError(
                self.path(side, resource), f"{milli // 1000} is above the limit of {MAX_DEVICES}"
            )
        return milli // 1000


def _single_device(counts: Mapping[str, int], what: str, where: str) -> tuple[str | None, int]:
    asked = {name: count for name, count in counts.items() if count}
    _one_resource(asked, what, f"{where}.resources", "asks", "container")
    return next(iter(asked.items()), (None, 0))


def _one_resource(names: Iterable[str], what: str, field: str, who: str, holder: str) -> None:
    """Refuse `what`s asked under more than one resource name of `names` by one `holder`."""
    listed = sorted(pod_options.shorten(n) for n in names)
    if len(listed) > 1:
        raise InvalidRequestError(
            field,
            f"{who} for {what}s under both {' and '.join(listed)}; a {holder} may use one {what} "
            "resource",
        )


def _check_unique_names(containers: Sequence[ContainerRequest]) -> None:
    seen: set[str] = set()
    for container in containers:
        if container.name in seen:
            raise InvalidRequestError(
                "spec.containers",
                f"container name {pod_options.echo(container.name)} is used twice",
            )
        seen.add(container.name)


def _check_one_device_resource(containers: Sequence[ContainerRequest]) -> None:
    """One GPU and one NIC resource per pod: scope `pod` books them as one request."""
    for what, names in (
        ("GPU", {c.gpu_resource for c in containers if c.gpu_resource}),
        ("NIC", {c.nic_resource for c in containers if c.nic_resource}),
    ):
        _one_resource(names, what, "spec.containers", "containers ask", "pod")
