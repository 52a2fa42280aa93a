"""``bisect``'s part of a report in every output: terminal, JSON, HTML, CI (no run)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from repro_check.report import ci
from repro_check.report.html import render_html
from repro_check.compare.drift import Drift
from repro_check.report.model import BisectCommit, BisectPart, GatePart, Report, JudgedCommit
from repro_check.report.render import summary
from repro_check.report.terminal import make_console
from repro_check.trace.results import RunResult

SHA = "4" * 40


def _part() -> BisectPart:
    date = "2026-12-01T10:00:00+00:00"
    commit = BisectCommit(SHA, "four: scale the output", date, "Ada")
    return BisectPart(good=BisectCommit("1" * 40, "one", "", "Ada"),
                      bad=BisectCommit("5" * 40, "five", "", "Ada"),
                      candidates=4, first_bad=commit,
                      tested=[JudgedCommit("3" * 40, "three", date, "Ada", verdict="good"),
                              JudgedCommit(SHA, "four: scale the output", date, "Ada",
                                           verdict="bad", step=1, signal="loss")],
                      step=1, signal="loss", op="aten::mul", module="Net",
                      drift=Drift(steps=2, max_abs=0.0028, max_at=2, final_abs=0.0028),
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
    assert data["first_bad"] == {"sha": SHA, "subject": "four: scale the output",
                                 "date": "2026-12-01T10:00:00+00:00", "author": "Ada"}
    assert [t["verdict"] for t in data["tested"]] == ["good", "bad"]
    assert "error" not in data["tested"][0]  # only a skipped commit says why
    assert data["drift"]["max_abs"] == 0.0028 and data["log"] == "/traces/bisect.log"
    assert "  loss drift: largest |Δ| 0.0028 at step 2, final 0.0028" in \
        ci.plain_summary(_report())
    assert (data["step"], data["signal"], data["op"], data["skipped"]) == (1, "loss",
                                                                           "aten::mul", [])
    page = render_html(_report())
    assert '<p id="bisect">' in page and "four: scale the output" in page
    assert "first commit that differs" in ci.plain_summary(_report())
    matched = BisectPart(good=BisectCommit("1" * 40), bad=BisectCommit("5" * 40), candidates=4,
                         matches=True, runs=4)
    report = _report()
    report.bisect = matched
    assert "matches GOOD: no commit differs" in ci.plain_summary(report)


def test_ci_failure_line_names_the_first_commit_that_differs() -> None:
    """The one line of JUnit's failure message, GitHub's annotation and step summary names the
    commit, its step, signal, op and module (not only that commit's run against the reference)."""
    report = _report()
    report.comparison = None  # the line comes from the bisect part, whatever the run compared
    line = ci.failure_message(report) or ""
    assert line == (f"model.py:main: the first commit that differs from GOOD is {SHA[:12]} "
                    "four: scale the output (2026-12-01T10:00:00+00:00): step 1, signal loss, "
                    "op aten::mul in module 'Net'")
    failure = ET.fromstring(ci.junit_xml([report], "bisect")).find(".//failure")
    assert failure is not None and failure.get("message") == line
    assert SHA[:12] in (ci.annotation(report, "bisect") or "")
    assert SHA[:12] in ci.markdown([report], "bisect")
