"""The terminal report (golden text at a fixed width, no colour) and the progress display.

Reports are built in this process from fed comparisons, so these tests run no child. To accept a
deliberate change of the output: ``REPRO_CHECK_UPDATE_GOLDEN=1 pytest tests/test_render.py`` and
review the diff of tests/golden/.
"""

from __future__ import annotations

import os
import re
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from repro_check.trace import values
from repro_check.compare.steps import Comparison
from repro_check.report.terminal import Progress, Sparkline, make_console, print_summary
from repro_check.report.model import Report
from repro_check.run.options import RunOptions
from repro_check.run.replay import check_runs, replay_line
from repro_check.run.runner import RunResult
from repro_check.trace.protocol import record_of
from repro_check.trace.seeding import COMPONENTS

GOLDEN = Path(__file__).parent / "golden"


def loss_stream(steps: int, diverge_at: int | None = None, noise: float = 3e-7) -> list[float]:
    """A decaying float32 loss; from ``diverge_at`` on a growing relative perturbation."""
    out = []
    for s in range(1, steps + 1):
        x = 2.3 * 0.93**s + 0.05
        if diverge_at is not None and s >= diverge_at:
            x *= 1 + noise * 1.6 ** (s - diverge_at)
        out.append(x)
    return out


def make_report(runs: list[list[float]], metrics: list[dict[str, float]] | None = None,
                args: tuple[str, ...] = (), target: str = "train:main") -> Report:
    """A Report as ``check`` builds it, from per-run loss lists fed to a streaming comparison."""
    cmp = Comparison(len(runs))
    for k, losses in enumerate(runs, 1):
        for s, x in enumerate(losses, 1):
            cmp.add_step(k, s, {"loss": values.encode(np.float32(x))})
        cmp.end(k, len(losses))
        if metrics:
            cmp.set_metrics(k, {n: values.encode(np.float32(v)) for n, v in metrics[k - 1].items()})
    res = cmp.result()
    results = [RunResult(k, status="completed", returncode=0, steps=len(r), seconds=1.5)
               for k, r in enumerate(runs, 1)]
    report = Report(target=target, args=list(args), seed=123, components=list(COMPONENTS),
                    runs=len(runs), results=results, comparison=res, threads=1)
    if not report.reproducible:
        report.replay = replay_line(RunOptions(target, args=tuple(args), seed=123),
                                    runs=check_runs(len(runs)), upto=res.first_divergent_step)
    return report


