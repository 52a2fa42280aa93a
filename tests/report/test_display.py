"""What the terminal marks and what it never wraps: rows whose losses differ, the metric that
differs (marked by the same rule on the page), paths and the replay line at 80 columns."""

from __future__ import annotations

import re
from io import StringIO

import numpy as np
from rich.console import Console

from repro_check.trace.seeding import COMPONENTS
from repro_check.compare.steps import Comparison, Policy
from repro_check.report.metricspart import MetricsView
from repro_check.report.model import Report
from repro_check.report.render import summary
from repro_check.run.runner import RunResult
from repro_check.trace import values
from repro_check.trace.values import Tolerance


def f32(x: float) -> dict:
    return values.encode(np.float32(x))


def report_of(cmp: Comparison, runs: int = 2, steps: int = 6, trace_dir: str | None = None) -> Report:
    return Report(target="train:main", args=[], seed=1, components=list(COMPONENTS), runs=runs,
                  results=[RunResult(k, status="completed", steps=steps) for k in range(1, runs + 1)],
                  comparison=cmp.result(), threads=1, trace_dir=trace_dir)


def render(report: Report, width: int = 80) -> str:
    buf = StringIO()
    Console(file=buf, width=width, color_system=None, highlight=False).print(summary(report),
                                                                             crop=False)
    return buf.getvalue()


def row(out: str, step: int) -> list[str]:
    """The cells of the context table's row for ``step``."""
    for line in out.splitlines():
        cells = line.split()
        if cells and (cells[0] == str(step) or cells[1:2] == [str(step)]) and len(cells) >= 3:
            return cells
    raise AssertionError(f"no row for step {step}:\n{out}")


def test_a_grads_divergence_marks_only_the_rows_whose_losses_differ() -> None:
    cmp = Comparison(2)
    for k in (1, 2):
        for s in range(1, 7):
            loss = 1.0 / s if k == 1 or s < 4 else 1.0 / s + 0.25  # losses part at step 4
            grads = "g0" if k == 1 or s < 2 else "g1"  # gradients part at step 2
            cmp.add_step(k, s, {"loss": f32(loss), "grads": f"xxh3:{grads}"})
        cmp.end(k, 6)
    out = render(report_of(cmp))
    assert "First divergence: step 2, signal grads" in out
    assert row(out, 2)[0] == "▶"  # the step where it parted, though its losses agree
    assert row(out, 3)[0] == "3"  # equal losses: no mark
    assert row(out, 4)[0] == "≠"  # the losses differ from here


def test_the_metric_that_differs_is_marked() -> None:
    cmp = Comparison(2)
    for k in (1, 2):
        cmp.add_step(k, 1, {"loss": f32(1.0)})
        cmp.end(k, 1)
        cmp.set_metrics(k, {"accuracy": f32(0.9 if k == 1 else 0.8), "loss": f32(0.5)})
    out = render(report_of(cmp, steps=1))
    table = out.split("Metrics")[1].splitlines()
    acc = next(line for line in table if "accuracy" in line)
    same = next(line for line in table if "loss" in line)
    assert acc.split()[:2] == ["≠", "accuracy"] and same.split()[:1] == ["loss"]


def test_the_terminal_and_the_page_mark_the_metrics_the_comparison_judged_to_differ() -> None:
    """A metric a tolerance accepts and a timing figure left out of the comparison differ in
    their bits, yet neither is a difference to the verdict: neither output marks them."""
    cmp = Comparison(2, Policy(per_name={"metric:loss": Tolerance(atol=0.1)}))
    for k in (1, 2):
        cmp.add_step(k, 1, {"loss": f32(1.0)})
        cmp.end(k, 1)
        cmp.set_metrics(k, {"accuracy": f32(0.9 if k == 1 else 0.8),
                            "loss": f32(0.5 if k == 1 else 0.51),
                            "epoch_time": f32(10.0 + k)})
    report = report_of(cmp, steps=1)
    table = render(report).split("Metrics")[1].splitlines()
    marked = {line.split()[1] for line in table if line.split()[:1] == ["≠"]}
    assert marked == {"accuracy"}
    view = MetricsView.of(report)
    assert view is not None
    page = view.html(["run 1", "run 2"])[1]
    rows = {name: cls for cls, name in re.findall(r'<tr(?: class="(\w+)")?><td>([^<]+)</td>',
                                                  page)}
    assert rows == {"accuracy": "differs", "loss": "", "epoch_time": ""}, page


def test_paths_and_the_replay_line_are_never_wrapped_at_80_columns() -> None:
    cmp = Comparison(2)
    for k in (1, 2):
        cmp.add_step(k, 1, {"loss": f32(1.0 + k)})
        cmp.end(k, 1)
    folder = "/very/long/" + "/".join(f"folder-{i:02d}" for i in range(12)) + "/run"
    report = report_of(cmp, steps=1, trace_dir=folder)
    report.replay = "repro-check train:main --seed 1 --max-steps 1 -- " + " ".join(
        f"--option-{i} value-{i}" for i in range(10))
    out = render(report).splitlines()
    assert f"traces: {folder}" in out
    assert report.replay in out


def test_a_crash_shows_its_line_and_stack_without_the_extension_module_list() -> None:
    from repro_check.report.text import failure_output
    from repro_check.run.runner import RunResult

    names = ", ".join(f"pkg{i}._ext" for i in range(31))
    tail = ("about to crash\nFatal Python error: Segmentation fault\n\n"
            "Current thread 0x00007fab48860b80 (most recent call first):\n"
            '  File "/x/ctypes/__init__.py", line 519 in string_at\n'
            '  File "/home/u/crash.py", line 29 in main\n\n'
            f"Extension modules: {names} (total: 31)\n")
    shown = failure_output(RunResult(1, status="failed", output_tail=tail))
    assert "Fatal Python error: Segmentation fault" in shown
    assert 'crash.py", line 29 in main' in shown and shown.endswith("in main")
    assert "Extension modules" not in shown and "pkg30" not in shown


def test_a_sys_exit_shows_what_the_script_said_not_the_traceback_of_its_system_exit() -> None:
    """A script whose argparse rejects its arguments (a resume's --resume-args, say): its usage
    and error lines, as Python shows them; a sys.exit with nothing said: its traceback."""
    from repro_check.report.text import failure_output
    from repro_check.run.runner import RunResult

    tb = ("Traceback (most recent call last):\n  File \"/u/train.py\", line 13, in <module>\n"
          "    a = p.parse_args()\nSystemExit: 2\n")
    said = "usage: train.py [-h] [--resume RESUME]\ntrain.py: error: unrecognized arguments: --x\n"
    error = {"kind": "exit", "message": "the target called sys.exit(2)", "traceback": tb}
    shown = failure_output(RunResult(3, status="failed", error=error, output_tail=said + tb))
    assert shown == said.rstrip()
    quiet = failure_output(RunResult(3, status="failed", error=error, output_tail=tb))
    assert quiet == tb.rstrip()


def test_a_run_that_called_sys_exit_is_said_to_have_done_so_not_by_the_runs_own_status() -> None:
    """The run's process ends with a status of repro-check's own when the target calls
    sys.exit(N); how it failed is the target's N."""
    from repro_check.report.failedpart import how_it_failed
    from repro_check.run.runner import RunResult

    error = {"kind": "exit", "message": "the target called sys.exit(2)", "traceback": ""}
    assert how_it_failed(RunResult(1, status="failed", returncode=98, error=error)) == \
        "called sys.exit(2)"
    assert how_it_failed(RunResult(1, status="failed", returncode=3)) == "exited with status 3"
