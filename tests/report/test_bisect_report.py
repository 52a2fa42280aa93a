"""``bisect``'s part of a report in every output: terminal, JSON, HTML, CI (no run)."""

from __future__ import annotations

from repro_check.report import ci
from repro_check.report.html import render_html
from repro_check.report.model import BisectPart, GatePart, Report
from repro_check.report.render import summary
from repro_check.report.terminal import make_console
from repro_check.run.runner import RunResult

SHA = "4" * 40


def _part() -> BisectPart:
    commit = {"sha": SHA, "subject": "four: scale the output", "date": "2026-12-01T10:00:00+00:00",
              "author": "Ada"}
    return BisectPart(good={"sha": "1" * 40, "subject": "one", "date": "", "author": "Ada"},
                      bad={"sha": "5" * 40, "subject": "five", "date": "", "author": "Ada"},
                      candidates=4, first_bad=commit,
                      tested=[{**commit, "sha": "3" * 40, "subject": "three", "verdict": "good",
                               "step": None, "signal": None},
                              {**commit, "verdict": "bad", "step": 1, "signal": "loss"}],
                      step=1, signal="loss", op="aten::mul", module="Net",
                      drift={"max_abs": 0.0028, "max_at": 2, "final_abs": 0.0028},
                      runs=3, probe_runs=2, seconds=12.5, log_path="/traces/bisect.log")


def _report() -> Report:
    runs = [RunResult(1, status="completed", steps=2), RunResult(2, status="completed", steps=2)]
    return Report("model.py:main", [], 0, ["torch"], 2, runs, None,
                  gate=GatePart("verify", labels=["golden", "this run"], golden="g.json"),
                  bisect=_part())


def test_terminal_names_the_commit_step_op_runs_and_time() -> None:
    console = make_console(width=120)
    with console.capture() as cap:
        console.print(summary(_report()), crop=False)
    text = cap.get()
    assert f"first commit that differs: {SHA[:12]} four: scale the output" in text
    assert "step 1, signal loss, op aten::mul in module 'Net'" in text
    assert "3 run(s) (2 commit(s) tested of 4, 0 skipped) + 2 probe run(s) in 12.5 s" in text
    assert "bisect log: /traces/bisect.log" in text


def test_json_html_and_ci_carry_the_bisect() -> None:
    data = _report().to_dict()["bisect"]
    assert data["first_bad"]["sha"] == SHA and [t["verdict"] for t in data["tested"]] == [
        "good", "bad"]
    assert (data["step"], data["signal"], data["op"], data["skipped"]) == (1, "loss",
                                                                           "aten::mul", [])
    page = render_html(_report())
    assert '<p id="bisect">' in page and "four: scale the output" in page
    assert "first commit that differs" in ci.plain_summary(_report())
    matched = BisectPart(good={"sha": "1" * 40}, bad={"sha": "5" * 40}, candidates=4,
                         matches=True, runs=4)
    report = _report()
    report.bisect = matched
    assert "matches GOOD: no commit differs" in ci.plain_summary(report)
