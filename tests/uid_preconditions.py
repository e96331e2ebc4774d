"""kmock's Kubernetes emulator, plus the API server's uid precondition on patches.

A mock of real API server behaviour: a PATCH whose body carries `metadata.uid` is applied
only to the object stored with that uid. The API server refuses a merge (or strategic)
patch naming another uid with 409 Conflict ("Precondition failed: UID in precondition:
..., UID in object meta: ..."), and a JSON patch whose `test` of `/metadata/uid` fails
with 422, before storing anything. kmock has neither: it merges the body into whatever
object holds the name, so a write meant for a deleted pod would land on its namesake
and even overwrite the namesake's uid. This class refuses such patches as the API server
does, and nothing more (it leaves every other `test` operation to kmock).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp.web
import kmock


class UidPreconditions(kmock.KubernetesEmulator):
    """Refuses a patch whose `metadata.uid` (or `test` of it) is not the stored object's."""

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        refusal = self._uid_refusal(request)
        if refusal is not None:
            return refusal
        return await super()._handle(request)

    def _uid_refusal(self, request: Any) -> aiohttp.web.StreamResponse | None:
        resource = getattr(request, "resource", None)
        if resource is None or request.action != kmock.action.UPDATE or not request.name:
            return None
        key = (resource, request.namespace, request.name)
        if key not in self._objects or self._objects[key].deleted:
            return None  # kmock answers 404 itself
        stored = self._objects[key]
        uid = (stored.raw.get("metadata") or {}).get("uid")
        body = request.data
        if isinstance(body, Mapping):
            sent = (body.get("metadata") or {}).get("uid")
            if sent and sent != uid:
                message = (
                    f"Precondition failed: UID in precondition: {sent}, UID in object meta: {uid}"
                )
                return _status(409, "Conflict", message)
        elif isinstance(body, Sequence):
            for operation in body:
                if (
                    isinstance(operation, Mapping)
                    and operation.get("op") == "test"
                    and operation.get("path") == "/metadata/uid"
                    and operation.get("value") != uid
                ):
                    return _status(422, "Invalid", "testing value /metadata/uid failed")
        return None


def _status(code: int, reason: str, message: str) -> aiohttp.web.StreamResponse:
    return aiohttp.web.json_response(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": reason,
            "message": message,
            "code": code,
        },
        status=code,
    )
