"""The HTML report: one self-contained file (plots embedded as PNG data) that needs no network.

It shows the verdict, every run's loss curve overlaid with the first divergence marked, the
difference per step on a log scale, the steps around the divergence side by side, the groups of
bit-identical runs, the metrics, the diagnosis when there is one, each run's environment and the
replay command. Loss curves are read back from the run traces, streaming and thinned to a bounded
number of points, so a long run makes a report of the same size. Plots need matplotlib (the
``report`` extra); :func:`require_matplotlib` says so in one line before any run starts.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from repro_check.trace import values
from repro_check.version import __version__
from repro_check.trace.atomic import write_text_atomic
from repro_check.compare.series import Thinned
from repro_check.compare.steps import spread_of
from repro_check.errors import TraceFileError, UsageError
from repro_check.report.contents import SourcesCost
from repro_check.report.model import DiagnosisPart, Report
from repro_check.compare.cause import EXPLANATION
from repro_check.report.diagnosis import ablation_outcome
from repro_check.report.text import (agreement, divergence_place, evidence_text, failed_runs_lines,
                                     is_number, later_text, saved_line, signal_sentence)
from repro_check.trace.format import iter_records
from repro_check.trace.protocol import StepRecord
from repro_check.trace.results import Location

#: points kept of each run's loss curve
MAX_POINTS = 2000
#: the first divergence, in every plot (a colour no run's curve uses)
MARKER_COLOR = "#ff00ff"
RUN_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#17becf",
              "#7f7f7f", "#bcbd22", "#e377c2"]
#: figure size in pixels (shown unscaled on a wide page, so lines stay sharp)
FIG_W, FIG_H, DPI = 960, 380, 100


def require_matplotlib() -> None:
    """Exit 2 with one line when the plotting library is missing."""
    try:
        import matplotlib  # noqa: F401 - optional: its absence is said in one line
    except ImportError:
        raise UsageError(
            "--report needs matplotlib, which is not installed "
            "(pip install 'torch-repro-check[report]')"
        ) from None


def read_curve(path: str | os.PathLike[str], signal: str = "loss",
               cap: int = MAX_POINTS) -> list[tuple[int, float]]:
    """``signal`` at every step of a trace, thinned to ``cap`` points; non-finite values left out."""
    thin = Thinned(cap)
    for ev in iter_records(path):
        if isinstance(ev, StepRecord):
            enc = ev.signals.get(signal)
            if isinstance(enc, dict):
                x = values.to_float(enc)
                if not (math.isnan(x) or math.isinf(x)):
                    thin.add(ev.step, x)
    return thin.values()


# ---- plots ---------------------------------------------------------------------------------------
def _figure() -> Any:
    # matplotlib on use: only the HTML report draws
    from matplotlib.figure import Figure

    fig = Figure(figsize=(FIG_W / DPI, FIG_H / DPI), dpi=DPI)
    ax = fig.subplots()
    ax.grid(True, color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig, ax


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _legend(ax: Any) -> None:
    """The legend above the plot, outside the axes: inside, it covers points wherever it goes."""
    labels = ax.get_legend_handles_labels()[1]
    # as many columns as fit the plot's width (long environment names: fewer, in more rows)
    per_row = max(1, min(len(labels), 4, 110 // (max(map(len, labels), default=1) + 6)))
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.01), ncol=per_row, fontsize=9,
              frameon=False, borderaxespad=0)


def _xlim(ax: Any, first: float, last: float) -> None:
    """Room on both sides of the steps, so that a marker at the first or last step is drawn
    clear of the axis, not over it (half a step, or 2 % of a long run)."""
    pad = max(0.5, 0.02 * (last - first))
    ax.set_xlim(first - pad, last + pad)


def _mark(ax: Any, step: int | None) -> None:
    if step is not None:
        ax.axvline(step, color=MARKER_COLOR, linewidth=2.5, zorder=5,
                   label=f"first divergence (step {step})")


def _curves(ax: Any, curves: dict[int, list[tuple[int, float]]], labels: dict[int, str]) -> None:
    """One loss curve per run: run 1 solid and thick, the others thin and dashed, so that curves
    that coincide stay visible."""
    for k, pts in sorted(curves.items()):
        xs, ys = zip(*pts)
        ax.plot(xs, ys, color=RUN_COLORS[(k - 1) % len(RUN_COLORS)], label=labels[k],
                linewidth=2.4 if k == 1 else 1.3, linestyle="-" if k == 1 else (0, (4, 2)))


def loss_plot(curves: dict[int, list[tuple[int, float]]], divergence: Any,
              names: dict[int, str] | None = None) -> str | None:
    """Every run's loss curve overlaid (each called by ``names``, else ``run K``), the first
    divergence marked; base64 PNG."""
    curves = {k: c for k, c in curves.items() if c}
    if not curves:
        return None
    fig, ax = _figure()
    _curves(ax, curves, {k: (names or {}).get(k, f"run {k}") for k in curves})
    step = divergence.step if divergence is not None else None
    _mark(ax, step)
    if step is not None:
        for enc in (divergence.reference, divergence.value):
            if isinstance(enc, dict):
                y = values.to_float(enc)
                if not (math.isnan(y) or math.isinf(y)):
                    ax.plot([step], [y], marker="o", markersize=9, markerfacecolor="none",
                            markeredgecolor=MARKER_COLOR, markeredgewidth=2, zorder=6)
    xs_all = [x for pts in curves.values() for x, _ in pts] + ([step] if step else [])
    _xlim(ax, min(xs_all), max(xs_all))
    ys_all = [y for pts in curves.values() for _, y in pts]
    if min(ys_all) > 0 and max(ys_all) / min(ys_all) > 50:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    _legend(ax)
    return _png(fig)


def difference_plot(series: dict[str, Sequence[tuple[int, float]]], step: int | None) -> str | None:
    """Differences per step on a log scale (steps where the values agree are left out)."""
    shown = {label: [(s, v) for s, v in pts if v > 0 and not math.isinf(v)]
             for label, pts in series.items()}
    shown = {label: pts for label, pts in shown.items() if pts}
    if not shown:
        return None
    fig, ax = _figure()
    steps = [s for pts in series.values() for s, _ in pts]
    _xlim(ax, min(steps), max(steps))  # the whole run, equal steps included
    colors = ["#444444", "#d62728"] if len(shown) <= 2 else RUN_COLORS[1:]
    for i, (label, pts) in enumerate(shown.items()):
        xs, ys = zip(*pts)
        ax.plot(xs, ys, color=colors[i % len(colors)], linewidth=1.4, marker=".",
                markersize=3 if len(xs) > 200 else 6, label=label)
    _mark(ax, step)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("difference")
    _legend(ax)
    return _png(fig)


# ---- page ----------------------------------------------------------------------------------------
def _name(report: Report, index: int) -> str:
    """What run ``index`` is called: its environment with ``--across``, the golden and this run
    with ``verify``, A and B with ``diff``."""
    if report.gate is not None and 1 <= index <= len(report.gate.labels):
        return report.gate.labels[index - 1]
    return report.run_name(index)


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _val(enc: Any) -> str:
    if isinstance(enc, dict):
        return values.readable(enc)
    return "—" if enc is None else str(enc)


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def _table(head: Sequence[str], rows: Iterable[tuple[Sequence[Any], str]], cls: str = "") -> str:
    out = [f'<table class="{cls}"><thead><tr>' if cls else "<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for cells, cls in rows:
        out.append(f'<tr class="{cls}">' if cls else "<tr>")
        out += [f"<td>{_e(c)}</td>" for c in cells]
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _verdict(report: Report) -> tuple[str, str]:
    return report.verdict.label, report.verdict.tone


def _bits(v: Any) -> Any:
    """What makes two recorded values the same value: dtype and bits of a number."""
    return (v.get("dtype"), v.get("bits"), v.get("value")) if isinstance(v, dict) else v


def _context_rows(report: Report) -> tuple[list[str], list[tuple[list[Any], str]]]:
    """The steps around the first divergence. A row is marked only where its values differ
    (the first divergent step is highlighted whatever differed there); a step that differs in
    another signal (its gradients, say) says which in "differs in"."""
    cmp = report.comparison
    if cmp is None or cmp.divergence is None or cmp.divergence.step is None:
        return [], []
    step = cmp.divergence.step
    rows: list[tuple[list[Any], str]] = []

    def cls(row_step: int, vals: Sequence[Any]) -> str:
        if row_step == step:
            return "first"
        return "differs" if len({json.dumps(_bits(v), default=str) for v in vals}) > 1 else ""

    if report.runs >= 3 and any(r["differs"] for r in cmp.context_all):
        head = ["step", *[_name(report, k) for k in range(1, report.runs + 1)], "spread"]
        named = any(r.get("signal") not in (None, "loss") for r in cmp.context_all)
        if named:
            head.append("differs in")
        for r in cmp.context_all:
            cells = [r["step"], *map(_val, r["values"]), _num(r["spread"])]
            if named:
                cells.append(r.get("signal") or "")
            rows.append((cells, cls(r["step"], r["values"])))
        return head, rows
    other = [r.get("signal") for r in cmp.context if r.get("signal") not in (None, "loss")]
    head = ["step", _name(report, 1), _name(report, cmp.divergence.run), "|diff|"]
    if other:
        head.append("differs in")
    for r in cmp.context:
        a, b = r["reference"], r["value"]
        d = spread_of([a, b]) if isinstance(a, dict) and isinstance(b, dict) else None
        cells = [r["step"], _val(a), _val(b), "—" if d is None or math.isnan(d) else _num(d)]
        if other:
            cells.append(r.get("signal") or "")
        rows.append((cells, cls(r["step"], [a, b])))
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
    return _table(["", *[_name(report, r.index) for r in report.results]], rows, "env")


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
    account = evidence_text(report)
    rests = f' <span class="sub" id="evidence">{_e(account)}</span>' if account else ""
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>repro-check: {_e(word)} {_e(report.target)}</title>",
        f"<style>{CSS}</style></head><body><main>",
        f'<h1>repro-check report: <code>{_e(report.target)}</code></h1>',
        f'<p><span class="verdict {cls}" id="verdict">{_e(word)}</span>{rests}</p>',
        f'<p class="sub">{_e(seed)} · {report.runs} runs · steps recorded {_e(steps)} · '
        f'{_e(report.policy.describe())} · seeding: {_e(", ".join(report.components) or "none")}</p>',
    ]


def _outcome_section(report: Report) -> list[str]:
    """The error, the first divergence in a sentence, or that everything agrees."""
    cmp = report.verdict_comparison  # none when the target failed: no claim either way
    div = cmp.divergence if cmp else None
    out: list[str] = []
    if report.error:
        out.append(f"<p><b>Error:</b> {_e(report.error)}</p>")
        out += [f"<p>{_e(line)}</p>" for line in failed_runs_lines(report)]
    if div is not None:
        where = divergence_place(div) if div.step is not None or div.signal.startswith(
            ("saved:", "state:")) else "the final metrics"
        if report.gate is not None:
            a_name, b_name = report.labels[0], report.labels[1]
        else:
            a_name, b_name = _name(report, 1), _name(report, div.run)
        line = (f'<p id="first-divergence"><b>First divergence:</b> {_e(where)}, signal '
                f"<code>{_e(div.signal)}</code>, {_e(b_name)} vs {_e(a_name)}: "
                f"{_e(signal_sentence(div.signal, div.step))}.")
        if is_number(div.reference) and is_number(div.value):
            line += (f" {_e(a_name)} {_e(_val(div.reference))}, {_e(b_name)} "
                     f"{_e(_val(div.value))}")
            if div.abs_diff is not None:
                line += f" (|diff| {_num(div.abs_diff)}, relative {_num(div.rel_diff)})"
            line += "."
        elif div.reference is not None or div.value is not None:
            line += (f' <span class="sub">Fingerprints {_e(_val(div.reference))} and '
                     f"{_e(_val(div.value))}.</span>")
        head, _ = _context_rows(report)
        later = later_text(div, cmp.context if head and cmp is not None else [])
        if later:
            line += f" {_e(later[0].upper() + later[1:])}."
        out.append(line + "</p>")
        if div.detail:
            out.append(f"<p>{_e(div.detail)}</p>")
        if div.policy and div.policy != "exact bits":
            out.append(f'<p class="sub">judged by {_e(div.policy)}</p>')
    elif cmp is not None and report.error is None and not report.interrupted:
        out.append(f"<p>{_e(agreement(cmp, report.results))}</p>")
    left = saved_line(report)
    if left is not None and report.error is None:
        out.append(f'<p id="saved">{_e(left)}</p>')
    out += _control_section(report)
    return out


def _control_section(report: Report) -> list[str]:
    """The negative control: what was planted where and where it was seen, or, UNVERIFIED,
    what the check could not see."""
    ctl = report.control
    if ctl is None:
        return []
    if ctl.status == "not seen":
        return [f'<p id="control"><b>Control: not seen.</b> {_e(ctl.detail)}. '
                "The verdict is UNVERIFIED: the runs agree, but the check could not have seen "
                "them differ.</p>"]
    return [f'<p id="control" class="sub"><b>Control:</b> '
            f'{_e(ctl.summary.removeprefix("negative control: "))}</p>']


def _where(loc: Location | None) -> str:
    if not loc:
        return ""
    func = f" in {loc.function}" if loc.function else ""
    return f"{loc.site}{func}"


def _diagnosis_section(report: Report) -> list[str]:
    """What the cause is, where it was made (file:line) and what it means, as the terminal and
    the JSON say it; with ``diagnose``, the culprit op, the flagged ops, every source with its
    lines and the seeding ablation. A reproducible check has no cause to show."""
    part = report.diagnosis
    cause = report.cause
    if (cause in (None, "none")) and part is None:
        return []
    out = ["<h2>Diagnosis</h2>"]
    if cause not in (None, "none"):
        box = [f'<p><b>Cause: <span class="cause">{_e(cause)}</span></b>'
               + (f" — {_e(report.cause_detail)}" if report.cause_detail else "") + "</p>"]
        if report.cause_location:
            box.append(f"<p>at <code>{_e(_where(report.cause_location))}</code></p>")
        explanation = EXPLANATION.get(cause)
        if explanation and explanation not in (report.cause_detail or ""):
            box.append(f'<p class="sub">{_e(explanation)}</p>')
        out.append(f'<div class="diagnosis bad" id="diagnosis">{"".join(box)}</div>')
    elif cause == "none":
        out.append('<div class="diagnosis good" id="diagnosis"><p><b>No cause to find:</b> '
                   "every step and metric agree.</p></div>")
    if part is not None:
        out += _diagnose_parts(report, part)
    return out


def _diagnose_parts(report: Report, part: DiagnosisPart) -> list[str]:
    """``diagnose``'s own sections: the culprit op, flagged ops, sources, the ablation."""
    out: list[str] = []
    loc = part.localization
    if loc:
        out.append("<h3>Culprit</h3>")
        if loc.found:
            out.append(f'<p id="culprit"><b>{_e(part.culprit or "(outside any module)")}</b> · op '
                       f"<code>{_e(part.culprit_op)}</code> · {_e(loc.phase)} · step "
                       f"{_e(loc.step)}</p>")
        if loc.detail:
            out.append(f"<p>{_e(loc.detail)}</p>")
    out.append("<h3>Ops PyTorch reports as nondeterministic</h3>")
    if part.flagged_ops:
        out.append(_table(["op", "first at step", "called from"],
                          [([f.op, f.step, f.where or ""], "")
                           for f in part.flagged_ops], "text"))
    else:
        out.append("<p>None was reported.</p>")
    if part.sources_cost is not None:
        out += _sources(part)
    if part.ablation:
        scope = f", at most {report.max_steps} steps a run" if report.max_steps else ""
        out.append(f"<h3>Seeding ablation (a pair of runs with the component off{_e(scope)})</h3>")
        rows = []
        for row in part.ablation:
            name = row.component
            verdict = row.verdict or ""
            rows.append(([name or "(no seeding at all)", verdict, ablation_outcome(row)],
                         "differs" if verdict == "needed" else ""))
        out.append(_table(["component", "for this workload", "runs without it"], rows, "text"))
        needed = part.necessary_components or []
        out.append(f"<p><b>Necessary components:</b> {_e(', '.join(needed) or 'none')}</p>")
    if part.ablation_note:
        out.append(f'<p class="sub">{_e(part.ablation_note)}</p>')
    return out


