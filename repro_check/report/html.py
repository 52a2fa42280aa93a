"""The HTML report: one self-contained file (plots embedded as PNG data) that needs no network.

It shows the verdict, every run's loss curve overlaid with the first divergence marked, the
difference per step on a log scale, the steps around the divergence side by side, the groups of
bit-identical runs, the metrics, the diagnosis when there is one, each run's environment and the
replay command. Loss curves are read back from the run traces, streaming and thinned to a bounded
number of points, so a long run makes a report of the same size. Plots need matplotlib (the
``report`` extra); :func:`require_matplotlib` says so in one line before any run starts.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from collections.abc import Sequence
from typing import Any

from repro_check.version import __version__
from repro_check.trace.atomic import write_text_atomic
from repro_check.errors import TraceFileError
from repro_check.report.htmlkit import (FIG_H, FIG_W, MARKER_COLOR, RUN_COLORS, difference_plot,
                                        escape, loss_plot, number, read_curve,
                                        require_matplotlib, resume_plot, table, value_cell)
from repro_check.report import bisect, diagnosis
from repro_check.report.controlpart import control_section
from repro_check.report.evidencepart import evidence_html
from repro_check.report.failedpart import failed_runs_section
from repro_check.report.kinds import kind_of
from repro_check.report.metricspart import MetricsView
from repro_check.report.model import Report
from repro_check.report.part import PageSections
from repro_check.report.savedpart import saved_section
from repro_check.report.view import bit_identical_groups, context_view, later_line
from repro_check.report.text import agreement, divergence_place, is_number, signal_sentence

#: what tests and callers read from here (the page's pieces are in htmlkit)
__all__ = ["MARKER_COLOR", "RUN_COLORS", "read_curve", "render_html", "require_matplotlib",
           "resume_plot", "loss_plot", "difference_plot", "write_html"]


# ---- page ----------------------------------------------------------------------------------------
def _name(report: Report, index: int) -> str:
    """What run ``index`` is called: its environment with ``--across``, the golden and this run
    with ``verify``, A and B with ``diff`` (as its kind calls it)."""
    return kind_of(report).run_name(report, index)


def _verdict(report: Report) -> tuple[str, str]:
    return report.verdict.label, report.verdict.tone


def _context_rows(report: Report) -> tuple[list[str], list[tuple[list[Any], str]]]:
    """The steps around the first divergence. A row is marked only where its values differ
    (the first divergent step is highlighted whatever differed there); a step that differs in
    another signal (its gradients, say) says which in "differs in"."""
    view = context_view(report)
    if view is None:
        return [], []
    head = ["step", *[_name(report, k) for k in view.runs], "spread" if view.spread else "|diff|"]
    if view.other_signal:
        head.append("differs in")
    rows: list[tuple[list[Any], str]] = []
    for row in view.rows:
        cells = [row.step, *map(value_cell, row.values), number(row.diff)]
        if view.other_signal:
            cells.append(row.signal or "")
        rows.append((cells, "first" if row.first else "differs" if row.differs else ""))
    return head, rows


def _environment(report: Report) -> str:
    envs = [((r.header or {}).get("environment") or {}) for r in report.results]
    keys: list[str] = []
    for env in envs:
        keys += [k for k in env if k not in keys]
    if not keys:
        return "<p>No environment was recorded.</p>"
    rows = []
    for k in keys:
        cells = [env.get(k, "—") for env in envs]
        rows.append(([k, *["—" if c is None else c for c in cells]],
                     "differs" if len({json.dumps(c, default=str) for c in cells}) > 1 else ""))
    return table(["", *[_name(report, r.index) for r in report.results]], rows, "env")


CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;background:#fafafa;
color:#222}
main{max-width:1000px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:12px 0 4px}
.verdict{display:inline-block;padding:6px 14px;border-radius:6px;font-weight:700;font-size:20px;
color:#fff}
.verdict.good{background:#2e7d32}.verdict.bad{background:#c62828}.verdict.warn{background:#ef6c00}
.sub{color:#555} figure{margin:8px 0} figure img{max-width:100%;height:auto;display:block}
figcaption{color:#555;font-size:13px}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{padding:3px 10px;border-bottom:1px solid #e5e5e5;text-align:right;
font-variant-numeric:tabular-nums}
th:first-child,td:first-child{text-align:left}
tr.first td{background:#ffd6ff;font-weight:700} tr.differs td{color:#b71c1c}
table.text td,table.text th{text-align:left}
table.env td,table.env th{text-align:left;overflow-wrap:anywhere;max-width:320px}
pre{background:#f0f0f0;padding:8px 10px;overflow-x:auto;white-space:pre}
.diagnosis{border-left:4px solid #c62828;padding:2px 12px;background:#fff}
.diagnosis.good{border-left-color:#2e7d32} .cause{color:#b71c1c}
ol#sources li{margin:6px 0} code{overflow-wrap:anywhere}
"""


