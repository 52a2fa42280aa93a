"""Terminal output: the summary on stdout, progress on stderr (rich; NO_COLOR honoured)."""

from __future__ import annotations

import os
import sys
from typing import IO, Any

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from . import values
from .report import Report
from .runner import RunResult


def make_console(file: IO[str] | None = None, stderr: bool = False, width: int | None = None) -> Console:
    """A console that honours NO_COLOR and falls back to plain text when not a terminal."""
    no_color = "NO_COLOR" in os.environ
    return Console(
        file=file,
        stderr=stderr,
        width=width,
        no_color=no_color,
        color_system=None if no_color else "auto",
        highlight=False,
        soft_wrap=False,
    )


def _value(v: Any) -> str:
    if isinstance(v, dict):
        return values.readable(v)
    if v is None:
        return "—"
    return str(v)[:24]


def _diff(d: float | None) -> str:
    return "—" if d is None else f"{d:.3g}"


def verdict(report: Report) -> Text:
    if report.interrupted:
        return Text("INTERRUPTED", style="bold yellow")
    if report.error is not None:
        return Text("TARGET FAILED", style="bold red")
    if report.reproducible:
        return Text("REPRODUCIBLE", style="bold green")
    return Text("NOT REPRODUCIBLE", style="bold red")


def summary(report: Report) -> Group:
    """The whole result as rich renderables."""
    parts: list[Any] = []
    head = Text.assemble(verdict(report), "  ", (report.target, "bold"))
    seed = "no seeding" if report.seed is None else f"seed {report.seed}"
    steps = ", ".join(str(r.steps) for r in report.results)
    cmp = report.comparison
    head.append(f"\n{seed} · {report.runs} runs · steps recorded {steps}"
                f" · {report.policy.describe()}")
    comps = ", ".join(
        f"threads={report.threads}" if c == "threads" and report.threads else c
        for c in report.components
    ) or "none"
    head.append(f"\nseeding: {comps}")
    parts.append(Panel(head, box=box.ROUNDED, expand=False))

    if report.error is not None:
        parts.append(Text(f"error: {report.error}", style="red"))
        for r in report.results:
            if r.failed:
                tail = _traceback_or_tail(r)
                if tail:
                    parts.append(Text(f"--- output of run {r.index} (last lines) ---", style="dim"))
                    parts.append(Text(tail))

    div = cmp.divergence if cmp else None
    if div is not None:
        where = f"step {div.step}" if div.step is not None else "final metrics"
        line = Text.assemble(("First divergence: ", "bold"), f"{where}, signal ", (div.signal, "bold"),
                             f", run {div.run} vs run 1")
        parts.append(line)
        if div.detail:
            parts.append(Text(f"  {div.detail}"))
        t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        t.add_column("")
        t.add_column("run 1", justify="right")
        t.add_column(f"run {div.run}", justify="right")
        t.add_column("|diff|", justify="right")
        t.add_column("rel", justify="right")
        t.add_row(div.signal, _value(div.reference), _value(div.value), _diff(div.abs_diff),
                  _diff(div.rel_diff))
        parts.append(t)
        if div.step is not None:
            parts.append(Text(f"  {div.later_steps} later step(s) differ too"))
    elif report.error is None and not report.interrupted and cmp is not None:
        parts.append(Text(f"All {cmp.steps_compared} steps and {len(cmp.metrics_of(1))} metric(s) "
                          "agree."))
    if report.cause is not None and report.cause != "none":
        detail = report.extra.get("cause_detail")
        parts.append(Text.assemble(("Cause: ", "bold"), (report.cause, "bold red"),
                                   f" — {detail}" if detail else ""))

    metrics = report.metrics_readable()
    names: list[str] = []
    for m in metrics:
        names += [n for n in m if n not in names]
    if names:
        t = Table(title="Metrics", box=box.SIMPLE_HEAD, title_justify="left", show_edge=False)
        t.add_column("metric")
        for k in range(1, report.runs + 1):
            t.add_column(f"run {k}", justify="right")
        for n in names:
            raw = [cmp.metrics_of(k).get(n) if cmp else None for k in range(1, report.runs + 1)]
            t.add_row(n, *[_value(v) for v in raw])
        parts.append(t)
    for w in report.warnings:
        parts.append(Text(f"warning: {w}", style="yellow"))
    if report.replay:
        parts.append(Text.assemble(("Replay: ", "bold"), report.replay))
    if report.trace_dir:
        parts.append(Text(f"traces: {report.trace_dir}", style="dim"))
    return Group(*parts)


def _traceback_or_tail(r: RunResult, lines: int = 30) -> str:
    if r.error and r.error.get("traceback"):
        return str(r.error["traceback"]).rstrip()
    return "\n".join(r.output_tail.rstrip().splitlines()[-lines:])


def print_summary(report: Report, console: Console | None = None) -> None:
    (console or make_console()).print(summary(report))


class Progress:
    """Per-run progress lines on stderr (a line when a run starts and when it ends)."""

    def __init__(self, runs: int, console: Console | None = None, quiet: bool = False) -> None:
        self.runs = runs
        self.console = console or make_console(stderr=True)
        self.quiet = quiet

    def run_started(self, index: int) -> None:
        if not self.quiet:
            self.console.print(f"run {index}/{self.runs} started", style="dim")

    def event(self, index: int, event: dict[str, Any]) -> None:
        pass

    def run_finished(self, result: RunResult) -> None:
        if not self.quiet:
            self.console.print(
                f"run {result.index}/{self.runs} {result.status}: {result.steps} steps in "
                f"{result.seconds:.1f} s", style="dim"
            )


def stdout_console() -> Console:
    return make_console(file=sys.stdout)
