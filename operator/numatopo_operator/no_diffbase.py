"""`NoDiffBase`: kopf's diff base for an operator with no change handlers (I/O-free).

For its on.create/update/delete/resume handlers kopf deep-copies every watched body
into an "essence", then once per progress storage (three copies of a Numatopology with
its hundreds of CPU rows per status write): a fifth of the operator's CPU during a burst
at 1,000 nodes. numatopo's event and index handlers never read that diff, so the
essence here is empty and nothing is stored on objects. A change handler added later
needs kopf's own storage back (a test checks there is none).
"""

from __future__ import annotations

from collections.abc import Iterable

import kopf


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
