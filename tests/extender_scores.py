"""The extender's score scale spelt out one node at a time: the oracle that
`extender.rank_scores` (the array form production answers with) is checked against."""

from __future__ import annotations

from collections.abc import Mapping

from numatopo_operator.extender import MAX_EXTENDER_PRIORITY


def extender_scores(ranks: Mapping[str, float]) -> dict[str, int]:
    """Node ranks as extender scores (0..10) by their order: the best rank gets 10, each
    lower distinct rank one less, down to 1 (0 is left for nodes that do not fit)."""
    order = {r: i for i, r in enumerate(sorted(set(ranks.values()), reverse=True))}
    return {node: max(1, MAX_EXTENDER_PRIORITY - order[r]) for node, r in ranks.items()}
