"""Several configured targets give one verdict, one JSON and one summary per target: the
combination, in process on replayed checks (tests/recorded.py). The configured project run
end to end (config, trace folder, record and verify per target) is in the slow tier
(tests/cli/test_commands.py)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from repro_check.cli.plan import aggregate_exit, combined_json, printer
from repro_check.errors import ExitCode

from ..recorded import replay


def test_one_json_for_several_targets_the_failing_one_leading(tmp_path: Path) -> None:
    same = replay("tiny_clean", tmp_path / "same")
    differs = replay("tiny_three_runs", tmp_path / "differs")
    assert same.exit_code == ExitCode.REPRODUCIBLE and differs.exit_code == 1
    assert aggregate_exit([same, same]) == ExitCode.REPRODUCIBLE
    assert aggregate_exit([same, differs]) == ExitCode.NOT_REPRODUCIBLE
    data = json.loads(combined_json([same, differs]))
    # reproducible only when every target is; the failing target's keys lead
    assert data["reproducible"] is False and data["exit_code"] == 1
    assert data["first_divergent_step"] == 7 and data["runs"] == 3
    assert data["targets"] == [same.target, differs.target]
    assert [r["reproducible"] for r in data["reports"]] == [True, False]
    assert [r["target"] for r in data["reports"]] == data["targets"]
    both_same = json.loads(combined_json([same, same]))
    assert both_same["reproducible"] is True and both_same["exit_code"] == 0
    # one target: its report as it is, no list
    assert json.loads(combined_json([differs])) == json.loads(differs.to_json())


def test_a_target_that_failed_outranks_one_that_differs(tmp_path: Path) -> None:
    differs = replay("tiny_three_runs", tmp_path / "differs")
    failed = replay("tiny_clean", tmp_path / "failed")
    failed.error = "run 1: exited with status 3"
    assert failed.exit_code == ExitCode.TARGET_FAILED
    assert aggregate_exit([differs, failed]) == ExitCode.TARGET_FAILED
    data = json.loads(combined_json([differs, failed]))
    assert data["exit_code"] == int(ExitCode.TARGET_FAILED)
    assert data["error"] is None  # the first failing report leads: the one that differs


def test_each_target_gets_its_own_summary(tmp_path: Path) -> None:
    reports = [replay("tiny_clean", tmp_path / "a"), replay("tiny_three_runs", tmp_path / "b")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        show = printer()
        for r in reports:
            show(r)
    text = out.getvalue()
    assert text.count("tiny.py:main") >= 2
    assert "REPRODUCIBLE" in text and "NOT REPRODUCIBLE" in text
    assert text.index("NOT REPRODUCIBLE") > text.index("REPRODUCIBLE")