def _sources(part: DiagnosisPart) -> list[str]:
    """Every source found by pinning one and going on, each with its file:line and detail."""
    cost = part.sources_cost or SourcesCost(0, 0.0)
    spent = f"{cost.runs} pinned runs, {float(cost.seconds):.1f} s"
    if not part.sources:
        return [f"<h3>Sources</h3><p>None: the runs agree ({_e(spent)}).</p>"]
    out = [f"<h3>Sources of non-determinism, in the order found ({len(part.sources)}; "
           f"{_e(spent)})</h3>", '<ol id="sources">']
    for src in part.sources:
        step = f"step {src.step}" if src.step else "final metrics"
        rank = f" · rank {src.rank}" if src.rank is not None else ""
        item = [f"<b>{_e(src.cause)}</b> · {_e(step)} · <code>{_e(src.signal)}</code>"
                f"{_e(rank)}"]
        if src.culprit_op:
            item[0] += (f" · {_e(src.culprit or '(outside any module)')} · "
                        f"<code>{_e(src.culprit_op)}</code>")
        if src.location:
            item.append(f"at <code>{_e(_where(src.location))}</code>")
        if src.detail:
            item.append(_e(src.detail))
        for frame in (src.stack or [])[:-1][::-1]:
            item.append(f'<span class="sub">called from <code>{_e(_where(frame))}</code></span>')
        pinned = src.pinned_by
        item.append(f'<span class="sub">{_e(f"pinned by {pinned}" if pinned else "not pinned (the last)")}</span>')
        out.append("<li>" + "<br>".join(item) + "</li>")
    out.append("</ol>")
    if part.sources_note:
        out.append(f"<p>{_e(part.sources_note)}</p>")
    return out


