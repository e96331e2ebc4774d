"""`claim_order` / `book_in_claim_order`: of pods claiming the same CPU or GPU, the
earlier decision keeps it; the operator's ledger and the node agent both use this."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from numatopo_engine.annotations import Assignment
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.state import NodeState, book_in_claim_order, claim_order


@dataclass(frozen=True)
class Pod:
    key: str
    uid: str
    assignment: Assignment


def pod(key: str, uid: str, *, seq: int, **container: Any) -> Pod:
    wire = {"node": "dgx1v-01", "seq": seq, "containers": {"main": container}}
    return Pod(key, uid, Assignment.model_validate(wire))


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param(
            [pod("ns/a", "u2", seq=7), pod("ns/b", "u1", seq=3)],
            ["ns/b", "ns/a"],
            id="lower-sequence-first-whatever-the-uid",
        ),
        pytest.param(
            [pod("ns/a", "u2", seq=3), pod("ns/b", "u1", seq=3)],
            ["ns/b", "ns/a"],
            id="same-sequence-lower-uid-first",
        ),
        pytest.param(
            [pod("ns/b", "", seq=0), pod("ns/a", "", seq=0)],
            ["ns/a", "ns/b"],
            id="no-sequence-no-uid-key-decides",
        ),
        pytest.param(
            [pod("ns/a", "u1", seq=1), pod("ns/b", "u2", seq=0)],
            ["ns/b", "ns/a"],
            id="decided-before-sequences-existed-first",
        ),
    ],
)
def test_claim_order(pods: list[Pod], expected: list[str]) -> None:
    assert expected == [p.key for p in sorted(pods, key=claim_order)]


def test_the_earlier_decision_keeps_a_gpu_the_later_books_nothing(node: NumatopologySpec) -> None:
    later = pod("ns/a", "u1", seq=5, gpuIndices=[0, 1], cpus="1")
    earlier = pod("ns/b", "u2", seq=4, gpuIndices=[1])
    state = NodeState(node)

    kept, overlapping = book_in_claim_order(state, [later, earlier])

    assert [earlier] == kept
    assert [later] == [claim for claim, _ in overlapping]
    assert "GPU 1 is held by ns/b" in overlapping[0][1]
    assert ["ns/b"] == list(state.assignments)
    assert "1-3,5-7" == str(state.free_cpus())


def test_only_what_the_caller_books_can_overlap(node: NumatopologySpec) -> None:
    """The node agent books CPUs only: a GPU claimed twice is not its overlap."""
    first = pod("ns/a", "u1", seq=1, gpuIndices=[0], cpus="1")
    second = pod("ns/b", "u2", seq=2, gpuIndices=[0], cpus="2")

    kept, overlapping = book_in_claim_order(
        NodeState(node),
        [first, second],
        booked=lambda p: p.assignment.model_copy(
            update={
                "containers": {
                    "main": p.assignment.containers["main"].model_copy(update={"gpu_indices": []})
                }
            }
        ),
    )

    assert ([first, second], []) == (kept, overlapping)
