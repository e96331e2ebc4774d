"""`WaitingPods`: the pods that wait for a decision, by the node they are bound to.

Kept by the pod handler (`translate.is_waiting`), read to retry them when a node's
capacity changes. Not a kopf index: its start-up gate costs time quadratic in the pods.
"""

from __future__ import annotations

from numatopo_operator import translate
from numatopo_operator.pod_view import PodView


class WaitingPods:
    def __init__(self) -> None:
        self._by_node: dict[str, dict[str, PodView]] = {}
        self._node_of: dict[str, str] = {}

    def observe(self, pod: PodView) -> None:
        """The pod as seen now: kept when it waits on a node, dropped when not."""
        key = pod.key
        node = pod.node if translate.is_waiting(pod) else None
        if node is None:
            self.forget(key)
            return
        previous = self._node_of.get(key)
        if previous is not None and previous != node:
            self.forget(key)
        self._node_of[key] = node
        self._by_node.setdefault(node, {})[key] = pod

    def forget(self, key: str) -> None:
        node = self._node_of.pop(key, None)
        if node is None:
            return
        pods = self._by_node.get(node, {})
        pods.pop(key, None)
        if not pods:
            self._by_node.pop(node, None)

    def on(self, node: str) -> list[PodView]:
        """The pods waiting on `node`, oldest first."""
        pods = self._by_node.get(node, {}).values()
        return sorted(pods, key=lambda pod: pod.metadata.get("creationTimestamp", ""))