def _gate_section(report: Report) -> list[str]:
    """``verify`` and ``diff``: what was compared with what, and how the two environments
    differ (the golden comparison)."""
    gate = report.gate
    if gate is None or gate.mode == "record":
        return []
    out = ["<h2>Golden comparison</h2>" if gate.mode == "verify" else "<h2>Traces compared</h2>"]
    if gate.mode == "verify":
        out.append(f"<p>{_e(gate.labels[1])} against the golden <code>{_e(gate.golden)}</code>"
                   f" ({_e(gate.labels[0])}).</p>")
    else:
        out.append(f"<p>A: <code>{_e(gate.a)}</code><br>B: <code>{_e(gate.b)}</code></p>")
    diffs = gate.environment_differences
    if diffs:
        out.append(_table(["environment", gate.labels[0], gate.labels[1]],
                          [([d.key, "—" if d.reference is None else d.reference,
                             "—" if d.value is None else d.value], "differs")
                           for d in diffs], "env"))
    else:
        out.append("<p>The two environments agree.</p>")
    if gate.environment_note:
        out.append(f"<p>{_e(gate.environment_note)}</p>")
    return out


def _resume_section(report: Report) -> list[str]:
    """``resume``: the checkpoint and what it holds, the state not restored, both loss curves
    with the resume point marked."""
    part = report.resume
    if part is None:
        return []
    out = ["<h2>Resume</h2>"]
    ck = part.checkpoint
    if ck is not None:
        out.append(f"<p id=\"checkpoint\"><b>Checkpoint:</b> {_e(ck.where)} ({_e(ck.kind)}), "
                   f"written after step {ck.step}; copied to {_e(ck.copy)}<br>"
                   f"{_e(ck.summary)}</p>")
    if part.reference_reproducible is False:
        out.append("<p><b>The reference is not reproducible:</b> the interrupted run differs "
                   "from it before the checkpoint; no checkpoint is blamed.</p>")
    if part.not_restored:
        out.append('<ul id="not-restored">' + "".join(
            f"<li><b>{_e(n.state)}</b>: {_e(n.detail)}. {_e(n.fix)}</li>"
            for n in part.not_restored) + "</ul>")
    curves = {1: part.curves.get("reference", []),
              3: part.curves.get("resumed", part.curves.get("interrupted", []))}
    if ck is not None and any(curves.values()):
        img = resume_plot(curves, ck.step, report.first_divergent_step,
                          {1: "reference", 3: "resumed"})
        if img:
            out.append(f'<figure id="resume-plot"><img alt="loss of the reference and the resumed '
                       f'run" width="{FIG_W}" height="{FIG_H}" src="data:image/png;base64,{img}">'
                       f"<figcaption>The reference's loss (solid) and the resumed run's (dashed, "
                       f"numbered as the reference's steps); the grey line marks the resume point "
                       f"(after step {ck.step}).</figcaption></figure>")
    return out