def render(report: Report, width: int) -> str:
    buf = StringIO()
    print_summary(report, Console(file=buf, width=width, color_system=None, highlight=False))
    return buf.getvalue()


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("REPRO_CHECK_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    expected = path.read_text(encoding="utf-8")
    strip = lambda t: "\n".join(line.rstrip() for line in t.splitlines())  # noqa: E731
    assert strip(text) == strip(expected), f"output differs from {path}:\n{text}"


# ---- the summary -------------------------------------------------------------------------------
LONG_ARGS = ("--data", "/very/long/path/to/the/mnist/data/folder/of/this/user", "--epochs", "3")


def test_divergent_two_runs() -> None:
    report = make_report([loss_stream(40), loss_stream(40, diverge_at=7)],
                         [{"accuracy": 0.9463}, {"accuracy": 0.9459}], args=LONG_ARGS)
    text = render(report, 100)
    check_golden("divergent_two_runs", text)
    assert "First divergence: step 7, signal loss, run 2 vs run 1" in text


def test_replay_command_is_never_wrapped() -> None:
    report = make_report([loss_stream(40), loss_stream(40, diverge_at=7)], args=LONG_ARGS)
    assert len(report.replay) > 80
    text = render(report, 60)
    assert report.replay in text.splitlines()
    check_golden("divergent_two_runs_narrow", text)


def test_reproducible_two_runs() -> None:
    report = make_report([loss_stream(40)] * 2, [{"accuracy": 0.9463}] * 2)
    text = render(report, 100)
    check_golden("reproducible_two_runs", text)
    assert "REPRODUCIBLE" in text and "All 40 steps and 1 metric(s) agree." in text
    assert "Replay" not in text and "|diff|" not in text


def test_three_runs_show_spread_and_groups() -> None:
    runs = [loss_stream(60), loss_stream(60, diverge_at=12), loss_stream(60)]
    report = make_report(runs, [{"accuracy": 0.95}, {"accuracy": 0.94}, {"accuracy": 0.95}])
    text = render(report, 100)
    check_golden("three_runs", text)
    assert "Bit-identical groups: {1, 3}  {2}" in text


def test_five_runs_three_groups() -> None:
    a, b = loss_stream(30), loss_stream(30, diverge_at=5, noise=1e-5)
    c = loss_stream(30, diverge_at=20)
    report = make_report([a, b, a, c, b])
    text = render(report, 110)
    check_golden("five_runs", text)
    assert "Bit-identical groups: {1, 3}  {2, 5}  {4}" in text


def test_all_runs_identical_with_three_runs() -> None:
    text = render(make_report([loss_stream(10)] * 3), 100)
    assert "All 3 runs are bit-identical." in text


# ---- the sparkline -----------------------------------------------------------------------------
def test_sparkline_is_log_scaled_and_tells_equal_from_tiny() -> None:
    points = [(1, 0.0), (2, 0.0), (3, 1e-9), (4, 1e-6), (5, 1e-3), (6, float("nan"))]
    assert Sparkline(points).cells(80) == "··▁▅█!"  # 1e-6 is half way between, in logs


def test_sparkline_merges_points_by_max_into_the_width() -> None:
    points = [(s, 0.0) for s in range(1, 101)] + [(101, 1e-3)] + [(s, 1e-6) for s in range(102, 201)]
    cells = Sparkline(points).cells(20)
    assert len(cells) == 20
    assert cells[:10] == "·" * 10 and cells[10] == "█" and set(cells[11:]) == {"▁"}


# ---- progress ----------------------------------------------------------------------------------
def _drive(progress: Progress, steps: int, expected: int | None = None, finish: bool = False) -> None:
    progress.run_started(1)
    if expected is not None:
        progress.event(1, record_of({"info": {"expected_steps": expected}}))
    for s in range(1, steps + 1):
        progress.event(1, record_of({"step": s, "signals": {}}))
    if finish:
        progress.run_finished(RunResult(1, status="completed", steps=steps, seconds=2.0))
    progress.close()


def terminal(**kw: object) -> tuple[Console, StringIO]:
    buf = StringIO()
    return Console(file=buf, width=100, force_terminal=True, color_system=None, **kw), buf


def test_live_bar_shows_steps_of_the_expected_total() -> None:
    console, buf = terminal()
    _drive(Progress(2, console=console), 10, expected=157)
    out = buf.getvalue()
    assert "run 1/2" in out and "10/157" in out and "waiting" in out  # run 2 not started yet


def test_live_bar_total_is_capped_by_max_steps() -> None:
    console, buf = terminal()
    _drive(Progress(2, console=console, max_steps=5), 3, expected=157)
    assert "3/5" in buf.getvalue()


def test_live_bar_without_a_known_length_counts_steps() -> None:
    console, buf = terminal()
    _drive(Progress(2, console=console), 7)
    assert "7 steps" in buf.getvalue() and "7/" not in buf.getvalue()


def test_live_bar_ends_full_with_the_status() -> None:
    console, buf = terminal()
    _drive(Progress(2, console=console), 40, expected=157, finish=True)
    last = buf.getvalue().split("run 1/2")[-1]
    assert "40/40" in last and "completed" in last


def test_not_a_terminal_one_line_per_start_and_end() -> None:
    buf = StringIO()
    _drive(Progress(2, console=Console(file=buf, width=100)), 40, expected=40, finish=True)
    assert buf.getvalue() == "run 1/2 started\nrun 1/2 completed: 40 steps in 2.0 s\n"


def test_quiet_prints_nothing_even_at_a_terminal() -> None:
    console, buf = terminal()
    _drive(Progress(2, console=console, quiet=True), 40, expected=40, finish=True)
    assert buf.getvalue() == ""


def _colour_codes(text: str) -> list[str]:
    """SGR parameters that set a foreground or background colour."""
    codes = []
    for params in re.findall(r"\x1b\[([0-9;]*)m", text):
        codes += [p for p in params.split(";") if p and (30 <= int(p) <= 49 or 90 <= int(p) <= 107)]
    return codes


@pytest.mark.parametrize("no_color", [False, True])
def test_no_color_honoured(no_color: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    buf = StringIO()
    console = make_console(file=buf, width=100, force_terminal=True)
    _drive(Progress(2, console=console), 40, expected=40, finish=True)
    report = make_report([loss_stream(20), loss_stream(20, diverge_at=5)])
    print_summary(report, console)
    assert bool(_colour_codes(buf.getvalue())) is not no_color


def test_steps_that_differ_only_in_their_gradients_say_so_and_are_not_counted_twice() -> None:
    """A 6-step run whose gradients differ from step 1: the loss rows agree and are not marked
    ≠, "differs in" names grads, and no "later steps differ" line repeats the rows shown."""
    cmp = Comparison(2)
    for k in (1, 2):
        for s in range(1, 7):
            cmp.add_step(k, s, {"loss": values.encode(np.float32(1.0 / s)),
                                "grads": f"{k}{s}" * 8})
        cmp.end(k, 6)
    report = Report(target="ddp:main", args=[], seed=1, components=list(COMPONENTS), runs=2,
                    results=[RunResult(k, status="completed", steps=6) for k in (1, 2)],
                    comparison=cmp.result(), threads=1)
    text = render(report, 100)
    rows = [line.split() for line in text.splitlines() if re.match(r"^\s*[▶≠]?\s+\d+\s+\d", line)]
    assert [r[0] for r in rows] == ["▶", "2", "3", "4", "5", "6"]  # only the first is marked
    assert all(r[-1] == "grads" for r in rows)
    assert "later step(s)" not in text


def test_three_runs_name_the_signal_a_step_differs_in() -> None:
    """Three runs (an --across grid has as many) whose gradients differ in run 3 only: the spread
    rows agree on the loss, are not marked ≠, and say that they differ in grads."""
    cmp = Comparison(3)
    for k in (1, 2, 3):
        for s in range(1, 5):
            cmp.add_step(k, s, {"loss": values.encode(np.float32(1.0 / s)),
                                "grads": f"{k if k == 3 else 1}{s}" * 8})
        cmp.end(k, 4)
    report = Report(target="ddp:main", args=[], seed=1, components=list(COMPONENTS), runs=3,
                    results=[RunResult(k, status="completed", steps=4) for k in (1, 2, 3)],
                    comparison=cmp.result(), threads=1)
    text = render(report, 120)
    assert "differs in" in text
    rows = [line.split() for line in text.splitlines() if re.match(r"^\s*[▶≠]?\s+\d+\s+\d", line)]
    assert [r[0] for r in rows] == ["▶", "2", "3", "4"]
    assert all(r[-1] == "grads" for r in rows)
    assert [r.get("signal") for r in report.comparison.context_all] == ["grads"] * 4
