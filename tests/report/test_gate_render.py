"""What a user sees after verify, diff and record: the verdict, the labels of the two sides, the
first divergent step, the environment differences and the replay command on one unbroken line.

diff is run as a user runs it (``python -m repro_check diff A B``, on traces written here); the
summaries of verify and record, which need runs, are rendered into a 120-column console from the
reports of the shared API runs.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from ..api_targets import (
    SEED,
    STEPS,
    Golden,
)
from ..conftest import ROOT, cli_env, repro_check_cli
from ..synthetic_traces import LOSSES, write_trace

# the shared runs (same_check, golden, verify_same, ...): computed once a session
pytest_plugins = ["tests.api_runs"]

WIDTH = 120


def render(report: Any) -> str:
    """The summary of a verify, diff or record report, as the terminal shows it."""
    from repro_check.report.gate import summary

    console = Console(file=io.StringIO(), width=WIDTH, color_system=None, force_terminal=False)
    console.print(summary(report), crop=False)
    return console.file.getvalue()  # type: ignore[attr-defined]


def diff_cli(a: Path, b: Path, *options: str, tmp: Path) -> tuple[int, str, dict[str, Any]]:
    """``python -m repro_check diff A B`` in a subprocess; its stdout and its --json report."""
    out = tmp / "diff-report.json"
    proc = repro_check_cli(["diff", str(a), str(b), *options, "--json", str(out)], cwd=tmp,
                           env=cli_env(COLUMNS=str(WIDTH)), timeout=60)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, json.loads(out.read_text())


def line_with(text: str, *parts: str) -> str:
    """The one line of ``text`` that holds every part (in order)."""
    found = []
    for line in text.splitlines():
        at = 0
        for part in parts:
            at = line.find(part, at)
            if at < 0:
                break
            at += len(part)
        else:
            found.append(line)
    assert len(found) == 1, (parts, text)
    return found[0]


def flat(text: str) -> str:
    """The text with panel borders and line breaks as single spaces (a long path may wrap)."""
    return " ".join(text.replace("│", " ").replace("╭", " ").replace("╰", " ").split())


def assert_replay_on_one_line(text: str, replay: str) -> None:
    # longer than the terminal: wrapping would break it, and it must paste back whole
    assert len(replay) > WIDTH, replay
    assert f"Replay: {replay}" in text.splitlines(), text


# ---- diff, through the command line ------------------------------------------------------------
@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    t = tmp_path_factory.mktemp("render-traces")
    target = "experiments/a_rather_long_folder_name/train_the_model_for_the_render_test.py:main"
    args = ["--config", "configs/a_long_configuration_file_name.yaml", "--epochs", "1"]
    changed = LOSSES[:11] + [x * 1.01 for x in LOSSES[11:]]
    return {
        "a": write_trace(t / "golden-a.jsonl", LOSSES, metrics={"acc": 0.75}, target=target,
                         args=args),
        "same": write_trace(t / "same-b.jsonl", LOSSES, metrics={"acc": 0.75}, target=target,
                            args=args),
        "newer_torch": write_trace(t / "newer-torch.jsonl", LOSSES, metrics={"acc": 0.75},
                                   target=target, args=args, environment={"torch": "2.15.0"}),
        "changed": write_trace(t / "changed-b.jsonl", changed, metrics={"acc": 0.75},
                               target=target, args=args, environment={"torch": "2.15.0"}),
        "failed": write_trace(t / "failed-b.jsonl", LOSSES[:3], target=target, args=args,
                              status="failed",
                              error={"kind": "raised", "type": "ValueError",
                                     "message": "bad batch", "traceback": "ValueError: bad\n"}),
    }


def test_diff_of_identical_traces(traces: dict[str, Path], tmp_path: Path) -> None:
    code, out, report = diff_cli(traces["a"], traces["same"], tmp=tmp_path)
    assert code == 0
    assert line_with(out, "SAME")
    assert f"All {len(LOSSES)} steps and 1 metric(s) agree." in out
    # the metrics table is headed by the two files' names, A first
    assert line_with(out, "metric", "golden-a.jsonl", "same-b.jsonl")
    assert "Replay:" not in out and report["replay"] is None
    assert "First divergence" not in out


def test_diff_divergence_labels_step_environment_and_replay(traces: dict[str, Path],
                                                            tmp_path: Path) -> None:
    code, out, report = diff_cli(traces["a"], traces["changed"], tmp=tmp_path)
    assert code == 1 and report["first_divergent_step"] == 12
    assert line_with(out, "NOT REPRODUCIBLE")
    assert line_with(out, "First divergence", "step 12", "loss",
                     "changed-b.jsonl vs golden-a.jsonl")
    # the side-by-side table of the first divergent step: the reference's column first
    assert line_with(out, "golden-a.jsonl", "changed-b.jsonl", "|diff|")
    assert line_with(out, f"{len(LOSSES) - 12} later step(s) differ too")
    # the environment difference that comes with the divergence, naming both versions
    assert line_with(out, "environment difference")
    assert line_with(out, "torch", "2.14.1", "2.15.0")
    assert_replay_on_one_line(out, report["replay"])


def test_diff_environment_differs_but_values_agree(traces: dict[str, Path],
                                                   tmp_path: Path) -> None:
    code, out, report = diff_cli(traces["a"], traces["newer_torch"], tmp=tmp_path)
    assert code == 0
    assert line_with(out, "SAME")
    assert line_with(out, "nvironment difference", "agree")
    assert line_with(out, "torch", "2.14.1", "2.15.0")
    assert "Replay:" not in out


def test_diff_tolerance_shows_what_judged_the_values(traces: dict[str, Path],
                                                     tmp_path: Path) -> None:
    code, out, _ = diff_cli(traces["a"], traces["changed"], "--rtol", "0.02", tmp=tmp_path)
    assert code == 0
    assert line_with(out, "judged by", "rtol=0.02")
    assert line_with(out, "values accepted", "tolerance")


def test_diff_of_a_failed_run(traces: dict[str, Path], tmp_path: Path) -> None:
    code, out, report = diff_cli(traces["a"], traces["failed"], tmp=tmp_path)
    assert code == 3 and report["error"]
    assert line_with(out, "TARGET FAILED")
    assert line_with(out, "error:", "failed-b.jsonl")


def test_the_replay_line_is_whole_in_a_narrow_terminal(traces: dict[str, Path],
                                                       tmp_path: Path) -> None:
    out_path = tmp_path / "narrow.json"
    proc = repro_check_cli(["diff", str(traces["a"]), str(traces["changed"]), "--json",
                            str(out_path)], cwd=ROOT, env=cli_env(COLUMNS="60"), timeout=60)
    replay = json.loads(out_path.read_text())["replay"]
    lines = proc.stdout.splitlines()
    assert f"Replay: {replay}" in lines
    # the paths too: never wrapped, so they paste back whole
    assert f"A: {traces['a']}" in lines and f"B: {traces['changed']}" in lines
    assert any(line.startswith("traces: ") for line in lines) or "traces:" not in proc.stdout


# ---- verify and record, rendered from the API's reports ---------------------------------------
def test_verify_that_matches(verify_same: Any, golden: Golden) -> None:
    out = render(verify_same)
    assert line_with(out, "MATCHES GOLDEN")
    assert f"golden ({STEPS} steps) · this run {STEPS} steps · seed {SEED}" in flat(out)
    assert f"golden: {golden.path}" in out.splitlines()  # a path on a line of its own
    assert f"All {STEPS} steps and 1 metric(s) agree." in out
    assert line_with(out, "metric", "golden", "this run")
    assert "Replay:" not in out and "First divergence" not in out


def test_verify_that_diverges(verify_other_seed: Any) -> None:
    out = render(verify_other_seed)
    assert line_with(out, "NOT REPRODUCIBLE")
    assert line_with(out, "First divergence", "step 1", "this run vs golden")
    assert line_with(out, "golden", "this run", "|diff|")
    assert line_with(out, f"{STEPS - 1} later step(s) differ too")
    # the seed given to verify differs from the golden's: listed as what came with it
    assert line_with(out, "environment difference")
    assert line_with(out, "golden", "seed", str(SEED), "this run", str(SEED + 1))
    assert_replay_on_one_line(out, verify_other_seed.replay)


def test_record_that_wrote_its_golden(golden: Golden) -> None:
    out = render(golden.report)
    assert line_with(out, "RECORDED")
    assert f"golden: {golden.path}" in out.splitlines()
    assert line_with(out, f"seed {SEED}", f"steps recorded {STEPS}")
    mse = golden.data["metrics"][0]["mse"]
    assert line_with(out, "metrics:", f"mse={mse}")
    assert "Replay:" not in out


def test_record_of_a_failing_target(failed_record: tuple[Any, Path]) -> None:
    report, _ = failed_record
    out = render(report)
    assert line_with(out, "TARGET FAILED")
    assert "NOT RECORDED" not in out and "golden:" not in out
    assert line_with(out, "error:", "planted failure at step 2")
    # the target's own traceback, from the output of the run
    assert line_with(out, "tiny.py", "in main")
    assert f"Replay: {report.replay}" in out.splitlines()
    assert report.replay.startswith("repro-check record ")
