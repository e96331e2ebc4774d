"""The engine's facade exports exactly its public names (httpx style), those it loads
on first use (`dir`) included."""

from __future__ import annotations

import numatopo_engine


def test_all_lists_every_public_name() -> None:
    public = sorted(
        name
        for name in dir(numatopo_engine)
        if not name.startswith("_")
        and name not in {"annotations"}
        and not isinstance(getattr(numatopo_engine, name), type(numatopo_engine))
    )

    assert sorted(numatopo_engine.__all__) == public
