"""What a resume did not restore, named from small step records (no run)."""

from __future__ import annotations

import pytest

from repro_check.trace.payloads import GeneratorSeeded, Location
from repro_check.compare.resume import FIXES, PARAMS_IN, RESUME_STATES, STATE_OF, attribute


def steps(n: int, **change: dict[int, dict[str, str]]) -> dict[int, dict[str, str]]:
    out = {s: {"rng.torch": f"t{s}", "batch": f"b{s}", "loss": f"l{s}", "lr": "0.1",
               "opt": f"o{s}", "params": f"p{s}"} for s in range(1, n + 1)}
    return out


def resumed_from(ref: dict[int, dict[str, str]], c: int, n: int) -> dict[int, dict[str, str]]:
    out = {i: dict(ref[c + i]) for i in range(1, n - c + 1)}
    out[1][PARAMS_IN] = ref[c]["params"]
    return out


def test_an_exact_resume_names_nothing() -> None:
    ref = steps(10)
    assert attribute(ref, resumed_from(ref, 4, 10), 4, 10, 6) == []


def test_each_state_going_in_is_named_in_the_fixed_order() -> None:
    ref = steps(10)
    mine = resumed_from(ref, 4, 10)
    mine[1].update({PARAMS_IN: "other", "rng.torch": "x", "lr": "0.2", "opt": "empty",
                    "scaler": "1.0/0"})
    ref[5]["scaler"] = "2.0/3"
    found = attribute(ref, mine, 4, 10, 6)
    assert [n.state for n in found] == ["params", "optimizer", "lr", "rng.torch", "grad_scaler"]
    assert all(n.fix.endswith(".") for n in found)
    assert [n.state for n in found] == [s for s in RESUME_STATES if s in {n.state for n in found}]


def test_a_batch_seen_earlier_is_a_restarted_data_order() -> None:
    ref = steps(10)
    mine = resumed_from(ref, 6, 10)
    mine[1]["batch"] = ref[3]["batch"]
    (found,) = attribute(ref, mine, 6, 10, 4)
    assert found.state == "data_order"
    assert found.detail == "the data order restarted: step 7 got step 3's batch"


def test_a_new_batch_with_equal_global_streams_blames_a_private_generator() -> None:
    ref = steps(10)
    mine = resumed_from(ref, 6, 10)
    mine[1]["batch"] = "new"
    made = [GeneratorSeeded("train.py:12#0", 0, "torch", "fp", created=True,
                            location=Location("train.py", 12))]
    found = attribute(ref, mine, 6, 10, 4, generators=made)
    assert [n.state for n in found] == ["generator", "data_order"]
    assert "train.py:12" in found[0].fix


def test_state_that_agrees_going_in_is_looked_for_at_the_first_divergence() -> None:
    ref = steps(10)
    mine = resumed_from(ref, 4, 10)
    for i in range(3, 7):  # a schedule that restarted shows only from step 7 on
        mine[i]["lr"] = "0.05"
    (found,) = attribute(ref, mine, 4, 10, 6, divergent_step=7)
    assert found.state == "lr" and "step 7" in found.detail


def test_more_or_fewer_steps_than_the_reference_had_left() -> None:
    ref = steps(10)
    mine = resumed_from(ref, 4, 10)
    mine[7] = dict(ref[10])
    found = attribute(ref, mine, 4, 10, 7)
    assert [n.state for n in found] == ["steps"]
    assert "made 7 steps where the reference had 6 left" in found[0].fix


def _planted(state: str) -> tuple[list[str], str, int]:
    """One resume from step 4 of 10 with ``state`` alone not restored: the names found, the
    sentence given for ``state`` and its detail."""
    ref, c = steps(10), 4
    for s in ref.values():  # every stream and signal recorded, as a real run's steps are
        s.update({"rng.python": "py", "rng.numpy": "np", "rng.cuda": "cu", "scaler": "1.0/0"})
    mine = resumed_from(ref, c, 10)
    made, generators = 6, list[GeneratorSeeded]()
    signal = {v: k for k, v in STATE_OF.items()}.get(state)
    if state == "params":
        mine[1][PARAMS_IN] = "other"
    elif signal is not None:
        mine[1][signal] = "restarted"
    elif state == "data_order":
        mine[1]["batch"] = ref[2]["batch"]
    elif state == "generator":
        mine[1]["batch"] = "new"
        generators = [GeneratorSeeded("train.py:12#0", 0, "torch", "fp", created=True,
                                      location=Location("train.py", 12))]
    elif state == "steps":
        mine[7] = dict(ref[10])
        made = 7
    found = attribute(ref, mine, c, 10, made, generators=generators)
    (named,) = [n for n in found if n.state == state]
    return [n.state for n in found], named.fix, len(named.detail)


@pytest.mark.parametrize("state", RESUME_STATES)
def test_every_state_of_the_vocabulary_is_named_with_one_sentence(state: str) -> None:
    """Each word of ``not_restored`` (rng.cuda and grad_scaler too), planted alone, is named,
    with one plain sentence on what to add to the checkpoint (its fields filled in)."""
    names, fix, detail = _planted(state)
    assert names == ([state] if state != "generator" else ["generator", "data_order"])
    assert fix.endswith(".") and fix.count(". ") == 0 and "{" not in fix and detail
    if state == "generator":
        assert "made at train.py:12" in fix
    if state == "lr":
        assert "from step 4" in fix
    assert set(FIXES) == set(RESUME_STATES)
