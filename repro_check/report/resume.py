"""The terminal summary of ``resume``: the verdict, the checkpoint and what it holds, the state
not restored with what to add, the reference's and the resumed run's losses side by side around
the resume point, the metrics, the cost and a replay line."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from repro_check.report.htmlkit import FIG_H, FIG_W, escape, resume_plot
from repro_check.report.model import Report
from repro_check.report.part import PageSections, RunsByReport, Section
from repro_check.report.terminal import failure_parts, footer_parts, verdict
from repro_check.report.text import value_text, verdict_style

#: the runs of a resume, by index
RUN_NAMES = {1: "the reference", 2: "the interrupted run", 3: "the resumed run"}
#: steps shown before the resume point and after it
BEFORE, AFTER = 3, 5


def summary(report: Report) -> Group:
    part = report.resume
    assert part is not None, "a resume report"
    ck = part.checkpoint
    head = Text.assemble(verdict(report), "  ", (report.target, "bold"))
    seed = "no seeding" if report.seed is None else f"seed {report.seed}"
    steps = ", ".join(f"{name} {n}" for name, n in part.steps.items())
    head.append(f"\n{seed} · the reference and the interrupted run {_together(report)}, then "
                f"the resumed run")
    head.append(f"\n--at {part.at}" + (f" · checkpoint after step {ck.step}" if ck else "")
                + (f" · steps: {steps}" if steps else "") + f" · {report.policy.describe()}")
    comps = ", ".join(f"threads={report.threads}" if c == "threads" and report.threads else c
                      for c in report.components) or "none"
    head.append(f"\nseeding: {comps} (DataLoaders get no generator of repro-check's)")
    parts: list[Any] = [Panel(head, box=box.ROUNDED, expand=False,
                              border_style=verdict_style(report)),
                        *failure_parts(report, lambda r: RUN_NAMES.get(r.index, f"run {r.index}"))]
    if ck is not None:
        parts.append(Text.assemble(("Checkpoint: ", "bold"), f"{ck.where} ({ck.kind}), written "
                                   f"after step {ck.step}; copied to {ck.copy}"))
        parts.append(Text(f"  {ck.summary}"))
    if part.moved_aside:
        shown = ", ".join(part.moved_aside[:4]) + (
            f" and {len(part.moved_aside) - 4} more" if len(part.moved_aside) > 4 else "")
        parts.append(Text(f"  moved into the trace folder (later-checkpoints/) before the resumed "
                          f"run: {shown}, saved by the reference after step "
                          f"{ck.step if ck else '?'}, so that a script finding its own checkpoint "
                          f"finds this one", style="dim"))
    cmp = report.comparison
    if part.reference_reproducible is False and cmp is not None and cmp.divergence is not None:
        div = cmp.divergence
        parts.append(Text.assemble(
            ("The reference is not reproducible: ", "bold red"),
            f"the interrupted run already differs from it at step {div.step} (signal "
            f"{div.signal}), before the checkpoint. No checkpoint is blamed: run "
            f"repro-check check on it first."))
    elif report.error is None and not report.interrupted and cmp is not None:
        parts += _outcome(report)
    parts += _metrics(report)
    parts.append(Text(cost(report), style="dim"))
    parts += footer_parts(report)
    return Group(*parts)


def _together(report: Report) -> str:
    part = report.resume
    return "in parallel" if part is None or part.serial is None \
        else f"one after the other ({part.serial})"


def cost(report: Report) -> str:
    """The runs made (three when the resumed run started), whether the first two went in
    parallel, and how long after its save returned the interrupted run ended, as it measured."""
    part = report.resume
    assert part is not None
    n = len(report.results)
    text = (f"cost: {n} run{'s' if n != 1 else ''}, the reference and the interrupted one "
            f"{_together(report)}" + (", then the resumed one" if n >= 3 else "; no resumed run"))
    ck = part.checkpoint
    if ck is not None and ck.stopped_after is not None:
        how = ("the file was noticed at the step after it was written" if ck.kind == "file"
               else "the copy")
        text += (f"; the interrupted run ended {ck.stopped_after:.2f} s after its save "
                 f"returned ({how})")
    return text


def _outcome(report: Report) -> list[Any]:
    part, cmp = report.resume, report.comparison
    assert part is not None and cmp is not None and part.checkpoint is not None
    c = part.checkpoint.step
    parts: list[Any] = []
    if report.reproducible:
        parts.append(Text(f"All {cmp.steps_compared - c if cmp.steps_compared > c else 0} resumed "
                          f"steps (from step {c + 1}) and {cmp.metrics_compared} metric(s) equal "
                          "the reference's."))
    else:
        div = cmp.divergence
        if div is not None:
            where = f"step {div.step}" if div.step is not None else "final metrics"
            parts.append(Text.assemble(("First divergence: ", "bold"), f"{where}, signal ",
                                       (div.signal, "bold")))
            if div.detail:
                parts.append(Text(f"  {div.detail.replace('run 1', 'the reference')}"
                                  .replace("run 2", "the resumed run")))
        if part.not_restored:
            parts.append(Text("Not restored:", style="bold"))
            for n in part.not_restored:
                parts.append(Text.assemble("  ", (n.state, "bold red"), f" — {n.detail}: {n.fix}"))
        else:
            parts.append(Text("Not restored: nothing repro-check can name — the state going into "
                              f"step {c + 1} agrees with the reference's; the difference shows "
                              f"first in {div.signal if div else 'the metrics'} (state the "
                              "checkpoint does not hold, such as a model buffer, or a computation "
                              "that is not deterministic)."))
    parts.append(_side_by_side(report))
    return parts


def _side_by_side(report: Report) -> Group:
    """The reference's and the resumed run's losses around the resume point (its title a line
    of its own: as the table's title it would wrap at the narrow table's width)."""
    part = report.resume
    assert part is not None and part.checkpoint is not None
    c = part.checkpoint.step
    ref = dict(part.curves.get("reference", []))
    mine = dict(part.curves.get("resumed", []))
    div = report.first_divergent_step
    title = Text(f"Loss around the resume point (after step {c}; ▶ the first resumed step, ≠ "
                 "a loss that differs)")
    t = Table(box=box.SIMPLE_HEAD, show_edge=False)
    t.add_column("")
    t.add_column("step", justify="right")
    t.add_column("reference", justify="right")
    t.add_column("resumed", justify="right")
    last = max(list(ref) + list(mine) + [c])
    for step in range(max(1, c - BEFORE + 1), min(last, c + AFTER) + 1):
        a, b = ref.get(step), mine.get(step)
        mark = ("▶" if step == c + 1 else "") + ("≠" if a != b and step > c else "")
        t.add_row(mark, str(step), "—" if a is None else f"{a:.8g}",
                  "—" if b is None else f"{b:.8g}",
                  style="red" if div is not None and step >= div and step > c else None)
    return Group(title, t)


def _metrics(report: Report) -> list[Any]:
    cmp = report.comparison
    if cmp is None:
        return []
    ref, mine = cmp.metrics.get(1, {}), cmp.metrics.get(3, {})
    names = list(dict.fromkeys([*ref, *mine]))[:20]
    if not names:
        return []
    differing = {d.signal.removeprefix("metric:") for d in cmp.metric_divergences}
    t = Table(title="Metrics", box=box.SIMPLE_HEAD, title_justify="left", show_edge=False)
    t.add_column("metric")
    t.add_column("reference", justify="right")
    t.add_column("resumed", justify="right")
    for n in names:
        t.add_row(n, value_text(ref.get(n)), value_text(mine.get(n)),
                  style="red" if n in differing else None)
    return [t]


def html_section(report: Report) -> list[str]:
    """``resume``: the checkpoint and what it holds, the state not restored, both loss curves
    with the resume point marked."""
    part = report.resume
    if part is None:
        return []
    out = ["<h2>Resume</h2>"]
    ck = part.checkpoint
    if ck is not None:
        out.append(f"<p id=\"checkpoint\"><b>Checkpoint:</b> {escape(ck.where)} ({escape(ck.kind)}), "
                   f"written after step {ck.step}; copied to {escape(ck.copy)}<br>"
                   f"{escape(ck.summary)}</p>")
    if part.reference_reproducible is False:
        out.append("<p><b>The reference is not reproducible:</b> the interrupted run differs "
                   "from it before the checkpoint; no checkpoint is blamed.</p>")
    if part.not_restored:
        out.append('<ul id="not-restored">' + "".join(
            f"<li><b>{escape(n.state)}</b>: {escape(n.detail)}. {escape(n.fix)}</li>"
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


def resume_failure(report: Report, div: Any) -> str:
    """``resume``'s CI line: the first divergence, the state not restored and what the
    checkpoint holds."""
    part = report.resume
    assert part is not None
    where = f"step {div.step}" if div.step is not None else "the final metrics"
    if part.reference_reproducible is False:
        return (f"{report.target}: the reference is not reproducible: the interrupted run "
                f"differs from it at {where} (signal {div.signal}), before the checkpoint")
    names = ", ".join(part.not_restored_names) or "nothing repro-check can name"
    text = (f"{report.target}: the resumed run differs from the reference at {where} (signal "
            f"{div.signal}); not restored: {names}")
    if part.checkpoint is not None:
        text += f"; {part.checkpoint.summary}"
    return text


class ResumeKind(RunsByReport):
    """``resume``: a report with a resume part."""

    name = "resume"

    def applies(self, report: Report) -> bool:
        return report.resume is not None

    def terminal(self, report: Report) -> Any:
        return summary(report)

    def page(self, common: PageSections) -> tuple[Section, ...]:
        # no loss or difference plot of the check's: both curves, the resume point marked
        return (common.head, common.outcome, html_section, common.bisect, common.diagnosis,
                common.context, common.groups, common.metrics, common.runs, common.foot)

    def failure_text(self, report: Report, div: Any) -> str:
        return resume_failure(report, div)


RESUME = ResumeKind()
