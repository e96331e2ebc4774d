"""Reading the cluster for `kubectl numatopo` (I/O): the lists, the keys, one snapshot."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from numatopo_engine.signing import SigningKeyError, Verifier
from numatopo_kube import KubeClient, KubeError, KubeForbiddenError, KubeNotFoundError
from numatopo_operator.cluster_view import ClusterView, replay

# The chart publishes the operator's public keys here (`<fullname>-signing-key`).
KEYS_CONFIGMAP_SUFFIX = "-signing-key"
KEYS_ENTRY = "trusted.pem"


@dataclass(frozen=True)
class Access:
    """How to reach the cluster and whose signatures to trust (the global flags)."""

    kubeconfig: str = ""
    api_url: str = ""
    release: str = "numatopo/numatopo"
    """NAMESPACE/FULLNAME of the numatopo install (its signing-key ConfigMap)."""
    trusted_keys: str = ""
    """A PEM file of trusted public keys; overrides the ConfigMap."""

    def client(self) -> KubeClient:
        environ = dict(os.environ)
        if self.kubeconfig:
            # An explicit --kubeconfig wins over a pod's service account, as in kubectl.
            environ.pop("KUBERNETES_SERVICE_HOST", None)
            environ["KUBECONFIG"] = self.kubeconfig
        return KubeClient.connect(self.api_url, environ=environ, component="kubectl-numatopo")


async def verifier_from(access: Access, kube: KubeClient) -> tuple[Verifier | None, str]:
    """The operator's trusted keys and a note for stderr ('' when they were found); None: no keys
    could be read, so assignments are taken as written (the note says so)."""
    if access.trusted_keys:
        try:
            return Verifier.from_pem(Path(access.trusted_keys).read_bytes()), ""
        except (OSError, SigningKeyError) as exc:
            raise KubeError(0, "BadKeys", f"{access.trusted_keys}: {exc}") from None
    namespace, _, fullname = access.release.partition("/")
    name = f"{fullname}{KEYS_CONFIGMAP_SUFFIX}"
    try:
        found = await kube.get_configmap(namespace, name)
    except KubeForbiddenError:
        found = None
    text = ((found or {}).get("data") or {}).get(KEYS_ENTRY, "")
    try:
        return Verifier.from_pem(text.encode()), ""
    except SigningKeyError:
        return None, (
            f"note: no trusted keys in ConfigMap {namespace}/{name}; assignments are taken "
            "as written, signatures unchecked (--release NAMESPACE/FULLNAME or --trusted-keys)"
        )


async def read_cluster(access: Access, kube: KubeClient) -> tuple[ClusterView, str]:
    """One snapshot: Numatopologies, Nodes (if this account may list them), pods."""
    verifier, note = await verifier_from(access, kube)
    topologies = (await kube.list_numatopologies()).items
    try:
        nodes = (await kube.list_nodes()).items
    except KubeForbiddenError:
        nodes = []
    try:
        networks = (await kube.list_network_topologies()).items
    except (KubeForbiddenError, KubeNotFoundError):
        networks = []  # no NetworkTopology CRD, or no right to read it: groups span anywhere
    pods = (await kube.list_pods()).items
    view = replay(pods, topologies, nodes=nodes, network_topologies=networks, verifier=verifier)
    return view, note
