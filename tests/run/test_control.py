"""The negative control behind every agreeing verdict (run/control.py), on live runs: seen on a
normal script and reported where, UNVERIFIED where the check is blind to it, skipped with
``--no-control``, and ``verify``'s control against the golden."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

import repro_check
from repro_check.run import control

from ..api_targets import TINY, Golden
from ..conftest import FIXTURES, CliResult, run_cli

# the shared API runs (verify_same, golden): made once a session
pytest_plugins = ["tests.api_runs"]


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("control")


def tiny(tmp: Path, name: str, *flags: str) -> CliResult:
    """tiny.py (three optimizer steps) checked with every report written."""
    return run_cli("tiny.py:main", "--seed", "5", *flags, "--junit", str(tmp / f"{name}.xml"),
                   "--report", str(tmp / f"{name}.html"), "--", "--steps", "3",
                   tmp=tmp / name)


@pytest.fixture(scope="module")
def seen(tmp: Path) -> CliResult:
    return tiny(tmp, "seen")


@pytest.fixture(scope="module")
def one_step(tmp: Path) -> CliResult:
    """``--max-steps 1``: the runs stop at step 1, before a change planted after it can show."""
    return tiny(tmp, "one-step", "--max-steps", "1")


def test_the_control_is_seen_at_the_step_after_the_plant_and_reported_where(
        seen: CliResult, tmp: Path) -> None:
    assert seen.code == 0, seen.stdout + seen.stderr
    rep = seen.report
    assert rep is not None and rep["verdict"] == "reproducible" and rep["reproducible"] is True
    ctl = rep["control"]
    assert ctl["status"] == "seen" and ctl["reference"] == "run 1"
    assert ctl["seen_step"] == 2 and ctl["seen_signal"] in ("loss", "grads", "params")
    planted = ctl["planted"]
    assert planted["step"] == 1 and planted["where"] == "step"
    assert planted["tensor"].startswith("model.") and planted["dtype"] == "float32"
    assert len(planted["index"]) == len(planted["shape"])
    assert all(0 <= i < n for i, n in zip(planted["index"], planted["shape"]))
    assert planted["before"] != planted["after"]
    # the control run is a fresh run like the others: its trace beside theirs, run 3
    trace = Path(ctl["trace"])
    assert trace.parent == Path(rep["trace_dir"]) and trace.name == "control.jsonl"
    header = json.loads(trace.read_text().splitlines()[0])["header"]
    assert header["run"] == 3 and header["seed"] == 5
    if beside_runs():
        assert_started_with_the_runs(Path(rep["trace_dir"]))
    where = f"{planted['tensor']}[{', '.join(map(str, planted['index']))}]"
    assert f"Control: a 1-ulp change planted in {where}" in flat(seen.stdout)
    assert f"after step 1 was seen at step 2 ({ctl['seen_signal']})" in flat(seen.stdout)
    case = ET.parse(tmp / "seen.xml").getroot().find(".//testcase")
    assert case is not None and case.find("failure") is None
    assert f"negative control: a 1-ulp change planted in {where}" in (
        case.findtext("system-out") or "")
    html = (tmp / "seen.html").read_text()
    assert 'id="control"' in html and "was seen at step 2" in html


def assert_started_with_the_runs(folder: Path) -> None:
    """The control run in ``folder`` started before run 1's target returned (its process start
    overlaps the runs'), not after the runs ended."""
    def lines(name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (folder / name).read_text().splitlines()]

    run_1 = lines("run-1.jsonl")
    done = [x["info"]["seconds"] for x in run_1 if "seconds" in x.get("info", {})]
    ended = run_1[0]["header"]["started"] + done[0]
    started = lines("control.jsonl")[0]["header"]["started"]
    assert started < ended, (started, ended)


def beside_runs() -> bool:
    """Whether a check here starts its control run with its runs: they go in parallel (two
    CPUs or more) and no GPU is in sight."""
    return (os.cpu_count() or 1) >= 2 and not control.gpu_visible()


