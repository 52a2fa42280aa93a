"""A verdict says what it rests on: the steps, metrics and saved tensors compared, in every
renderer (terminal, JSON ``evidence``, JUnit, HTML); with no step seen it says so and never
claims the training is reproducible. Reports are built in this process from fed comparisons."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from repro_check.report import ci
from repro_check.report.html import render_html
from repro_check.report.model import Report, SavedPart

from .test_render import make_report, render

ZERO_STEPS_VERDICT = "no training step was seen; the verdict rests on 1 metric"


def _no_steps(accuracies: tuple[float, float]) -> Report:
    return make_report([[], []], metrics=[{"accuracy": a} for a in accuracies])


def test_a_verdict_with_steps_counts_them() -> None:
    report = make_report([[2.0, 1.0, 0.5]] * 2, metrics=[{"accuracy": 0.5}] * 2)
    assert report.reproducible
    text = render(report, 120)
    assert "REPRODUCIBLE  train:main · rests on 3 steps and 1 metric" in text
    assert report.to_dict()["evidence"] == {"steps": 3, "metrics": 1, "saved_tensors": 0,
                                            "training_seen": True}


def test_no_step_seen_is_said_in_the_verdict_line_and_nothing_claims_the_training() -> None:
    report = _no_steps((0.5, 0.5))
    assert report.reproducible and report.exit_code == 0
    text = render(report, 140)
    verdict_line = next(line for line in text.splitlines() if "REPRODUCIBLE" in line)
    assert ZERO_STEPS_VERDICT in verdict_line
    assert "All 0 steps" not in text and "training is reproducible" not in text
    assert report.to_dict()["evidence"] == {"steps": 0, "metrics": 1, "saved_tensors": 0,
                                            "training_seen": False}


def test_a_metric_that_differs_without_steps_makes_no_claim_about_the_training() -> None:
    report = _no_steps((0.5, 0.25))
    assert not report.reproducible and report.divergent_signal == "metric:accuracy"
    text = render(report, 140)
    assert "No training step was seen" in text and ZERO_STEPS_VERDICT in text
    assert "All 0 steps" not in text and "training is reproducible" not in text


def test_junit_and_html_say_what_the_verdict_rests_on() -> None:
    seen, unseen = make_report([[2.0, 1.0]] * 2, metrics=[{"a": 1.0}] * 2), _no_steps((0.5, 0.5))
    unseen.target = "other:main"
    root = ET.fromstring(ci.junit_xml([seen, unseen]))
    cases = root.findall(".//testcase")
    props = [{p.get("name"): p.get("value") for p in case.iter("property")} for case in cases]
    assert props[0] == {"steps_compared": "2", "metrics_compared": "1",
                        "saved_tensors_compared": "0"}
    assert props[1]["steps_compared"] == "0"
    assert "rests on 2 steps and 1 metric" in (cases[0].findtext("system-out") or "")
    assert ZERO_STEPS_VERDICT in (cases[1].findtext("system-out") or "")
    page = render_html(unseen)
    assert ZERO_STEPS_VERDICT in page and "All 0 steps" not in page
    assert "rests on 2 steps and 1 metric" in render_html(seen)


def test_saved_tensors_count_when_compared() -> None:
    report = _no_steps((0.5, 0.5))
    report.saved = SavedPart(tensors_compared=4)
    assert report.evidence.text() == ("no training step was seen; the verdict rests on 1 metric "
                                      "and 4 saved tensors")
    assert report.to_dict()["evidence"]["saved_tensors"] == 4
