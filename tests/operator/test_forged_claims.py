"""Forged claims against the real operator over HTTP: an assignment copied from another
pod, or written by hand with a made-up sequence, books nothing and never displaces the
operator's own signed decision (numatopo_engine.signing)."""

from __future__ import annotations

from numatopo_engine import annotations as keys
from numatopo_engine.annotations import Assignment
from numatopo_engine.cpuset import CPUSet
from signing_keys import signed_annotation


async def test_a_copied_assignment_with_a_lower_uid_never_displaces_the_original(env):
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object("h100-a", h100))
    await cluster.create_pod(pod("victim", cpu="8"))
    running = await start_operator()
    await wait(lambda: keys.ASSIGNMENT in cluster.annotations("victim"), what="victim assigned")
    original = cluster.annotations("victim")[keys.ASSIGNMENT]

    thief = pod("thief", cpu="8", annotations={keys.ASSIGNMENT: original}, signed=False)
    thief["metadata"]["uid"] = "uid-0000"  # sorts before the victim's: it would win a tie
    await cluster.create_pod(thief)
    await wait(lambda: cluster.annotations("thief").get(keys.STATE) == "Invalid", what="thief")

    victim = cluster.annotations("victim")
    assert ("Assigned", original) == (victim[keys.STATE], victim[keys.ASSIGNMENT])
    assert "signature does not match" in cluster.annotations("thief")[keys.REASON]
    state = running.runtime.ledger.state("h100-a")
    assert ["default/victim"] == sorted(state.assignments)


async def test_a_hand_written_assignment_with_seq_zero_is_no_claim(env):
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object("h100-a", h100))
    await cluster.create_pod(pod("victim", cpu="8"))
    running = await start_operator()
    await wait(lambda: keys.ASSIGNMENT in cluster.annotations("victim"), what="victim assigned")
    taken = Assignment.model_validate_json(cluster.annotations("victim")[keys.ASSIGNMENT])
    forged = taken.model_copy(update={"seq": 0, "sig": None}).to_annotation()

    await cluster.create_pod(pod("thief", annotations={keys.ASSIGNMENT: forged}, signed=False))
    await wait(lambda: cluster.annotations("thief").get(keys.STATE) == "Invalid", what="thief")

    assert "Assigned" == cluster.annotations("victim")[keys.STATE]
    assert "not signed by the numatopo operator" in cluster.annotations("thief")[keys.REASON]
    assert ["default/victim"] == sorted(running.runtime.ledger.state("h100-a").assignments)


async def test_an_older_signed_decision_shown_again_never_displaces_a_later_pod(env):
    """The assignment guard off (a trial): the tenant of pod `mover`, decided twice
    (seq 1 on some CPUs, then a later decision elsewhere), writes its first signed
    assignment back once `later` (seq 4) holds those CPUs. It verifies (it was signed
    for this very pod), but it is no longer the operator's decision: `later` keeps its
    CPUs and stays Assigned; `mover`'s old claim books nothing."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object("h100-a", h100))
    await cluster.create_pod(pod("mover", cpu="8"))
    running = await start_operator()
    await wait(lambda: keys.ASSIGNMENT in cluster.annotations("mover"), what="mover assigned")
    mover = cluster.pod("mover")
    first = Assignment.model_validate_json(cluster.annotations("mover")[keys.ASSIGNMENT])
    ((name, held),) = first.containers.items()
    elsewhere = first.model_copy(
        update={
            "seq": first.seq + 2,
            "containers": {name: held.model_copy(update={"cpus": CPUSet.parse("60-67")})},
        }
    )
    assert not elsewhere.containers[name].cpus & held.cpus
    await cluster.patch_pod(
        "mover",
        {"metadata": {"annotations": {keys.ASSIGNMENT: signed_annotation(mover, elsewhere)}}},
    )
    await wait(
        lambda: (
            getattr(
                running.runtime.ledger.state("h100-a").assignments.get("default/mover"), "seq", 0
            )
            == elsewhere.seq
        ),
        what="the later decision booked",
    )
    later = pod(
        "later",
        cpu="8",
        annotations={
            keys.ASSIGNMENT: first.model_copy(update={"seq": first.seq + 3}).to_annotation(),
            keys.STATE: "Assigned",
        },
    )
    await cluster.create_pod(later)
    await wait(
        lambda: "default/later" in running.runtime.ledger.state("h100-a").assignments,
        what="later booked",
    )

    await cluster.patch_pod(
        "mover", {"metadata": {"annotations": {keys.ASSIGNMENT: signed_annotation(mover, first)}}}
    )
    await wait(
        lambda: cluster.annotations("mover").get(keys.STATE) == "Invalid", what="mover refused"
    )

    assert "Assigned" == cluster.annotations("later")[keys.STATE]
    assert ["default/later"] == sorted(running.runtime.ledger.state("h100-a").assignments)
