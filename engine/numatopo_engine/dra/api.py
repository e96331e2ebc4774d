"""The `resource.k8s.io/v1` objects numatopo reads and writes: only the fields it uses.

Read objects keep what is not modelled (`extra="allow"`) so `unsupported` can name it: an unknown
field may mean something numatopo cannot honour (taints, counters, admin access, prioritized lists),
so whatever carries one is left to the scheduler. Written parts (`AllocationResult`,
`ResourceClaimConsumerReference`) forbid unknown fields. Field names are the Go API's JSON names
(kubernetes staging/src/k8s.io/api/resource/v1/types.go).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
"""The finalizer the scheduler puts on a claim before allocating it; kube-controller-manager's
resourceclaim controller removes it when it deallocates the claim."""

# resource.k8s.io/v1 limits (types.go): names are DNS labels/subdomains, at most 32 devices per
# request and per allocation.
AllocationResultsMaxSize = 32
Name = Annotated[str, Field(min_length=1, max_length=253)]


class _Wire(BaseModel):
    """Written or strictly read parts: camelCase, no unknown keys, no coercion."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, strict=True
    )

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class _Read(_Wire):
    """Read parts: unknown fields are kept (and judged by `unsupported`), types are strict."""

    model_config = ConfigDict(extra="allow")

    def extras(self) -> list[str]:
        return sorted(self.model_extra or {})


class Metadata(_Read):
    name: Name
    namespace: str | None = None
    uid: str = ""
    resource_version: str = ""
    creation_timestamp: str = ""
    """RFC 3339 at second resolution, as the API server writes it: orders by time as text."""
    finalizers: list[str] = Field(default_factory=list)


class _Object(_Read):
    """A whole object of the API; each kind narrows `kind` to its name."""

    api_version: Literal["resource.k8s.io/v1"] = "resource.k8s.io/v1"
    kind: str
    metadata: Metadata


class DeviceAttribute(_Wire):
    """Exactly one of the four fields (types.go: DeviceAttribute)."""

    flag: bool | None = Field(default=None, alias="bool")
    number: int | None = Field(default=None, alias="int")
    string: Annotated[str, Field(max_length=64)] | None = None
    version: Annotated[str, Field(max_length=64)] | None = None

    @model_validator(mode="after")
    def _one(self) -> DeviceAttribute:
        given = [v for v in (self.flag, self.number, self.string, self.version) if v is not None]
        if len(given) != 1:
            raise ValueError("a device attribute has exactly one of bool, int, string, version")
        return self

    @property
    def value(self) -> bool | int | str:
        return next(v for v in (self.flag, self.number, self.string, self.version) if v is not None)


class DeviceCapacity(_Read):
    value: str | int


class Device(_Read):
    """One device of a slice. Extras (taints, consumesCounters, bindingConditions, a per-device
    node...) make it a device numatopo does not hand out."""

    name: Name
    attributes: dict[str, DeviceAttribute] = Field(default_factory=dict)
    capacity: dict[str, DeviceCapacity] = Field(default_factory=dict)


class ResourcePool(_Read):
    name: Name
    generation: int = Field(ge=0)
    resource_slice_count: int = Field(ge=1)


class ResourceSliceSpec(_Read):
    driver: Name
    pool: ResourcePool
    node_name: str | None = None
    devices: list[Device] = Field(default_factory=list)


class ResourceSlice(_Object):
    kind: Literal["ResourceSlice"] = "ResourceSlice"
    spec: ResourceSliceSpec


class CELDeviceSelector(_Wire):
    expression: Annotated[str, Field(min_length=1, max_length=10240)]


class DeviceSelector(_Wire):
    cel: CELDeviceSelector


class ExactDeviceRequest(_Read):
    device_class_name: Name
    selectors: list[DeviceSelector] = Field(default_factory=list)
    allocation_mode: Literal["ExactCount", "All"] = "ExactCount"
    count: int = Field(default=1, ge=1)
    admin_access: bool | None = None


class DeviceRequest(_Read):
    name: Annotated[str, Field(min_length=1, max_length=63)]
    exactly: ExactDeviceRequest | None = None


class DeviceConstraint(_Read):
    requests: list[str] = Field(default_factory=list)
    match_attribute: str | None = None


class OpaqueDeviceConfiguration(_Wire):
    driver: Name
    parameters: dict[str, Any]


class DeviceClaimConfiguration(_Wire):
    requests: list[str] | None = None
    opaque: OpaqueDeviceConfiguration


class DeviceClaim(_Read):
    requests: list[DeviceRequest] = Field(default_factory=list)
    constraints: list[DeviceConstraint] = Field(default_factory=list)
    config: list[DeviceClaimConfiguration] = Field(default_factory=list)


class ResourceClaimSpec(_Read):
    devices: DeviceClaim = Field(default_factory=DeviceClaim)


class DeviceRequestAllocationResult(_Wire):
    request: Name
    driver: Name
    pool: Name
    device: Name


class DeviceAllocationConfiguration(_Wire):
    source: Literal["FromClass", "FromClaim"]
    requests: list[str] | None = None
    opaque: OpaqueDeviceConfiguration


class DeviceAllocationResult(_Wire):
    results: list[DeviceRequestAllocationResult] = Field(max_length=AllocationResultsMaxSize)
    config: list[DeviceAllocationConfiguration] | None = None


class NodeSelectorRequirement(_Wire):
    key: str
    operator: Literal["In"]
    values: list[str]


class NodeSelectorTerm(_Wire):
    match_fields: list[NodeSelectorRequirement]


class NodeSelector(_Wire):
    node_selector_terms: list[NodeSelectorTerm]


def node_selector_for(node: str) -> NodeSelector:
    """The selector the allocator gives an allocation of devices local to `node`."""
    requirement = NodeSelectorRequirement(key="metadata.name", operator="In", values=[node])
    return NodeSelector(node_selector_terms=[NodeSelectorTerm(match_fields=[requirement])])


class AllocationResult(_Read):
    devices: DeviceAllocationResult
    node_selector: NodeSelector | None = None

    def written(self) -> dict[str, Any]:
        """The allocation as numatopo writes it (no fields but the modelled ones)."""
        return {
            "devices": self.devices.to_wire(),
            **({"nodeSelector": self.node_selector.to_wire()} if self.node_selector else {}),
        }


class ResourceClaimConsumerReference(_Wire):
    api_group: str | None = None
    resource: Literal["pods"] = "pods"
    name: Name
    uid: Annotated[str, Field(min_length=1)]


class ResourceClaimStatus(_Read):
    allocation: AllocationResult | None = None
    reserved_for: list[ResourceClaimConsumerReference] = Field(default_factory=list)


class ResourceClaim(_Object):
    kind: Literal["ResourceClaim"] = "ResourceClaim"
    spec: ResourceClaimSpec
    status: ResourceClaimStatus = Field(default_factory=ResourceClaimStatus)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace or 'default'}/{self.metadata.name}"


class DeviceClassConfiguration(_Wire):
    opaque: OpaqueDeviceConfiguration


class DeviceClassSpec(_Read):
    selectors: list[DeviceSelector] = Field(default_factory=list)
    config: list[DeviceClassConfiguration] = Field(default_factory=list)
    extended_resource_name: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    """KEP-5004 (alpha in 1.34, gate DRAExtendedResource): pods asking this extended
    resource in their containers get devices of this class (`dra.extended`)."""


class DeviceClass(_Object):
    kind: Literal["DeviceClass"] = "DeviceClass"
    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec)