def test_runs_that_differ_keep_no_control_run(tmp: Path) -> None:
    """jitter.py's recorded losses differ from run to run: the control run started with them
    (where it is) is thrown away, no trace of it kept and none reported."""
    res = run_cli(f"{FIXTURES / 'jitter.py'}:main", "--", "--steps", "3", tmp=tmp / "differ")
    assert res.code == 1, res.stdout + res.stderr
    assert res.report is not None and res.report["verdict"] == "not reproducible"
    assert res.report.get("control") is None
    folder = Path(res.report["trace_dir"])
    assert sorted(p.name for p in folder.glob("*.jsonl")) == ["run-1.jsonl", "run-2.jsonl"]
    assert "Control:" not in res.stdout


def test_runs_stopped_at_step_1_are_unverified_in_every_report(one_step: CliResult,
                                                               tmp: Path) -> None:
    assert one_step.code == 1, one_step.stdout + one_step.stderr
    rep = one_step.report
    assert rep is not None
    assert rep["verdict"] == "unverified" and rep["reproducible"] is False
    assert rep["exit_code"] == 1 and rep["first_divergent_step"] is None
    assert rep["steps"] == [1, 1] and rep["steps_compared"] == 1
    ctl = rep["control"]
    assert ctl["status"] == "not seen" and ctl["seen_step"] is None
    assert ctl["planted"]["step"] == 1
    assert "the runs stop at step 1 (--max-steps 1)" in ctl["detail"]
    out = flat(one_step.stdout)
    assert "UNVERIFIED" in out and "Control: not seen" in out
    assert "REPRODUCIBLE" not in out.replace("NOT REPRODUCIBLE", "")
    failure = ET.parse(tmp / "one-step.xml").getroot().find(".//testcase/failure")
    assert failure is not None and failure.get("type") == "Unverified"
    assert "unverified: a 1-ulp change planted in" in (failure.get("message") or "")
    html = (tmp / "one-step.html").read_text()
    assert ">UNVERIFIED<" in html and "Control: not seen." in html


def test_no_control_skips_it_and_says_so(tmp: Path) -> None:
    r = run_cli("tiny.py:main", "--seed", "5", "--no-control", "--", "--steps", "3",
                tmp=tmp / "no-control")
    assert r.code == 0, r.stdout + r.stderr
    assert r.report is not None and r.report["verdict"] == "reproducible"
    assert r.report["control"]["status"] == "skipped"
    assert r.report["control"]["detail"] == "--no-control"
    assert "Control: not run (--no-control)" in r.stdout
    assert not (Path(r.report["trace_dir"]) / "control.jsonl").exists()


class Evaluations(dict[str, CliResult]):
    """fixtures/control/eval_only.py (no step) checked once per function, when a test asks."""

    def __init__(self, tmp: Path) -> None:
        super().__init__()
        self.tmp = tmp

    def __missing__(self, name: str) -> CliResult:
        self[name] = run_cli(f"control/eval_only.py:{name}", tmp=self.tmp / f"eval-{name}")
        return self[name]


@pytest.fixture(scope="module")
def evaluations(tmp: Path) -> Evaluations:
    """An evaluation-only script (no step): its rounded accuracy, its exact twin, and a metric
    made without any module."""
    return Evaluations(tmp)


def test_a_rounded_metric_and_no_step_is_unverified(evaluations: Evaluations) -> None:
    r = evaluations["main"]
    assert r.code == 1, r.stdout + r.stderr
    assert r.report is not None and r.report["verdict"] == "unverified"
    assert r.report["steps"] == [0, 0]
    ctl = r.report["control"]
    assert ctl["status"] == "not seen"
    assert ctl["planted"]["where"] == "forward" and ctl["planted"]["step"] == 0
    assert ctl["planted"]["tensor"] == "model.0.weight"
    assert "the final metric accuracy did not change" in ctl["detail"]
    assert "no training step was recorded" in ctl["detail"]
    assert "UNVERIFIED" in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", ["main", "saves"])