def _page_head(report: Report) -> list[str]:
    """The document head, the title and the verdict line with the run settings."""
    word, cls = _verdict(report)
    seed = "no seeding" if report.seed is None else f"seed {report.seed}"
    steps = ", ".join(str(r.steps) for r in report.results)
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>repro-check: {escape(word)} {escape(report.target)}</title>",
        f"<style>{CSS}</style></head><body><main>",
        f'<h1>repro-check report: <code>{escape(report.target)}</code></h1>',
        f'<p><span class="verdict {cls}" id="verdict">{escape(word)}</span>{evidence_html(report)}</p>',
        f'<p class="sub">{escape(seed)} · {report.runs} runs · steps recorded {escape(steps)} · '
        f'{escape(report.policy.describe())} · seeding: {escape(", ".join(report.components) or "none")}</p>'
        if report.finished is None  # two finished runs' files: nothing was run or seeded
        else f'<p class="sub">nothing run · {escape(report.policy.describe())}</p>',
    ]


def _outcome_section(report: Report) -> list[str]:
    """The error, the first divergence in a sentence, or that everything agrees."""
    cmp = report.verdict_comparison  # none when the target failed: no claim either way
    div = cmp.divergence if cmp else None
    out: list[str] = []
    if report.error:
        out.append(f"<p><b>Error:</b> {escape(report.error)}</p>")
        out += failed_runs_section(report)
    if div is not None:
        where = divergence_place(div) if div.step is not None or div.signal.startswith(
            ("saved:", "state:")) else "the final metrics"
        a_name, b_name = kind_of(report).sides(report, div)
        line = (f'<p id="first-divergence"><b>First divergence:</b> {escape(where)}, signal '
                f"<code>{escape(div.signal)}</code>, {escape(b_name)} vs {escape(a_name)}: "
                f"{escape(signal_sentence(div.signal, div.step))}.")
        if is_number(div.reference) and is_number(div.value):
            line += (f" {escape(a_name)} {escape(value_cell(div.reference))}, {escape(b_name)} "
                     f"{escape(value_cell(div.value))}")
            if div.abs_diff is not None:
                line += f" (|diff| {number(div.abs_diff)}, relative {number(div.rel_diff)})"
            line += "."
        elif div.reference is not None or div.value is not None:
            line += (f' <span class="sub">Fingerprints {escape(value_cell(div.reference))} and '
                     f"{escape(value_cell(div.value))}.</span>")
        later = later_line(report, div)
        if later:
            line += f" {escape(later[0].upper() + later[1:])}."
        out.append(line + "</p>")
        if div.detail:
            out.append(f"<p>{escape(div.detail)}</p>")
        if div.policy and div.policy != "exact bits":
            out.append(f'<p class="sub">judged by {escape(div.policy)}</p>')
    elif cmp is not None and report.error is None and not report.interrupted:
        out.append(f"<p>{escape(agreement(cmp, report.results))}</p>")
    out += saved_section(report)
    out += control_section(report)
    return out


def _loss_section(report: Report) -> list[str]:
    """Every run's loss curve, read back from its trace."""
    cmp = report.comparison
    curves: dict[int, list[tuple[int, float]]] = {}
    unread: list[str] = []
    for r in report.results:
        if r.trace_path:
            try:
                curves[r.index] = read_curve(r.trace_path)
            except TraceFileError as e:
                unread.append(str(e))
    out = ["<h2>Loss per step</h2>"]
    img = loss_plot(curves, cmp.divergence if cmp else None,
                    {r.index: _name(report, r.index) for r in report.results})
    if img:
        out.append(f'<figure id="loss-plot"><img alt="loss of every run per step" '
                   f'width="{FIG_W}" height="{FIG_H}" src="data:image/png;base64,{img}">'
                   "<figcaption>Every run's loss; the magenta line marks the first divergent step."
                   " Run 1 is drawn solid, the others dashed, so curves that coincide stay visible."
                   "</figcaption></figure>")
    else:
        out.append("<p>No loss was recorded.</p>")
    for msg in unread:
        out.append(f"<p>trace not read: {escape(msg)}</p>")
    return out