def resume_plot(curves: dict[int, list[tuple[int, float]]], resumed_after: int,
                divergent: int | None, names: dict[int, str]) -> str | None:
    """The reference's and the resumed run's losses, the resume point and the first divergence
    marked; base64 PNG."""
    curves = {k: c for k, c in curves.items() if c}
    if not curves:
        return None
    fig, ax = _figure()
    _curves(ax, curves, {k: names.get(k, str(k)) for k in curves})
    ax.axvline(resumed_after + 0.5, color="#888888", linewidth=2, linestyle=":",
               label=f"resumed after step {resumed_after}")
    _mark(ax, divergent)
    xs_all = [x for pts in curves.values() for x, _ in pts]
    _xlim(ax, min(xs_all), max(xs_all))
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    _legend(ax)
    return _png(fig)


def _loss_section(report: Report) -> list[str]:
    """Every run's loss curve, read back from its trace."""
    if report.resume is not None:  # both curves, the resume point marked (_resume_section)
        return []
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
        out.append(f"<p>trace not read: {_e(msg)}</p>")
    return out


def _difference_section(report: Report) -> list[str]:
    """The difference from run 1 per step (and the spread, with three runs or more)."""
    cmp = report.comparison
    if cmp is None or report.across is not None or report.resume is not None:
        return []  # the drift of every pair, or the resume's curves, are shown instead
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


