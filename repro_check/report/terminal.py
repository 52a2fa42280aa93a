"""Terminal output: the summary on stdout, live progress on stderr (rich; NO_COLOR honoured)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import IO, Any

from rich import box
from rich import progress as rp
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.panel import Panel
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from repro_check.report.contents import DesyncRankValue
from repro_check.report.controlpart import control_parts
from repro_check.report.evidencepart import evidence_terminal
from repro_check.report.failedpart import failed_runs_parts
from repro_check.report.metricspart import MetricsView
from repro_check.report.model import Report
from repro_check.report.processes import processes_terminal
from repro_check.report.richkit import hanging
from repro_check.report.savedpart import saved_parts
from repro_check.report.view import FOCUS, bit_identical_groups, context_view, later_line
from repro_check.report.text import (
    Visible,
    agreement,
    diff_text,
    divergence_place,
    failure_output,
    value_text,
    verdict_style,
)
from repro_check.trace import signals
from repro_check.trace.protocol import ExpectedStepsInfo, Record, StepRecord
from repro_check.trace.results import RunResult


def make_console(file: IO[str] | None = None, stderr: bool = False, width: int | None = None,
                 force_terminal: bool | None = None) -> Console:
    """A console that honours NO_COLOR and falls back to plain text when not a terminal."""
    no_color = "NO_COLOR" in os.environ
    return Console(
        file=file,
        stderr=stderr,
        width=width,
        force_terminal=force_terminal,
        no_color=no_color,
        color_system=None if no_color else "auto",
        highlight=False,
        soft_wrap=False,
    )


def verdict(report: Report) -> Text:
    """The report's verdict as the headline shows it."""
    return Text(report.verdict.label, style=verdict_style(report))


#: run columns shown side by side at most (the spread column covers the rest)
MAX_RUN_COLUMNS = 6
SPARK_LEVELS = "▁▂▃▄▅▆▇█"
SPARK_EQUAL = "·"
SPARK_UNDEFINED = "!"


class Sparkline:
    """One line of block characters: a value series on a log scale, as wide as the console allows.

    Points merge (by max) into the cells available; a cell whose values are all 0 is drawn as
    ``·`` and one with NaN as ``!``, so "equal" and "tiny difference" look different.
    """

    def __init__(self, points: Sequence[tuple[int, float]], max_cells: int = 80) -> None:
        self.points = list(points)
        self.max_cells = max_cells

    def scale(self) -> tuple[float, float] | None:
        pos = [v for _, v in self.points if v > 0 and not math.isinf(v)]
        return (min(pos), max(pos)) if pos else None

    def cells(self, width: int) -> str:
        n = max(1, min(width, self.max_cells, len(self.points)))
        merged: list[float | None] = [None] * n
        for i, (_, point) in enumerate(self.points):
            c = i * n // len(self.points)
            cur = merged[c]
            if cur is None or math.isnan(point) or (not math.isnan(cur) and point > cur):
                merged[c] = point
        rng = self.scale()
        out = []
        for v in merged:
            if v is None or math.isnan(v):
                out.append(SPARK_UNDEFINED)
            elif v <= 0:
                out.append(SPARK_EQUAL)
            elif rng is None or math.isinf(v) or rng[0] == rng[1]:
                out.append(SPARK_LEVELS[-1])
            else:
                lo, hi = math.log10(rng[0]), math.log10(rng[1])
                k = round((math.log10(v) - lo) / (hi - lo) * (len(SPARK_LEVELS) - 1))
                out.append(SPARK_LEVELS[k])
        return "".join(out)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if not self.points:
            return
        first, last = f"step {self.points[0][0]} ", f" step {self.points[-1][0]}"
        width = options.max_width - len(first) - len(last) - 2
        line = Text("  " + first, style="dim")
        line.append(self.cells(width), style="magenta")
        line.append(last, style="dim")
        yield line


