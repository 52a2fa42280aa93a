"""The diagnosis as people read it: rendered to a plain console."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from repro_check.trace import values
from repro_check.compare.steps import ComparisonResult, Divergence
from repro_check.report.terminal import summary
from repro_check.report.diagnosis import diagnosis, html_section
from repro_check.report.htmlkit import escape
from repro_check.diagnose.localize import Localization
from repro_check.report.contents import AblationRow, FlaggedOp, PairResult, Source, SourcesCost
from repro_check.report.model import DiagnosisPart, Report
from repro_check.run.runner import RunResult
from repro_check.trace.results import Location


def render(renderable: object) -> str:
    out = StringIO()
    Console(width=110, file=out, color_system=None).print(renderable)
    return out.getvalue()


def report() -> Report:
    div = Divergence(2, 4, "loss", values.encode_float64(1.0), values.encode_float64(1.5))
    cmp = ComparisonResult(4, "loss", div, {2: div}, [], 4, [], [])
    rep = Report(target="train:main", args=[], seed=0, components=["torch"], runs=2,
                 results=[RunResult(1, status="completed", steps=6),
                          RunResult(2, status="completed", steps=6)], comparison=cmp)
    rep.cause = "compute"
    rep.cause_detail = "a nondeterministic computation"
    rep.diagnosis = DiagnosisPart(
        culprit="encoder.2", culprit_op="aten::index_add",
        localization=Localization(found=True, phase="forward", step=4,
                                  detail="aten::index_add returned different results",
                                  first_module_forward="encoder.2"),
        flagged_ops=[FlaggedOp(op="index_add_cuda_", step=1, where="train.py:40", runs=[1])],
        ablation=[
            AblationRow("numpy", "needed", PairResult("without numpy", ["numpy"], False,
                                                      first_divergent_step=1,
                                                      divergent_signal="rng.numpy")),
            AblationRow("threads", "not needed", PairResult("without threads", ["threads"],
                                                            True)),
            AblationRow(None, None, PairResult("no seeding", ["all"], False,
                                               first_divergent_step=1, divergent_signal="batch")),
        ],
        necessary_components=["numpy"],
    )
    return rep


def test_summary_names_the_cause() -> None:
    text = render(summary(report()))
    assert "First divergence: step 4, signal loss" in text
    assert "Cause: compute — a nondeterministic computation" in text


def test_diagnosis_shows_culprit_flagged_ops_and_ablation() -> None:
    text = render(diagnosis(report()))
    assert "culprit: encoder.2 · op aten::index_add · forward · step 4" in text
    assert "index_add_cuda_" in text and "train.py:40" in text
    lines = [line.split() for line in text.splitlines()]
    assert ["numpy", "needed", "differ", "at", "step", "1", "(rng.numpy)"] in lines
    assert ["threads", "not", "needed", "reproducible"] in lines
    assert "necessary components: numpy" in text


def sources_report() -> Report:
    rep = report()
    long = ("the global numpy stream differs at the start of step 1; reseeded from entropy at "
            "fixtures/zoo/three_sources.py:16, which every run reaches with another seed")
    rep.cause_detail = long
    assert rep.diagnosis is not None
    rep.diagnosis.sources = [Source(**s) for s in [
        {"step": 1, "signal": "rng.numpy", "cause": "rng", "rank": None, "detail": long,
         "location": Location("three_sources.py", 16, "main"),
         "stack": [], "pinned_by": "run 1's numpy state at the start of step 1"},
        {"step": 1, "signal": "batch", "cause": "rng", "rank": None,
         "detail": "seeded from OS entropy (no seed given) at three_sources.py:23",
         "location": Location("three_sources.py", 22, "main"),
         "stack": [], "pinned_by": None},
    ]]
    rep.diagnosis.sources_cost = SourcesCost(runs=4, seconds=12.0)
    return rep


def test_every_source_shows_its_detail_and_wrapped_lines_hang_under_their_text() -> None:
    rep = sources_report()
    text = render(diagnosis(rep))
    # source 2 has a location and still shows what it is (the JSON's detail)
    assert "seeded from OS entropy (no seed given) at three_sources.py:23" in text
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("1. "))
    block = []
    for line in lines[at + 1:]:
        if line.startswith("2. "):
            break
        block.append(line)
    assert block and all(line.startswith("   ") for line in block), block  # none at column 0
    cause = [line for line in render(summary(rep)).splitlines()]
    first = next(i for i, line in enumerate(cause) if line.startswith("Cause: "))
    assert cause[first + 1].startswith(" " * len("Cause: ")) and cause[first + 1].strip()


def test_the_cause_paragraph_stands_once_on_a_diagnosis_screen() -> None:
    """The check's summary says the cause under "Cause:"; the diagnosis under it neither repeats
    the cause nor the localization's detail when that detail is the cause's paragraph."""
    rep = report()
    assert rep.diagnosis is not None and rep.diagnosis.localization is not None
    rep.cause, rep.cause_detail = "rng", rep.diagnosis.localization.detail
    screen = render(summary(rep)) + render(diagnosis(rep))
    assert screen.count("aten::index_add returned different results") == 1
    assert "Cause: rng" in screen and "cause: rng" not in screen
    assert "culprit: encoder.2 · op aten::index_add" in screen
    rep.cause = "none"  # a cause the summary leaves out: the diagnosis says it
    assert "cause: none" in render(diagnosis(rep))


def test_a_source_whose_paragraph_is_the_cause_points_at_it() -> None:
    """With the first source's detail the cause's paragraph, the diagnosis screen says it once:
    under "Cause:", the source pointing there; a source with another detail shows its own."""
    rep = sources_report()
    screen = render(summary(rep)) + render(diagnosis(rep))
    assert rep.cause_detail is not None
    assert " ".join(screen.split()).count(" ".join(rep.cause_detail.split())) == 1
    assert "what differs and why: as the cause above says" in screen
    assert "seeded from OS entropy (no seed given) at three_sources.py:23" in screen
    rep.cause = "none"  # the summary shows no cause, the diagnosis does: once, too
    screen = " ".join((render(summary(rep)) + render(diagnosis(rep))).split())
    assert screen.count(" ".join(rep.cause_detail.split())) == 1
    assert "cause: none" in screen and "as the cause above says" in screen


def test_the_page_says_the_cause_paragraph_once_too() -> None:
    rep = sources_report()
    assert rep.diagnosis is not None and rep.diagnosis.localization is not None
    rep.diagnosis.localization.detail = rep.cause_detail or ""
    page = "".join(html_section(rep))
    assert page.count(escape(rep.cause_detail or "")) == 1  # in the cause's box only
    assert "what differs and why: as the cause above says" in page
    assert escape("seeded from OS entropy (no seed given) at three_sources.py:23") in page
