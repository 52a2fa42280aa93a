"""The negative control judged (compare/control.py): its records fed by hand, no process."""

from __future__ import annotations

from typing import Any

from repro_check.compare.control import ControlJudge, ControlResult, Planted
from repro_check.compare.steps import Policy
from repro_check.trace.protocol import InfoRecord, MetricsRecord, SavedRecord, StepRecord
from repro_check.trace.values import Tolerance
from repro_check.trace.results import RunResult

from ..synthetic_traces import f32

PLANTED = {"planted": True, "tensor": "model.0.weight", "dtype": "float32", "shape": [4, 2],
           "index": [3, 1], "step": 1, "where": "step", "before": 1.5, "after": 1.5000001}


def sig(loss: float, params: str = "p") -> dict[str, Any]:
    return {"loss": f32(loss), "params": params}


def step(n: int, signals: dict[str, Any]) -> StepRecord:
    return StepRecord({"step": n, "signals": signals}, n, signals)


def judge(*, total: int = 5, metrics: dict[str, Any] | None = None, policy: Policy | None = None,
          plant_step: int = 1) -> ControlJudge:
    ref = {n: s for n, s in ((1, sig(1.0, "a")), (2, sig(0.5, "b")), (3, sig(0.25, "c")))
           if n <= total}
    return ControlJudge(ref, total, metrics or {}, policy or Policy(), plant_step=plant_step)


def feed(j: ControlJudge, *records: Any, end: RunResult | None = None) -> ControlResult:
    for r in records:
        j.event(3, r)
    if end is not None:
        j.run_finished(end)
    return j.result()


def test_a_difference_at_the_step_after_the_plant_is_seen_there() -> None:
    j = judge()
    res = feed(j, InfoRecord({"info": {"control": PLANTED}}, {"control": PLANTED}),
               step(1, sig(1.0, "a")), step(2, sig(0.5, "b2")))
    assert j.settled()
    assert (res.status, res.seen_step, res.seen_signal) == ("seen", 2, "params")
    assert res.verified
    assert res.planted == Planted("model.0.weight", "float32", [4, 2], [3, 1], 1, "step", 1.5,
                                  1.5000001)
    assert "model.0.weight[3, 1] (float32, shape [4, 2]) after step 1" in res.summary
    assert "seen at step 2 (params)" in res.summary


def test_agreement_at_the_step_after_the_plant_is_not_seen_naming_what_was_compared() -> None:
    j = judge(policy=Policy(signals=frozenset({"loss"})))
    res = feed(j, InfoRecord({"info": {"control": PLANTED}}, {"control": PLANTED}),
               step(1, sig(1.0, "a")), step(2, sig(0.5, "other params, not compared")))
    assert not j.settled()  # the step after next may still show it (a GAN's two optimizers)
    res = feed(j, step(3, sig(0.25, "other params again")))
    assert j.settled()
    assert res.status == "not seen" and not res.verified
    assert "did not show at steps 2 to 3 in the signals loss compared" in (res.detail or "")


def test_tolerances_do_not_hide_the_planted_change() -> None:
    """The control asks whether a change can be seen at all: on exact bits, in the signals the
    check compares, whatever the tolerances accept."""
    j = judge(policy=Policy(per_name={"loss": Tolerance(atol=1.0)}))
    res = feed(j, step(1, sig(1.0, "a")), step(2, {"loss": f32(0.5000001), "params": "b"}))
    assert (res.status, res.seen_step, res.seen_signal) == ("seen", 2, "loss")


def test_runs_stopped_by_max_steps_before_the_next_step_cannot_show_it() -> None:
    j = judge(total=1)
    res = feed(j, InfoRecord({"info": {"control": PLANTED}}, {"control": PLANTED}),
               step(1, sig(1.0, "a")), end=RunResult(3, status="stopped", steps=1))
    assert res.status == "not seen"
    assert "the runs stop at step 1 (--max-steps 1)" in (res.detail or "")


