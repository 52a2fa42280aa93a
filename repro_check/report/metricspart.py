"""Every run's final metrics, in every output, from one view of them: the terminal's table
(a check's runs, or a gate's two sides; the differing rows first when there are too many) and
the HTML page's table. Which runs, which values and which metrics differ (those the comparison
judged to differ, what the verdict rests on) are read here once; each output only formats them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from repro_check.compare.steps import ComparisonResult
from repro_check.report.htmlkit import table, value_cell
from repro_check.report.model import Report
from repro_check.report.text import value_text

#: metric rows a summary shows: all of them up to this many, else the differing ones (as many)
METRIC_ROWS = 20


def metric_rows(names: dict[str, None], differing: set[str]) -> tuple[list[str], Text | None]:
    """The metrics a summary's table shows, and the line that counts the rest: a run may record
    thousands, and the JSON report lists every one. Linear in the number of metrics."""
    if len(names) <= METRIC_ROWS:
        return list(names), None
    shown = [n for n in names if n in differing][:METRIC_ROWS]
    more = f"; the first {len(shown)} shown" if len(differing) > len(shown) else ""
    return shown, Text(f"{len(names)} metrics compared, {len(differing)} differ{more} (every one "
                       "is in the --json report)", style="dim")


@dataclass(frozen=True)
class MetricsView:
    """The metrics of ``runs`` side by side: every name any of them recorded (in order), each
    run's encoded value, those the comparison judged to differ, and those it left out."""

    cmp: ComparisonResult
    runs: list[int]
    #: in order, merged in linear time (a run may log thousands)
    names: dict[str, None]
    differing: set[str]
    #: not compared (timing or memory figures); empty where the table does not say so
    skipped: set[str]

    @classmethod
    def of(cls, report: Report, runs: list[int] | None = None,
           judged: ComparisonResult | None = None, say_skipped: bool = True) -> MetricsView | None:
        """The metrics of ``runs`` (every run when None); ``judged``: the comparison whose
        metric divergences mark rows (the report's verdict comparison when None: a failed run's
        missing metric is no difference). None when no run recorded a metric."""
        cmp = report.comparison
        if cmp is None:
            return None
        runs = runs or list(range(1, report.runs + 1))
        names: dict[str, None] = {}
        for k in runs:
            names.update(dict.fromkeys(cmp.metrics_of(k)))
        if not names:
            return None
        judged = judged if judged is not None else report.verdict_comparison
        differing = {d.signal.removeprefix("metric:")
                     for d in (judged.metric_divergences if judged else [])}
        return cls(cmp, runs, names, differing,
                   set(cmp.metrics_skipped) if say_skipped else set())

    def values(self, name: str) -> list[Any]:
        """Each run's encoded value of ``name`` (None: not recorded)."""
        return [self.cmp.metrics_of(k).get(name) for k in self.runs]

    def label(self, name: str) -> str:
        return f"{name} (not compared)" if name in self.skipped else name

    def terminal(self, heads: list[str]) -> list[Any]:
        """The summary's table (``heads``: each run's column), and the line counting the rows
        left out."""
        shown, note = metric_rows(self.names, self.differing)
        t = Table(title="Metrics", box=box.SIMPLE_HEAD, title_justify="left", show_edge=False)
        if self.differing:
            t.add_column("", width=1)
        t.add_column("metric")
        for head in heads:
            t.add_column(head, justify="right")
        for n in shown:
            mark = ["≠" if n in self.differing else ""] if self.differing else []
            t.add_row(*mark, self.label(n), *[value_text(v) for v in self.values(n)],
                      style="red" if n in self.differing else None)
        return [t] if note is None else ([t, note] if shown else [note])

    def html(self, heads: list[str]) -> list[str]:
        """The page's section: every metric, a row marked where the comparison judged it to
        differ, as the terminal's (not where the bits differ: a value a tolerance accepts, or a
        timing figure left out of the comparison, is no difference to the verdict)."""
        rows = [([n, *map(value_cell, self.values(n))], "differs" if n in self.differing else "")
                for n in self.names]
        return ["<h2>Metrics</h2>", table(["metric", *heads], rows)]
