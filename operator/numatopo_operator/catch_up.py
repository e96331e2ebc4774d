"""`CatchUp`: proof that this replica's pod watch has handed over every pod write stored
before a moment of its choosing: a new holder writes a fresh token on its own pod
(`handover`) and waits for the feed to hand it over. A watch delivers events in stored
order, so every earlier pod write (the replaced holder's decisions among them) was handed
over too: no list of pods is needed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from numatopo_engine.annotations import PREFIX

# On the operator's own pod only: the token of its latest catch-up.
CAUGHT_UP = PREFIX + "caught-up"


@dataclass
class CatchUp:
    key: str = ""
    """The pod (namespace/name) whose token is awaited; '' while none is."""
    token: str = ""
    seen: asyncio.Event = field(default_factory=asyncio.Event)

    def expect(self, key: str, token: str) -> None:
        self.key, self.token = key, token
        self.seen.clear()

    def observe(self, key: str, pod: Mapping[str, Any]) -> None:
        """A pod as the feed hands it over: the awaited one with the token sets `seen`."""
        if not self.token or key != self.key:
            return
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if annotations.get(CAUGHT_UP) == self.token:
            self.seen.set()