def test_runs_that_end_at_the_plant_are_judged_on_their_final_metrics() -> None:
    seen = feed(judge(total=1, metrics={"mse": f32(0.25)}), step(1, sig(1.0, "a")),
                MetricsRecord({"metrics": {"mse": f32(0.2500001)}}, {"mse": f32(0.2500001)}),
                end=RunResult(3, status="completed", steps=1))
    assert (seen.status, seen.seen_step, seen.seen_signal) == ("seen", None, "metric:mse")
    blind = feed(judge(total=1, metrics={"mse": f32(0.25)}), step(1, sig(1.0, "a")),
                 MetricsRecord({"metrics": {"mse": f32(0.25)}}, {"mse": f32(0.25)}),
                 end=RunResult(3, status="completed", steps=1))
    assert blind.status == "not seen"
    assert "the runs end at step 1, and the final metric mse did not change" in (blind.detail
                                                                                 or "")


def saved(kind: str, digest: str, path: str | None = None, order: int = 0) -> SavedRecord:
    body: dict[str, Any] = {"kind": kind, "order": order, "saver": "torch.save", "path": path,
                            "step": 1, "tensors": [["fc.weight", "float32", [2, 2], digest]]}
    return SavedRecord.of({"info": {"saved": body}}, body)


def test_runs_that_end_at_the_plant_are_judged_on_what_they_left_too() -> None:
    """A one-step run whose metric rounds the change away (a printed accuracy): the modules'
    state at the end, or a saved file, still shows it."""
    def one_step(reference: list[SavedRecord], left: list[SavedRecord]) -> ControlResult:
        j = ControlJudge({1: sig(1.0, "a")}, 1, {"acc": 0.5}, Policy(),
                         reference_saved=reference)
        return feed(j, step(1, sig(1.0, "a")), *left,
                    MetricsRecord({"metrics": {"acc": 0.5}}, {"acc": 0.5}),
                    end=RunResult(3, status="completed", steps=1))

    state = one_step([saved("state", "d1")], [saved("state", "d2")])
    assert (state.status, state.seen_step, state.seen_signal) == (
        "seen", None, "state:fc.weight")
    assert "was seen at the end, in the modules' state (state:fc.weight)" in state.summary
    file = one_step([saved("file", "d1", "m.pt"), saved("state", "s")],
                    [saved("file", "d2", "m.pt"), saved("state", "s")])
    assert (file.status, file.seen_signal) == ("seen", "saved:m.pt:fc.weight")
    assert "at the end, in a saved file" in file.summary
    blind = one_step([saved("state", "d1")], [saved("state", "d1")])
    assert blind.status == "not seen"
    assert ("the final metric acc did not change, nor did what the run left (1 saved tensor)"
            in (blind.detail or ""))
    # without what the reference left, the metrics are all there is to see it in
    assert one_step([], [saved("state", "d2")]).status == "not seen"


def test_with_no_step_the_final_metrics_must_show_it() -> None:
    body = dict(PLANTED, step=0, where="forward")
    blind = feed(judge(total=0, metrics={"accuracy": f32(0.5)}, plant_step=0),
                 InfoRecord({"info": {"control": body}}, {"control": body}),
                 MetricsRecord({"metrics": {"accuracy": f32(0.5)}}, {"accuracy": f32(0.5)}),
                 end=RunResult(3, status="completed", steps=0))
    assert blind.status == "not seen"
    assert "no training step was recorded" in (blind.detail or "")
    assert "before its module's first call" in (blind.detail or "")
    seen = feed(judge(total=0, metrics={"accuracy": f32(0.5)}, plant_step=0),
                MetricsRecord({"metrics": {"accuracy": f32(0.5000001)}},
                              {"accuracy": f32(0.5000001)}),
                end=RunResult(3, status="completed", steps=0))
    assert (seen.status, seen.seen_signal) == ("seen", "metric:accuracy")


def test_nothing_planted_or_a_failed_control_run_is_not_seen() -> None:
    body = {"planted": False, "step": 1, "why": "step 1 trained no floating tensor"}
    j = judge()
    res = feed(j, InfoRecord({"info": {"control": body}}, {"control": body}))
    assert j.settled() and res.status == "not seen"
    assert "no change could be planted: step 1 trained no floating tensor" in (res.detail or "")
    failed = feed(judge(), step(1, sig(1.0, "a")),
                  end=RunResult(3, status="failed", steps=1, error={"message": "boom"}))
    assert failed.status == "not seen" and (failed.detail or "").startswith("the control run "
                                                                            "failed")


def test_a_control_run_that_goes_on_where_the_reference_ended_is_seen() -> None:
    res = feed(judge(total=1), step(1, sig(1.0, "a")), step(2, sig(0.5, "b")))
    assert (res.status, res.seen_step, res.seen_signal) == ("seen", 2, "steps")
