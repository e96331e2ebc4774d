"""`NoDiffBase`: kopf's diff base for an operator with no change handlers (I/O-free).

kopf works out what changed in an object for its on.create/update/delete/resume
handlers: on every watch event it deep-copies the whole body into an "essence", then
copies that essence once per progress storage to clean it (three copies of a
Numatopology with its hundreds of CPU rows, each of them re-sent on every status write
the holder makes). numatopo registers event and index handlers only, which never read
that diff, so the essence built here is empty and nothing is stored on objects: the
copies were a fifth of the operator's CPU during a burst at 1,000 nodes. A change
handler added later needs kopf's own storage back (a test checks there is none).
"""

from __future__ import annotations

from collections.abc import Iterable

import kopf

__all__ = ["NoDiffBase"]


class NoDiffBase(kopf.DiffBaseStorage):
    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[kopf.FieldSpec] | None = None
    ) -> kopf.BodyEssence:
        del body, extra_fields  # kopf's signature; nothing of the object is kept
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        del body, patch, essence  # nothing to keep: no handler reads it back