def _across_section(report: Report) -> list[str]:
    """With ``--across``: every pair's verdict, culprit and drift (plotted on a log scale), each
    environment's versions and time per step, and the price of determinism."""
    part = report.across
    if part is None:
        return []
    out = ['<h2>Environments</h2>', _table(
        ["environment", "steps", "seconds", "per step", "in the loop", "Python", "torch", "CUDA",
         "numpy", "device"],
        [([c.label, c.steps, f"{c.seconds:.1f}", _num(c.per_step), _num(c.loop_per_step),
           *[c.versions.get(k) or "—" for k in ("python", "torch", "cuda", "numpy", "device")]],
          "") for c in part.cells], "env")]
    out.append(f"<h2>Each environment against {_e(part.cells[0].label)}</h2>")
    rows = []
    for p in part.pairs:
        d = p.drift
        rows.append(([p.b, p.verdict, p.first_divergent_step or "—", p.signal or "—",
                      p.culprit_op or "—", p.culprit or "—", _num(d.max_abs) if d else "—",
                      _num(d.final_abs) if d else "—", (d.exceeds_at if d else None) or "—"],
                     "" if p.identical else "differs"))
    out.append(_table(["environment", "verdict", "first step", "signal", "culprit op", "module",
                       "max |Δ loss|", "final |Δ loss|", "exceeds at"], rows))
    for p in part.pairs:
        detail = p.localization.detail if p.localization is not None else None
        if detail:
            out.append(f"<p><b>{_e(p.b)}:</b> {_e(detail)}</p>")
        if p.loading_note:
            out.append(f'<p class="loading"><b>{_e(p.b)}:</b> {_e(p.loading_note)}</p>')
    if part.revisions:
        out.append("<h2>Revisions</h2>")
        out.append(_table(["revision", "commit", "subject", "date"],
                          [([name, c.sha[:12], c.subject, c.date], "")
                           for name, c in part.revisions.items()]))
    img = difference_plot({f"|{p.b} − {p.a}|": p.drift.series for p in part.pairs
                           if p.drift is not None}, None)
    out.append("<h2>Loss drift per step</h2>")
    if img:
        out.append(f'<figure id="drift-plot"><img alt="loss drift per step, log scale" '
                   f'width="{FIG_W}" height="{FIG_H}" src="data:image/png;base64,{img}">'
                   "<figcaption>|Δ loss| of each environment against the first, log scale; "
                   "steps where the losses are equal are left out.</figcaption></figure>")
    else:
        out.append("<p>The loss has the same bits in every environment at every step.</p>")
    if part.price:
        out.append("<h2>Price of determinism</h2>")
        out.append(_table(["deterministic on", "per step", "± spread", "deterministic off",
                           "per step", "± spread", "on / off", ""],
                          [([r.on, _num(r.on_seconds_per_step),
                             _num(r.on_step_spread), r.off,
                             _num(r.off_seconds_per_step), _num(r.off_step_spread),
                             _num(r.ratio), "within noise" if r.within_noise else ""],
                            "") for r in part.price]))
        out.append('<p class="sub">± spread: the standard deviation of the seconds between '
                   "consecutive steps; a difference inside it is within noise (a loaded machine "
                   "moves step times more than determinism does).</p>")
    if part.compile_price:
        out.append("<h2>Price of torch.compile</h2>")
        out.append(_table(["compile on", "per step", "± spread", "compile off", "per step",
                           "± spread", "on / off", ""],
                          [([r.on, _num(r.on_seconds_per_step), _num(r.on_step_spread), r.off,
                             _num(r.off_seconds_per_step), _num(r.off_step_spread),
                             _num(r.ratio), "within noise" if r.within_noise else ""],
                            "") for r in part.compile_price]))
    return out


