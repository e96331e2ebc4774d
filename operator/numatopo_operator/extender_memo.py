"""What the extender keeps from one call to the next for the same pod (pure, bounded;
docs/DESIGN.md, "The scheduler extender"): per pod (by uid, least recently used dropped past
`size`) its `PodRequest`, used only for a pod equal in every field to the one it was parsed
from (a new resourceVersion parses again; the same object lets the engine keep its sizing,
`Engine.sized`), and filter's node ranks and scores for the prioritize call that follows.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from numatopo_engine import pod_request
from numatopo_engine.request import PodRequest
from numatopo_engine.resources import ResourceNames
from numatopo_operator import pod_view

# A few hundred pods in flight at once is far above a scheduler's parallelism.
PODS = 256

Ranks = dict[str, float]
Scores = dict[str, int]


def pod_uid(pod: Mapping[str, Any]) -> str:
    """The pod's uid, or its namespace/name where none was sent."""
    metadata = pod.get("metadata") or {}
    return str(metadata.get("uid") or pod_view.pod_key(pod))


class CycleMemo:
    """Parsed requests and filter's ranks per pod, at most `size` pods of each."""

    def __init__(self, size: int = PODS) -> None:
        self.size = size
        self._requests: OrderedDict[str, tuple[Mapping[str, Any], ResourceNames, PodRequest]]
        self._requests = OrderedDict()
        self._ranks: OrderedDict[str, tuple[Ranks, Scores]] = OrderedDict()

    def request(self, pod: Mapping[str, Any], resources: ResourceNames) -> PodRequest:
        """`pod_request.request_from_pod` once per pod content; errors raised, not kept (rare)."""
        uid = pod_uid(pod)
        found = self._requests.get(uid)
        if (
            found is not None
            and (found[1] is resources or found[1] == resources)
            and found[0] == pod
        ):
            self._requests.move_to_end(uid)
            return found[2]
        request = pod_request.request_from_pod(pod, resources)
        self._requests[uid] = (pod, resources, request)
        self._requests.move_to_end(uid)
        _bound(self._requests, self.size)
        return request

    def keep_ranks(self, uid: str, ranks: Ranks, scores: Scores) -> None:
        """Filter's ranks for pod `uid` where it fits, and their extender scores."""
        self._ranks[uid] = (ranks, scores)
        self._ranks.move_to_end(uid)
        _bound(self._ranks, self.size)

    def take_ranks(self, uid: str) -> tuple[Ranks, Scores]:
        """The ranks and scores kept for `uid` (forgotten here), or empty dicts."""
        return self._ranks.pop(uid, None) or ({}, {})


def _bound(kept: OrderedDict[str, Any], size: int) -> None:
    while len(kept) > size:
        kept.popitem(last=False)
