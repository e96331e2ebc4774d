"""The one Kubernetes client layer of numatopo, shared by the operator and the node side.

Built on lightkube (async, httpx): `docs/DESIGN.md` ("Kubernetes client") has the
measurement behind that choice; the writes made for every decided pod go over aiohttp
(`write_transport`), with the same login, errors and retries. kopf keeps its own client
for its watches; everything else numatopo says to the API server goes through
`KubeClient`'s typed helpers, each of which declares the RBAC permissions it needs
(`API_CALLS`), so the chart's test can check the Roles against the code.
"""

from numatopo_kube.client import (
    API_CALLS,
    APPLY,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    KubeClient,
    Listing,
    Permission,
    PodRef,
    WatchEvent,
)
from numatopo_kube.errors import (
    KubeConfigError,
    KubeConflictError,
    KubeError,
    KubeForbiddenError,
    KubeInvalidNameError,
    KubeNotFoundError,
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
    "KubeUnavailableError",
    "Listing",
    "Permission",
    "PodRef",
    "WatchEvent",
]