def _difference_section(report: Report) -> list[str]:
    """The difference from run 1 per step (and the spread, with three runs or more)."""
    cmp = report.comparison
    if cmp is None:
        return []
    div = cmp.divergence
    series: dict[str, Sequence[tuple[int, float]]] = {}
    other = div.run if div is not None and div.step is not None else 2
    series[f"|{_name(report, other)} − {_name(report, 1)}|"] = cmp.diff_series
    if report.runs >= 3:
        series[f"spread (max − min of {report.runs} runs)"] = cmp.spread_series
    out = ["<h2>Difference per step</h2>"]
    img = difference_plot(series, div.step if div is not None else None)
    if img:
        out.append(f'<figure id="difference-plot"><img alt="difference per step, log scale" '
                   f'width="{FIG_W}" height="{FIG_H}" src="data:image/png;base64,{img}">'
                   "<figcaption>Log scale; steps where the values are equal (difference 0) "
                   "are left out.</figcaption></figure>")
    else:
        out.append("<p>The loss is the same at every compared step.</p>")
    return out


def _context_section(report: Report) -> list[str]:
    """The steps around the first divergence, side by side."""
    head, rows = _context_rows(report)
    if not rows:
        return []
    return ["<h2>Steps around the first divergence (loss)</h2>", table(head, rows)]


def _groups_section(report: Report) -> list[str]:
    """Which runs are bit-identical (with three runs or more)."""
    groups = bit_identical_groups(report)
    if groups is None:
        return []
    if len(groups) == 1:
        return ["<h2>Runs that agree</h2>", f"<p>All {report.runs} runs are bit-identical.</p>"]
    items = "".join(f"<li>{'runs' if len(g) > 1 else 'run'} {escape(', '.join(map(str, g)))}"
                    "</li>" for g in groups)
    return ["<h2>Runs that agree</h2>",
            f'<p>Groups of bit-identical runs:</p><ul id="groups">{items}</ul>']


def _metrics_section(report: Report) -> list[str]:
    """Every run's final metrics, the rows that differ marked."""
    view = MetricsView.of(report)
    return [] if view is None else view.html([_name(report, k) for k in view.runs])


def _runs_section(report: Report) -> list[str]:
    """The replay command, each run's status, and each run's environment."""
    out: list[str] = []
    if report.replay:
        out.append(f'<h2>Replay</h2><pre id="replay">{escape(report.replay)}</pre>')
    out.append("<h2>Runs</h2>")
    out.append(table(["run", "status", "steps", "seconds", "trace"],
                      [([r.index, r.status, r.steps, f"{r.seconds:.1f}", r.trace_path or "—"], "")
                       for r in report.results]))
    out.append("<h2>Environment</h2>")
    out.append(_environment(report))
    return out


def _page_foot(report: Report) -> list[str]:
    """The warnings, the version and the time the page was made."""
    out: list[str] = []
    if report.warnings:
        out.append("<h2>Warnings</h2><ul>"
                   + "".join(f"<li>{escape(w)}</li>" for w in report.warnings) + "</ul>")
    out.append(f'<p class="sub">repro-check {escape(__version__)} · '
               f'{escape(time.strftime("%Y-%m-%d %H:%M:%S"))}</p>')
    out.append("</main></body></html>\n")
    return out


#: the sections of the page that are no one kind's; each kind places them around its own
COMMON = PageSections(head=_page_head, outcome=_outcome_section, bisect=bisect.html_section,
                      diagnosis=diagnosis.html_section, loss=_loss_section,
                      difference=_difference_section, context=_context_section,
                      groups=_groups_section, metrics=_metrics_section, runs=_runs_section,
                      foot=_page_foot)


def render_html(report: Report) -> str:
    """The whole report page as one string: the sections its kind shows, top to bottom."""
    sections = kind_of(report).page(COMMON)
    return "\n".join(line for section in sections for line in section(report))


def write_html(report: Report, path: str | os.PathLike[str]) -> Path:
    """Write the report page atomically (an interrupted write leaves no half file)."""
    require_matplotlib()
    return write_text_atomic(path, render_html(report))