def _context_section(report: Report) -> list[str]:
    """The steps around the first divergence, side by side."""
    head, rows = _context_rows(report)
    if not rows:
        return []
    return ["<h2>Steps around the first divergence (loss)</h2>", _table(head, rows)]


def _groups_section(report: Report) -> list[str]:
    """Which runs are bit-identical (with three runs or more)."""
    cmp = report.comparison
    if cmp is None or report.runs < 3 or not cmp.groups:
        return []
    if len(cmp.groups) == 1:
        return ["<h2>Runs that agree</h2>", f"<p>All {report.runs} runs are bit-identical.</p>"]
    items = "".join(f"<li>{'runs' if len(g) > 1 else 'run'} {_e(', '.join(map(str, g)))}"
                    "</li>" for g in cmp.groups)
    return ["<h2>Runs that agree</h2>",
            f'<p>Groups of bit-identical runs:</p><ul id="groups">{items}</ul>']


def _metrics_section(report: Report) -> list[str]:
    """Every run's final metrics, the rows that differ marked."""
    cmp = report.comparison
    names: dict[str, None] = {}  # in order, merged in linear time (a run may log thousands)
    for m in report.metrics_readable():
        names.update(dict.fromkeys(m))
    if not names or cmp is None:
        return []
    rows: list[tuple[list[Any], str]] = []
    for n in names:
        raw = [cmp.metrics_of(k).get(n) for k in range(1, report.runs + 1)]
        same = len({json.dumps(v, sort_keys=True) for v in raw}) == 1
        rows.append(([n, *map(_val, raw)], "" if same else "differs"))
    return ["<h2>Metrics</h2>",
            _table(["metric", *[_name(report, k) for k in range(1, report.runs + 1)]], rows)]


