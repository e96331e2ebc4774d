"""The one Kubernetes client layer of numatopo, shared by the operator and the node side
(docs/DESIGN.md, "Kubernetes client"): `KubeClient`'s typed helpers, each of which declares
the RBAC permissions it needs (`API_CALLS`), so the chart's test can check the Roles."""

from numatopo_kube.client import (
    API_CALLS,
    APPLY,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    KubeClient,
    Listing,
    WatchEvent,
)
from numatopo_kube.errors import (
    KubeConfigError,
    KubeConflictError,
    KubeError,
    KubeForbiddenError,
    KubeInvalidNameError,
    KubeNotFoundError,
    KubePodReplacedError,
    KubeUnavailableError,
)

__all__ = [
    "API_CALLS",
    "APPLY",
    "JSON_PATCH",
    "MERGE_PATCH",
    "STRATEGIC_MERGE_PATCH",
    "KubeClient",
    "KubeConfigError",
    "KubeConflictError",
    "KubeError",
    "KubeForbiddenError",
    "KubeInvalidNameError",
    "KubeNotFoundError",
    "KubePodReplacedError",
    "KubeUnavailableError",
    "Listing",
    "WatchEvent",
]