def _context_table(report: Report) -> Table | None:
    """The steps around the first divergence, each run's value side by side."""
    view = context_view(report)
    if view is None:
        return None
    t = Table(title=f"Steps around the first divergence ({FOCUS})", title_justify="left",
              box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    t.add_column("", width=1)
    t.add_column("step", justify="right")
    shown = min(len(view.runs), MAX_RUN_COLUMNS)
    for k in view.runs[:shown]:
        t.add_column(f"run {k}", justify="right")
    if not view.spread:
        t.add_column("|diff|", justify="right")
    else:
        t.add_column("spread" if shown == report.runs else f"spread ({report.runs} runs)",
                     justify="right")
    if view.other_signal:  # a step can differ in a signal other than the loss: say which
        t.add_column("differs in")
    for row in view.rows:
        # ▶ is the first divergent step (whichever signal parted there); ≠ a step whose losses
        # differ: a grads divergence leaves equal losses unmarked
        mark, style = "", None
        if row.first:
            mark, style = "▶", "bold red" if row.differs else "bold"
        elif row.differs:
            mark, style = "≠", "red"
        extra = [row.signal if row.signal and row.signal != FOCUS else ""] \
            if view.other_signal else []
        t.add_row(mark, str(row.step), *[value_text(v) for v in row.values[:shown]],
                  diff_text(row.diff), *extra, style=style)
    return t


def _difference_line(report: Report) -> list[Any]:
    """A caption and a sparkline of the difference (two runs) or spread (more) over all steps."""
    cmp = report.comparison
    if cmp is None:
        return []
    if report.runs >= 3:
        series, what = cmp.spread_series, f"Spread of loss across {report.runs} runs per step"
    else:
        series, what = cmp.diff_series, "|diff| of loss per step"
    spark = Sparkline(series)
    rng = spark.scale()
    if rng is None:
        return []
    caption = Text(what, style="bold")
    caption.append(f" (log scale {SPARK_LEVELS[0]} {rng[0]:.2g} … {SPARK_LEVELS[-1]} {rng[1]:.2g},"
                   f" {SPARK_EQUAL} equal)", style="dim")
    return [caption, spark]


def _groups_line(report: Report) -> Text | None:
    groups = bit_identical_groups(report)
    if groups is None:
        return None
    if len(groups) == 1:
        return Text(f"All {report.runs} runs are bit-identical.")
    line = Text("Bit-identical groups: ", style="bold")
    line.append("  ".join("{" + ", ".join(map(str, g)) + "}" for g in groups))
    return line


class Unwrapped:
    """A line printed whole, never wrapped or cropped (a command the user copies)."""

    def __init__(self, text: str, style: str = "none") -> None:
        self.text = text.replace("\n", " ")
        self.style = style

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Segment(self.text, console.get_style(self.style))
        yield Segment.line()


def summary(report: Report) -> Group:
    """The whole result as rich renderables (print with ``crop=False``: see :func:`print_summary`)."""
    parts: list[Any] = [_head_panel(report), *failure_parts(report)]
    if report.distributed is not None:
        parts += rank_parts(report)
    parts += _outcome_parts(report)
    parts += saved_parts(report)
    parts += _difference_line(report)
    groups = _groups_line(report)
    if groups is not None:
        parts.append(groups)
    if report.cause is not None and report.cause != "none":  # a diagnosis does not repeat it
        detail = report.cause_detail
        parts.append(hanging(Text("Cause: ", style="bold"),
                             Text.assemble((report.cause, "bold red"),
                                           f" — {detail}" if detail else "")))
    parts += _metrics_table(report)
    parts += footer_parts(report)
    return Group(*parts)


def _head_panel(report: Report) -> Panel:
    """The verdict, the target, and how the runs were made."""
    head = Text.assemble(verdict(report), "  ", (report.target, "bold"))
    head.append(evidence_terminal(report))
    seed = "no seeding" if report.seed is None else f"seed {report.seed}"
    steps = ", ".join(str(r.steps) for r in report.results)
    head.append(f"\n{seed} · {report.runs} runs · steps recorded {steps}"
                f" · {report.policy.describe()}")
    comps = ", ".join(
        f"threads={report.threads}" if c == "threads" and report.threads else c
        for c in report.components
    ) or "none"
    head.append(f"\nseeding: {comps}")
    dist = report.distributed
    if dist is not None:
        head.append(f"\ntorchrun: {len(dist.ranks)} ranks a run ({dist.launch.nproc_per_node}"
                    f" per node, {dist.launch.nnodes} node(s))")
    head.append(processes_terminal(report))
    return Panel(head, box=box.ROUNDED, expand=False, border_style=verdict_style(report))


def failure_parts(report: Report, label: Callable[[RunResult], str] | None = None) -> list[Any]:
    """The error and what each failed run left to read (its traceback or last lines)."""
    if report.error is None:
        return []
    parts: list[Any] = [Text(f"error: {report.error}", style="red")]
    parts += failed_runs_parts(report, label)
    for r in report.results:
        tail = failure_output(r) if r.failed else ""
        if tail:
            name = label(r) if label else f"run {r.index}"
            parts.append(Text(f"--- output of {name} (last lines) ---", style="dim"))
            parts.append(Text(tail))
    return parts


def _outcome_parts(report: Report) -> list[Any]:
    """The first divergence in detail, or what agreed (nothing when the target failed)."""
    cmp = report.verdict_comparison
    div = cmp.divergence if cmp else None
    if div is not None and div.signal != "rank_desync":  # a desync is shown by rank_parts
        return _divergence_parts(report, div)
    if report.runs == 1 and report.error is None and not report.interrupted:
        return [Text(f"One run recorded ({report.results[0].steps} steps): nothing to compare.")]
    if div is None and report.error is None and not report.interrupted and cmp is not None:
        return [Text(agreement(cmp, report.results))]
    if report.interrupted:
        compared = cmp.steps_compared if cmp else 0
        return [Text(f"Interrupted: the runs were stopped; the {compared} step(s) compared "
                     "so far agree (kept in the traces).", style="yellow")]
    return []


def _divergence_parts(report: Report, div: Any) -> list[Any]:
    where = divergence_place(div)
    cmp = report.comparison
    left = signals.is_saved(div.signal) or signals.is_state(div.signal)
    head: list[Any] = []
    if left and cmp is not None:
        # every step agrees: what the runs left differs, never hidden behind the steps
        head = [Text.assemble(
            (f"All {cmp.steps_compared} steps agree, but what the runs left differs."
             if cmp.steps_compared else "What the runs left differs.", "bold"))]
    elif div.step is None and div.signal.startswith("metric:") and cmp is not None:
        # not a training divergence: say so before anything else
        names = list(dict.fromkeys(d.signal.removeprefix("metric:")
                                   for d in cmp.metric_divergences))
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        if cmp.steps_compared:
            head = [Text.assemble(
                (f"All {cmp.steps_compared} steps agree: the training is reproducible. ", "bold"),
                "Only final metrics differ: ", (shown, "bold"), ".")]
        else:  # nothing of the training was seen: no claim about it
            head = [Text.assemble(("No training step was seen: ", "bold"),
                                  "only final metrics were compared, and they differ: ",
                                  (shown, "bold"), ".")]
    line = Text.assemble(("First divergence: ", "bold"), f"{where}, signal ", (div.signal, "bold"),
                         f", run {div.run} vs run 1")
    if div.rank is not None:
        line.append(f", rank {div.rank}")
    if div.process is not None:
        line.append(f", {div.where}")
    parts: list[Any] = [*head, line]
    if div.detail:
        parts.append(Text(f"  {div.detail}"))
    if div.policy and div.policy != "exact bits":  # the panel already says exact bits
        parts.append(Text(f"  judged by {div.policy}"))
    context = _context_table(report)
    if left:
        pass  # fingerprints of a saved tensor say nothing more than the line above
    elif context is None or div.signal != "loss":
        t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        t.add_column("")
        t.add_column("run 1", justify="right")
        t.add_column(f"run {div.run}", justify="right")
        t.add_column("|diff|", justify="right")
        t.add_column("rel", justify="right")
        t.add_row(div.signal, value_text(div.reference), value_text(div.value),
                  diff_text(div.abs_diff), diff_text(div.rel_diff))
        parts.append(t)
    elif div.abs_diff is not None:
        parts.append(Text(f"  |diff| {diff_text(div.abs_diff)}, relative {diff_text(div.rel_diff)}"))
    if context is not None:
        parts.append(context)
    later = later_line(report, div)
    if later:
        parts.append(Text(f"  {later}"))
    if report.comparison is not None and not report.comparison.metrics_compared:
        parts.append(Text("  no metric was compared", style="dim"))
    if report.distributed is not None:
        parts += rank_value_parts(report)
    return parts


def _metrics_table(report: Report) -> list[Any]:
    view = MetricsView.of(report)
    return [] if view is None else view.terminal([f"run {k}" for k in view.runs])


def footer_parts(report: Report) -> list[Any]:
    """The negative control, warnings, the replay line (never wrapped: it must paste back as one
    command) and where the traces are."""
    parts: list[Any] = control_parts(report)
    parts += [Text(f"warning: {w}", style="yellow") for w in report.warnings]
    if report.replay:
        parts.append(Text("Replay:", style="bold"))
        parts.append(Unwrapped(report.replay))
    if report.trace_dir:  # a path is never wrapped: it must paste back whole
        parts.append(Unwrapped(f"traces: {report.trace_dir}", style="dim"))
    return parts


def rank_parts(report: Report) -> list[Any]:
    """A distributed check: the cross-rank parameter check (or its desync)."""
    dist = report.distributed
    assert dist is not None, "a distributed report"
    desync = dist.rank_desync
    if desync is None:
        steps = dist.cross_rank_steps
        if not dist.ddp_model_seen:
            return [Text("Cross-rank check: no DistributedDataParallel model seen, not checked",
                         style="dim")]
        if dist.nproc_per_node < 2:
            return [Text("Cross-rank check: one rank on this node, nothing to compare it with",
                         style="dim")]
        return [Text(f"Cross-rank check: the ranks' parameters agree at all {steps} steps.")]
    runs = ", ".join(map(str, desync.runs or [desync.run]))
    out: list[Any] = [
        Text.assemble(("Rank desync: ", "bold red"), f"step {desync.step}, run(s) {runs}: rank(s) ",
                      (", ".join(map(str, desync.ranks)), "bold"),
                      f" hold different parameters than rank {desync.groups[0][0]} "
                      "after the optimizer step"),
    ]
    if len(desync.fingerprints) > 2:
        groups = " | ".join(", ".join(map(str, g)) for g in desync.groups)
        out.append(Text(f"  ranks that agree: {groups}"))
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    t.add_column("rank", justify="right")
    t.add_column(f"params after step {desync.step} (run {desync.run})")
    for rank, fp in desync.fingerprints.items():
        t.add_row(rank, fp)
    out.append(t)
    return out


def rank_value_parts(report: Report) -> list[Any]:
    """Every rank's value where the first divergence is."""
    rows = report.distributed.rank_values if report.distributed else []
    div = report.comparison.divergence if report.comparison else None
    if not rows or div is None:
        return []
    t = Table(title="Per rank", box=box.SIMPLE_HEAD, title_justify="left", show_edge=False)
    t.add_column("rank", justify="right")
    t.add_column("run 1", justify="right")
    t.add_column(f"run {div.run}", justify="right")
    t.add_column("")
    for row in rows:
        # a desync's rows are fingerprints, shown by the desync's own table
        reference, value = (None, None) if isinstance(row, DesyncRankValue) else \
            (row.reference, row.value)
        t.add_row(str(row.rank), value_text(reference), value_text(value),
                  "differs" if row.differs else "")
    return [t]



def print_summary(report: Report, console: Console | None = None) -> None:
    """Print the summary; not cropped, so the replay command stays one line however long."""
    (console or make_console()).print(Visible(summary(report)), crop=False)


class _StepsColumn(rp.ProgressColumn):
    """"12/157" when the total is known, "12 steps" when not."""

    def render(self, task: rp.Task) -> Text:
        done = int(task.completed)
        if task.total is None:
            return Text(f"{done} steps", style="progress.download")
        return Text(f"{done}/{int(task.total)}", style="progress.download")


class _RateColumn(rp.ProgressColumn):
    def render(self, task: rp.Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:.1f} steps/s", style="progress.data.speed")


class _LeftColumn(rp.ProgressColumn):
    """Time left when the total is known and the run is going; its status otherwise."""

    max_refresh = 0.5

    def render(self, task: rp.Task) -> Text:
        status = task.fields.get("status", "")
        if status != "running":
            return Text(status, style="progress.remaining" if status == "waiting" else
                        ("green" if status in _GOOD_END else "red"))
        left = task.time_remaining
        if task.total is None or left is None:
            return Text("running", style="progress.remaining")
        return Text(f"{int(left) // 60}:{int(left) % 60:02d} left", style="progress.remaining")


_GOOD_END = ("completed", "stopped", "exited")


class Progress:
    """Progress of the runs on stderr.

    At a terminal: a live bar per run with steps done of the expected total (from the target's
    DataLoader length or ``--max-steps``), rate and time left. Elsewhere (a CI log, a pipe): a
    line when a run starts and when it ends. Nothing with ``quiet``. Use as a context manager, or
    call :meth:`close`, so the live display is gone before the summary is printed.
    """

    def __init__(self, runs: int, console: Console | None = None, quiet: bool = False,
                 max_steps: int | None = None) -> None:
        self.runs = runs
        self.console = console or make_console(stderr=True)
        self.quiet = quiet
        self.max_steps = max_steps
        self.live = not quiet and self.console.is_terminal
        self._bars: rp.Progress | None = None
        self._tasks: dict[int, rp.TaskID] = {}
        self._total: dict[int, int | None] = dict.fromkeys(range(1, runs + 1), max_steps)
        self._done: dict[int, int] = {}

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ensure(self) -> rp.Progress:
        if self._bars is None:
            self._bars = rp.Progress(
                rp.TextColumn("{task.description}"),
                rp.BarColumn(bar_width=30),
                _StepsColumn(),
                _RateColumn(),
                _LeftColumn(),
                console=self.console,
                redirect_stdout=False,
                redirect_stderr=False,
                refresh_per_second=8,
            )
            for k in range(1, self.runs + 1):
                self._tasks[k] = self._bars.add_task(f"run {k}/{self.runs}", total=self.max_steps,
                                                     start=False, status="waiting")
            self._bars.start()
        return self._bars

    def run_started(self, index: int) -> None:
        if self.live:
            bars = self._ensure()
            bars.start_task(self._tasks[index])
            bars.update(self._tasks[index], status="running")
        elif not self.quiet:
            self.console.print(f"run {index}/{self.runs} started", style="dim")

    def event(self, index: int, event: Record) -> None:
        if not self.live or self._bars is None:
            return
        if isinstance(event, StepRecord):
            step = event.step
            self._done[index] = step
            total = self._total.get(index)
            if total is not None and total < step:  # the expectation was short (e.g. one epoch)
                self._total[index] = total = step
            self._bars.update(self._tasks[index], completed=step, total=total)
        elif isinstance(event, ExpectedStepsInfo):
            total = event.total
            if self.max_steps is not None:
                total = min(total, self.max_steps)
            self._total[index] = total = max(total, self._done.get(index, 0))
            self._bars.update(self._tasks[index], total=total)

    def run_finished(self, result: RunResult) -> None:
        steps = result.steps + sum(p.steps for p in result.processes)
        if self.live:
            bars = self._ensure()
            task_id = self._tasks[result.index]
            bars.start_task(task_id)  # no-op when it has started
            bars.update(task_id, completed=steps, total=steps or None, status=result.status)
            bars.stop_task(task_id)
        elif not self.quiet:
            self.console.print(
                f"run {result.index}/{self.runs} {result.status}: {steps} steps in "
                f"{result.seconds:.1f} s", style="dim"
            )

    def close(self) -> None:
        """Stop the live display (its last state stays on the terminal)."""
        if self._bars is not None:
            self._bars.stop()
            self._bars = None