def _runs_section(report: Report) -> list[str]:
    """The replay command, each run's status, and each run's environment."""
    out: list[str] = []
    if report.replay:
        out.append(f'<h2>Replay</h2><pre id="replay">{_e(report.replay)}</pre>')
    out.append("<h2>Runs</h2>")
    out.append(_table(["run", "status", "steps", "seconds", "trace"],
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
                   + "".join(f"<li>{_e(w)}</li>" for w in report.warnings) + "</ul>")
    out.append(f'<p class="sub">repro-check {_e(__version__)} · '
               f'{_e(time.strftime("%Y-%m-%d %H:%M:%S"))}</p>')
    out.append("</main></body></html>\n")
    return out


def _bisect_section(report: Report) -> list[str]:
    """With ``bisect``: the first commit that differs, and every commit tested."""
    part = report.bisect
    if part is None:
        return []
    # only a bisect's page has the section
    from repro_check.report.bisect import bisect_lines

    lines = bisect_lines(part)
    rows = [([t.sha[:12], t.verdict, t.step or "—", t.signal or "—", t.subject, t.date],
             "differs" if t.verdict == "bad" else "") for t in part.tested]
    return ['<h2>Bisect</h2>', f'<p id="bisect">{_e(lines[0])}</p>',
            *(f"<p>{_e(line.strip())}</p>" for line in lines[1:2] if line.startswith("  ")),
            _table(["commit", "verdict", "first step", "signal", "subject", "date"], rows)]


#: the sections of the page, top to bottom
SECTIONS = (_page_head, _outcome_section, _resume_section, _bisect_section, _diagnosis_section,
            _gate_section, _loss_section,
            _difference_section,
            _across_section, _context_section, _groups_section, _metrics_section, _runs_section, _page_foot)


def render_html(report: Report) -> str:
    """The whole report page as one string."""
    return "\n".join(line for section in SECTIONS for line in section(report))


def write_html(report: Report, path: str | os.PathLike[str]) -> Path:
    """Write the report page atomically (an interrupted write leaves no half file)."""
    require_matplotlib()
    return write_text_atomic(path, render_html(report))
