from __future__ import annotations

import itertools
import random

import pytest

from repro_check.trace import values
from repro_check.compare.steps import Comparison, Policy
from repro_check.trace.values import Tolerance


def sig(x: float) -> dict:
    return {"loss": values.encode_float64(x)}


def losses(n: int, diverge_at: int | None = None) -> list[dict]:
    out = []
    for s in range(1, n + 1):
        x = 1.0 / s
        if diverge_at is not None and s >= diverge_at:
            x += 1e-9 * s
        out.append(sig(x))
    return out


def feed(cmp: Comparison, runs: list[list[dict]], order: list[tuple[int, int]]) -> None:
    for run, i in order:
        cmp.add_step(run, i + 1, runs[run - 1][i])
        if i + 1 == len(runs[run - 1]):
            cmp.end(run, len(runs[run - 1]))


def interleavings(runs: list[list[dict]], seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    cursors = [0] * len(runs)
    order = []
    while any(c < len(r) for c, r in zip(cursors, runs)):
        choices = [k for k, (c, r) in enumerate(zip(cursors, runs)) if c < len(r)]
        k = rng.choice(choices)
        order.append((k + 1, cursors[k]))
        cursors[k] += 1
    return order


@pytest.mark.parametrize("seed", range(5))
def test_planted_divergence_found_at_its_step_in_any_arrival_order(seed: int) -> None:
    runs = [losses(50), losses(50, diverge_at=17), losses(50)]
    cmp = Comparison(3)
    feed(cmp, runs, interleavings(runs, seed))
    res = cmp.result()
    assert res.first_divergent_step == 17
    assert res.divergent_signal == "loss"
    assert res.divergence is not None and res.divergence.run == 2
    assert res.divergence.later_steps == 50 - 17
    assert res.per_run[3] is None
    assert not cmp.ref and not cmp.pairs[2].pending


def test_identical_runs_are_reproducible_and_memory_is_released() -> None:
    runs = [losses(100), losses(100)]
    cmp = Comparison(2)
    feed(cmp, runs, interleavings(runs, 0))
    res = cmp.result()
    assert res.reproducible and res.first_divergent_step is None and res.steps_compared == 100
    assert cmp.ref == {} and cmp.pairs[2].pending == {}


@pytest.mark.parametrize("shorter", [1, 2])
def test_shorter_run_diverges_at_its_first_missing_step(shorter: int) -> None:
    runs = [losses(30), losses(30)]
    runs[shorter - 1] = runs[shorter - 1][:12]
    for seed in range(3):
        cmp = Comparison(2)
        feed(cmp, runs, interleavings(runs, seed))
        res = cmp.result()
        assert res.first_divergent_step == 13
        assert res.divergent_signal == "steps"
        assert res.divergence is not None and res.divergence.later_steps == 30 - 13


def test_cut_short_run_is_not_a_divergence() -> None:
    cmp = Comparison(2)
    for s, v in enumerate(losses(10), 1):
        cmp.add_step(1, s, v)
    cmp.end(1, 10)
    for s, v in enumerate(losses(4), 1):
        cmp.add_step(2, s, v)
    cmp.end(2, 4, complete=False)
    assert cmp.result().reproducible


def test_nan_in_both_runs_is_equal() -> None:
    nan = {"loss": values.encode_float64(float("nan"))}
    cmp = Comparison(2)
    for run in (1, 2):
        cmp.add_step(run, 1, nan)
        cmp.end(run, 1)
    assert cmp.result().reproducible


def test_metrics_only_divergence() -> None:
    cmp = Comparison(2)
    for run in (1, 2):
        cmp.add_step(run, 1, sig(0.5))
        cmp.end(run, 1)
    cmp.set_metrics(1, {"accuracy": values.encode_float64(0.9501)})
    cmp.set_metrics(2, {"accuracy": values.encode_float64(0.9414)})
    res = cmp.result()
    assert res.first_divergent_step is None
    assert res.divergent_signal == "metric:accuracy"
    assert not res.reproducible


def test_missing_metric_is_a_divergence() -> None:
    cmp = Comparison(2)
    cmp.set_metrics(1, {"accuracy": values.encode_float64(0.9)})
    res = cmp.result()
    assert res.divergent_signal == "metric:accuracy"
    assert "run 1 only" in res.metric_divergences[0].detail


def test_tolerance_per_signal() -> None:
    cmp = Comparison(2, Policy(per_name={"loss": Tolerance(atol=1e-6)}))
    feed(cmp, [losses(20), losses(20, diverge_at=3)], [(r, i) for i in range(20) for r in (1, 2)])
    assert cmp.result().reproducible


def test_first_signal_in_recording_order_is_named() -> None:
    a = {"rng": "aa", "batch": "b1", "loss": values.encode_float64(1.0)}
    b = {"rng": "aa", "batch": "b2", "loss": values.encode_float64(2.0)}
    cmp = Comparison(2)
    cmp.add_step(1, 1, a)
    cmp.add_step(2, 1, b)
    assert cmp.result().divergent_signal == "batch"


def test_settled_divergence_waits_for_slower_runs() -> None:
    runs = [losses(10), losses(10, diverge_at=5), losses(10, diverge_at=2)]
    cmp = Comparison(3)
    for i in range(6):
        cmp.add_step(1, i + 1, runs[0][i])
        cmp.add_step(2, i + 1, runs[1][i])
    assert not cmp.settled_divergence()  # run 3 could still diverge earlier
    cmp.add_step(3, 1, runs[2][0])
    assert not cmp.settled_divergence()
    cmp.add_step(3, 2, runs[2][1])
    assert cmp.settled_divergence()
    assert cmp.result().first_divergent_step == 2


def test_context_rows_surround_the_divergence() -> None:
    cmp = Comparison(2)
    feed(cmp, [losses(20), losses(20, diverge_at=10)], [(r, i) for i in range(20) for r in (1, 2)])
    steps = [row["step"] for row in cmp.result().context]
    assert steps == list(itertools.chain(range(7, 10), range(10, 16)))


@pytest.mark.parametrize("seed", range(4))
def test_groups_of_bit_identical_runs_in_any_arrival_order(seed: int) -> None:
    # runs 2 and 4 differ from run 1 in the same way (so they agree with each other); run 5 stops
    runs = [losses(30), losses(30, diverge_at=9), losses(30), losses(30, diverge_at=9),
            losses(30)[:20]]
    cmp = Comparison(5)
    feed(cmp, runs, interleavings(runs, seed))
    res = cmp.result()
    assert res.groups == [[1, 3], [2, 4], [5]]
    assert res.first_divergent_step == 9


def test_groups_tell_runs_apart_by_metrics_alone() -> None:
    cmp = Comparison(3)
    feed(cmp, [losses(5)] * 3, [(r, i) for i in range(5) for r in (1, 2, 3)])
    for run, acc in ((1, 0.9), (2, 0.8), (3, 0.9)):
        cmp.set_metrics(run, {"accuracy": values.encode_float64(acc)})
    assert cmp.result().groups == [[1, 3], [2]]


@pytest.mark.parametrize("seed", range(4))
def test_spread_across_runs_per_step(seed: int) -> None:
    runs = [losses(40), losses(40), losses(40, diverge_at=12)]
    cmp = Comparison(3)
    feed(cmp, runs, interleavings(runs, seed))
    res = cmp.result()
    spread = dict(res.spread_series)
    assert sorted(spread) == list(range(1, 41))
    assert all(spread[s] == 0.0 for s in range(1, 12))
    for s in range(12, 41):
        assert spread[s] == pytest.approx(1e-9 * s, rel=1e-3)
    assert not cmp.spreads  # nothing held back once every run is in


def test_context_rows_hold_every_runs_value() -> None:
    runs = [losses(20), losses(20), losses(20, diverge_at=10)]
    cmp = Comparison(3)
    feed(cmp, runs, interleavings(runs, 1))
    rows = cmp.result().context_all
    assert [r["step"] for r in rows] == list(range(7, 16))
    assert [r["differs"] for r in rows] == [False] * 3 + [True] * 6
    first = rows[3]
    assert first["values"] == [runs[0][9]["loss"], runs[1][9]["loss"], runs[2][9]["loss"]]
    assert first["spread"] == pytest.approx(1e-8, rel=1e-3)


def test_spread_of_a_missing_step_is_undefined_and_not_held() -> None:
    cmp = Comparison(3)
    runs = [losses(10), losses(10), losses(6)]
    feed(cmp, runs, [(r, i) for i in range(10) for r in (1, 2, 3) if i < len(runs[r - 1])])
    res = cmp.result()
    spread = dict(res.spread_series)
    assert all(spread[s] == 0.0 for s in range(1, 7))
    assert all(spread[s] != spread[s] for s in range(7, 11))  # NaN: run 3 has no value there
    assert res.first_divergent_step == 7 and res.divergent_signal == "steps"
    assert not cmp.spreads