def test_a_run_of_one_step_with_a_rounded_metric_sees_the_control_in_what_it_left(
        name: str, tmp: Path) -> None:
    """fixtures/control/one_step.py: no step 2, an accuracy the change cannot move; the model at
    the end (or the file it saved) shows it, as it would any difference from step 1 on."""
    r = run_cli(f"control/one_step.py:{name}", tmp=tmp / f"one-step-{name}")
    assert r.code == 0, r.stdout + r.stderr
    assert r.report is not None and r.report["verdict"] == "reproducible"
    assert r.report["steps"] == [1, 1]
    ctl = r.report["control"]
    assert (ctl["status"], ctl["seen_step"]) == ("seen", None)
    assert ctl["planted"]["step"] == 1 and ctl["planted"]["where"] == "step"
    assert ctl["seen_signal"].startswith("state:" if name == "main" else "saved:one_step.pt:")
    place = "the modules' state" if name == "main" else "a saved file"
    assert f"after step 1 was seen at the end, in {place} ({ctl['seen_signal']})" in flat(
        r.stdout)


@pytest.mark.slow
def test_its_exact_twin_sees_the_control_in_the_final_metric(
        evaluations: Evaluations) -> None:
    r = evaluations["exact"]
    assert r.code == 0, r.stdout + r.stderr
    ctl = (r.report or {})["control"]
    assert (ctl["status"], ctl["seen_step"], ctl["seen_signal"]) == ("seen", None,
                                                                      "metric:logit_sum")
    assert ctl["planted"]["tensor"] == "model.0.weight"
    assert "was seen at the final metrics (metric:logit_sum)" in flat(r.stdout)


@pytest.mark.slow
def test_with_no_module_called_the_final_metric_as_reported_is_changed(
        evaluations: Evaluations) -> None:
    r = evaluations["no_model"]
    assert r.code == 0, r.stdout + r.stderr
    ctl = (r.report or {})["control"]
    assert ctl["planted"]["where"] == "metric" and ctl["planted"]["tensor"] == "metric:mean"
    assert ctl["planted"]["before"] != ctl["planted"]["after"]
    assert (ctl["status"], ctl["seen_signal"]) == ("seen", "metric:mean")


def test_verify_runs_the_control_against_the_golden(verify_same: Any) -> None:
    ctl = verify_same.control
    assert verify_same.exit_code == 0 and verify_same.verdict.word == "reproducible"
    assert ctl.status == "seen" and ctl.reference == "golden" and ctl.seen_step == 2
    assert ctl.planted is not None and ctl.planted.step == 1
    assert verify_same.to_dict()["control"]["reference"] == "golden"
    if beside_runs():
        assert_started_with_the_runs(Path(verify_same.trace_dir))


def test_verify_stopped_at_step_1_cannot_fail_the_gate_and_is_unverified(
        golden: Golden, tmp: Path) -> None:
    rep = repro_check.verify(TINY, golden.path, max_steps=1, trace_dir=tmp / "verify-one")
    assert int(rep.exit_code) == 1 and rep.verdict.label == "UNVERIFIED"
    assert rep.comparison is not None and rep.comparison.reproducible  # the step agrees
    assert rep.control is not None and rep.control.status == "not seen"
    assert rep.to_dict()["verdict"] == "unverified"


@pytest.mark.parametrize("target, seen_step", [("styles/gan.py:main", 3),
                                               ("styles/autograd_grad.py:main", 2)])
def test_the_control_is_seen_in_every_training_style(tmp_path: Path, target: str,
                                                     seen_step: int) -> None:
    """A GAN's discriminator step then its generator's: a change planted in the discriminator
    after step 1 may leave step 2 untouched and shows at step 3. A loop of autograd.grad and a
    hand update (no optimizer) plants in the tensors step 1 differentiated. Both reproducible
    scripts were UNVERIFIED before."""
    res = run_cli(target, tmp=tmp_path)
    report: Any = res.report
    assert res.code == 0 and report is not None, res.stdout + res.stderr
    assert report["control"]["status"] == "seen"
    assert report["control"]["seen_step"] == seen_step
