"""Verdicts kept per node row: a long-lived engine decides each distinct row once per plan
(docs/DESIGN.md, "The allocation engine", step 2). `RowVerdicts` keeps, per row content, the score,
the refusal's summary (and what words its detail) and the rank's row terms; the `Hosts` weights,
which depend on the nodes judged together, are applied per call (`decision.node_ranks`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from numatopo_engine.decision import Decided, Plan, RankTerms, node_ranks, shortfall
from numatopo_engine.hints import RowLayout
from numatopo_engine.packing import Hosts, WorkloadMix
from numatopo_engine.refusals import Kind, Refusal, word
from numatopo_engine.state import NodeState

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Slots = npt.NDArray[np.intp]
ADMITTED = -1


class RowVerdicts:
    """The verdicts of one plan (under one mix) on every distinct row seen, by slot."""

    def __init__(self, plan: Plan, mix: WorkloadMix | None) -> None:
        self.plan = plan
        self.mix = mix
        self.width = plan.layout.width  # int64 values per row
        self.slot_of: dict[bytes, int] = {}
        self.score: Ints = np.zeros(0, dtype=np.int64)
        self.summary: Ints = np.zeros(0, dtype=np.int64)  # index into `summaries`, or ADMITTED
        self.summaries: list[str] = []
        self._summary_of: dict[object, int] = {}
        self.terms: RankTerms | None = None
        # Without a mix the rank is the row's alone: kept whole (-1 where refused).
        self.rank: Floats = np.zeros(0, dtype=np.float64)
        # Per slot: the bulk decision and its rows, where a refusal's detail is worded from.
        self._decided: list[tuple[Decided, Ints, int]] = []

    def __len__(self) -> int:
        return len(self._decided)

    def slots(self, rows: Sequence[bytes], decide: Callable[[Ints], Decided]) -> Slots:
        """The slot of each row (packed `width` int64 values); rows not seen yet are decided first,
        each distinct one once, in one call of `decide`."""
        width = self.width
        slot_of = self.slot_of
        found = [slot_of.get(row, ADMITTED) for row in rows]
        if ADMITTED in found:
            new = list(dict.fromkeys(r for r, s in zip(rows, found, strict=True) if s < 0))
            matrix = np.frombuffer(b"".join(new), dtype=np.int64).reshape(len(new), width)
            self._add(new, matrix, decide(matrix))
            found = [slot_of[row] for row in rows]
        return np.array(found, dtype=np.intp)

    def known_slots(self, states: Sequence[NodeState], layout: RowLayout) -> Slots | None:
        """Each state's slot when every row is laid out and seen (a warm cycle), else None."""
        get = self.slot_of.get
        # `cached_rows` and the look-up in one pass: a warm cycle's per-node cost.
        found = [
            get(c[1]) if (c := s.row_cache) is not None and c[0] is layout else None for s in states
        ]
        if None in found:
            return None
        return np.array(found, dtype=np.intp)

    def ranks(self, slots: Slots, hosts: Hosts | None) -> Floats:
        if not self.mix:
            return self.rank[slots]
        assert self.terms is not None, "ranks of slots that were filled"
        gathered = RankTerms._make(a[slots] if a.size else a for a in self.terms)
        return node_ranks(gathered, self.score[slots], self.mix, hosts)

    def refusal(self, slot: int) -> Refusal:
        decided, rows, index = self._decided[slot]
        plan = self.plan
        return Refusal(
            self.summaries[int(self.summary[slot])],
            lambda: shortfall(plan, decided, index, rows[index]),
        )

    def _add(self, rows: list[bytes], matrix: Ints, decided: Decided) -> None:
        start = len(self._decided)
        codes = np.full(len(rows), ADMITTED, dtype=np.int64)
        for index in np.flatnonzero(decided.score < 0).tolist():
            why = decided.kind[index]
            # One summary per kind of refusal (per first resource short): kube-scheduler counts
            # nodes by these words.
            key: object = int(decided.short[index]) if why is Kind.SHORT else why
            code = self._summary_of.get(key)
            if code is None:
                text = word(shortfall(self.plan, decided, index, matrix[index]), detail=False)
                code = self._summary_of[key] = len(self.summaries)
                self.summaries.append(text)
            codes[index] = code
        self.score = np.concatenate((self.score, decided.score))
        self.summary = np.concatenate((self.summary, codes))
        if self.mix:
            self.terms = decided.terms if self.terms is None else _joined(self.terms, decided.terms)
        else:
            alone = node_ranks(decided.terms, decided.score, None, None)
            self.rank = np.concatenate((self.rank, alone))
        self._decided.extend((decided, matrix, i) for i in range(len(rows)))
        self.slot_of.update(zip(rows, range(start, start + len(rows)), strict=True))


def _joined(a: RankTerms, b: RankTerms) -> RankTerms:
    return RankTerms(*(np.concatenate(pair) for pair in zip(a, b, strict=True)))
