"""Terminal output of ``repro-check diagnose``: the check's summary, then the diagnosis."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from repro_check.compare.cause import EXPLANATION
from repro_check.report.richkit import hanging
from repro_check.report.terminal import make_console, summary
from repro_check.report.contents import AblationRow, Source, SourcesCost
from repro_check.report.htmlkit import escape, table
from repro_check.report.model import DiagnosisPart, Report
from repro_check.report.text import Visible, cause_shown
from repro_check.trace.results import Location


def ablation_table(rows: list[AblationRow], max_steps: int | None) -> Table:
    """component: needed / not needed for this workload, with what the pair without it showed."""
    scope = f", at most {max_steps} steps a run" if max_steps else ""
    t = Table(title=f"Seeding ablation (a pair of runs with the component off{scope})",
              box=box.SIMPLE_HEAD, title_justify="left", show_edge=False)
    t.add_column("component")
    t.add_column("for this workload")
    t.add_column("runs without it")
    for row in rows:
        name = row.component
        outcome = ablation_outcome(row)
        if name is None:
            t.add_row(Text("(no seeding at all)", style="dim"), "", outcome)
            continue
        verdict = row.verdict or ""
        style = {"needed": "bold", "unknown": "yellow"}.get(verdict, "dim")
        t.add_row(name, Text(verdict, style=style), outcome)
    return t


def ablation_outcome(row: AblationRow) -> str:
    """What the pair of an ablation row showed, in a few words."""
    pair = row.pair
    if pair.error:
        return f"failed: {pair.error[:60]}"
    if pair.reproducible:
        return "reproducible"
    step = pair.first_divergent_step
    where = f"step {step}" if step else "final metrics"
    return f"differ at {where} ({pair.divergent_signal})"


def diagnosis(report: Report) -> Group:
    """The diagnosis part: cause, culprit, flagged ops, ablation."""
    x = report.diagnosis
    assert x is not None, "a diagnosis report"
    parts: list[Any] = [Text("Diagnosis", style="bold underline")]
    # the cause and its paragraph stand once on the screen: the check's summary above has them
    # ("Cause: ..."), so the diagnosis says only a cause the summary leaves out (none)
    shown = cause_shown(report)
    said = shown
    if report.cause is not None and shown is None:
        parts.append(hanging(Text("cause: ", style="bold"),
                             Text.assemble((report.cause, "bold"), f" — {report.cause_detail}"
                                           if report.cause_detail else "")))
        said = report.cause_detail
    loc = x.localization
    if loc:
        if loc.found:
            module = x.culprit or "(outside any module)"
            parts.append(Text.assemble(
                ("culprit: ", "bold"), (module, "bold red"),
                *((" · op ", (x.culprit_op, "bold")) if x.culprit_op else
                  (" · compiled code (torch.compile)",)),
                f" · {loc.phase} · step {loc.step}"))
        if not (shown and loc.detail and loc.detail in shown):  # the cause's paragraph
            parts.append(Text(f"  {loc.detail}"))
        firsts = [f"{label} {first!r}" for first, label in (
            (loc.first_module_forward, "first module whose output differs:"),
            (loc.first_module_backward, "first module whose output gradient differs:"),
        ) if first]
        for line in firsts:
            parts.append(Text(f"  {line}", style="dim"))
    flagged = x.flagged_ops
    if flagged:
        t = Table(title="Ops PyTorch reports as nondeterministic", box=box.SIMPLE_HEAD,
                  title_justify="left", show_edge=False)
        t.add_column("op")
        t.add_column("first at step", justify="right")
        t.add_column("called from")
        for f in flagged:
            t.add_row(str(f.op), str(f.step), str(f.where or ""))
        parts.append(t)
    else:
        parts.append(Text("No op was reported as nondeterministic by PyTorch.", style="dim"))
    rows = x.ablation
    if rows:
        parts.append(ablation_table(rows, report.max_steps))
        needed = x.necessary_components or []
        parts.append(Text.assemble(("necessary components: ", "bold"),
                                   ", ".join(needed) if needed else "none"))
    if x.ablation_note:
        parts.append(Text(x.ablation_note, style="dim"))
    parts.extend(sources_block(x.sources, x.sources_cost, x.sources_note, said))
    return Group(*parts)


def _where(loc: Location | None) -> str:
    return f"{loc.site} in {loc.function}" if loc else ""


def sources_block(sources: list[Source], cost: SourcesCost | None,
                  note: str | None, shown: str | None = None) -> list[Any]:
    """Every source found by pinning and going on: one block each, the first in full. A
    source's paragraph that the screen already shows as the cause's (``shown``) is pointed
    at, not printed again."""
    if cost is None:
        return []
    out: list[Any] = []
    spent = f"{cost.runs} pinned runs, {cost.seconds:.1f} s"
    if not sources:
        out.append(Text(f"Sources: none: the runs agree ({spent})", style="dim"))
        return out
    out.append(Text(f"Sources of non-determinism, in the order found ({len(sources)}; {spent})",
                    style="bold underline"))
    for n, src in enumerate(sources, 1):
        step = f"step {src.step}" if src.step else "final metrics"
        on = f" · rank {src.rank}" if src.rank is not None else ""
        head = Text.assemble((str(src.cause), "bold"), f" · {step} · {src.signal}{on}")
        if src.culprit_op:
            head.append(f" · {src.culprit or '(outside any module)'} · "
                        f"{src.culprit_op}", style="bold red")
        # every line of a source hangs under its text, and every source gets its detail (what
        # differs and where it came from), as in the JSON
        lines: list[Text] = [head]
        if src.location:
            lines.append(Text(f"at {_where(src.location)}"))
        if src.detail and shown and str(src.detail) in shown:
            lines.append(Text("what differs and why: as the cause above says", style="dim"))
        elif src.detail:
            lines.append(Text(str(src.detail), style="dim"))
        if n == 1:
            for frame in (src.stack or [])[:-1][::-1]:
                lines.append(Text(f"  called from {_where(frame)}", style="dim"))
        pinned = src.pinned_by
        lines.append(Text(f"pinned by {pinned}" if pinned else "not pinned (the last)",
                          style="dim"))
        label = Text(f"{n}. ".ljust(3), style="bold")
        for i, line in enumerate(lines):
            out.append(hanging(label if i == 0 else Text(" " * len(label.plain)), line))
    if note:
        out.append(Text(note, style="dim" if "the runs agree" in note else "yellow"))
    return out


def print_diagnosis(report: Report, console: Console | None = None) -> None:
    console = console or make_console()
    console.print(Visible(summary(report)), crop=False)
    console.print(Visible(diagnosis(report)), crop=False)


# ---- the HTML page's section ----------------------------------------------------------------
def _page_where(loc: Location | None) -> str:
    if not loc:
        return ""
    func = f" in {loc.function}" if loc.function else ""
    return f"{loc.site}{func}"


def html_section(report: Report) -> list[str]:
    """What the cause is, where it was made (file:line) and what it means, as the terminal and
    the JSON say it; with ``diagnose``, the culprit op, the flagged ops, every source with its
    lines and the seeding ablation. A reproducible check has no cause to show."""
    part = report.diagnosis
    cause = report.cause
    if (cause in (None, "none")) and part is None:
        return []
    out = ["<h2>Diagnosis</h2>"]
    if cause not in (None, "none"):
        box = [f'<p><b>Cause: <span class="cause">{escape(cause)}</span></b>'
               + (f" — {escape(report.cause_detail)}" if report.cause_detail else "") + "</p>"]
        if report.cause_location:
            box.append(f"<p>at <code>{escape(_page_where(report.cause_location))}</code></p>")
        explanation = EXPLANATION.get(cause)
        if explanation and explanation not in (report.cause_detail or ""):
            box.append(f'<p class="sub">{escape(explanation)}</p>')
        out.append(f'<div class="diagnosis bad" id="diagnosis">{"".join(box)}</div>')
    elif cause == "none":
        out.append('<div class="diagnosis good" id="diagnosis"><p><b>No cause to find:</b> '
                   "every step and metric agree.</p></div>")
    if part is not None:
        out += _page_parts(report, part)
    return out


def _page_parts(report: Report, part: DiagnosisPart) -> list[str]:
    """``diagnose``'s own sections: the culprit op, flagged ops, sources, the ablation; what
    the cause's box above already says is pointed at, not said again."""
    out: list[str] = []
    said = report.cause_detail if report.cause not in (None, "none") else None
    loc = part.localization
    if loc:
        out.append("<h3>Culprit</h3>")
        if loc.found:
            op = (f"op <code>{escape(part.culprit_op)}</code>" if part.culprit_op
                  else "compiled code (torch.compile)")
            out.append(f'<p id="culprit"><b>{escape(part.culprit or "(outside any module)")}</b> · '
                       f"{op} · {escape(loc.phase)} · step {escape(loc.step)}</p>")
        if loc.detail and loc.detail not in (said or ""):  # once on the page
            out.append(f"<p>{escape(loc.detail)}</p>")
    out.append("<h3>Ops PyTorch reports as nondeterministic</h3>")
    if part.flagged_ops:
        out.append(table(["op", "first at step", "called from"],
                          [([f.op, f.step, f.where or ""], "")
                           for f in part.flagged_ops], "text"))
    else:
        out.append("<p>None was reported.</p>")
    if part.sources_cost is not None:
        out += _page_sources(part, said)
    if part.ablation:
        scope = f", at most {report.max_steps} steps a run" if report.max_steps else ""
        out.append(f"<h3>Seeding ablation (a pair of runs with the component off{escape(scope)})</h3>")
        rows = []
        for row in part.ablation:
            name = row.component
            verdict = row.verdict or ""
            rows.append(([name or "(no seeding at all)", verdict, ablation_outcome(row)],
                         "differs" if verdict == "needed" else ""))
        out.append(table(["component", "for this workload", "runs without it"], rows, "text"))
        needed = part.necessary_components or []
        out.append(f"<p><b>Necessary components:</b> {escape(', '.join(needed) or 'none')}</p>")
    if part.ablation_note:
        out.append(f'<p class="sub">{escape(part.ablation_note)}</p>')
    return out


def _page_sources(part: DiagnosisPart, said: str | None) -> list[str]:
    """Every source found by pinning one and going on, each with its file:line and detail (a
    detail the cause's box says (``said``) pointed at)."""
    cost = part.sources_cost or SourcesCost(0, 0.0)
    spent = f"{cost.runs} pinned runs, {float(cost.seconds):.1f} s"
    if not part.sources:
        return [f"<h3>Sources</h3><p>None: the runs agree ({escape(spent)}).</p>"]
    out = [f"<h3>Sources of non-determinism, in the order found ({len(part.sources)}; "
           f"{escape(spent)})</h3>", '<ol id="sources">']
    for src in part.sources:
        step = f"step {src.step}" if src.step else "final metrics"
        rank = f" · rank {src.rank}" if src.rank is not None else ""
        item = [f"<b>{escape(src.cause)}</b> · {escape(step)} · <code>{escape(src.signal)}</code>"
                f"{escape(rank)}"]
        if src.culprit_op:
            item[0] += (f" · {escape(src.culprit or '(outside any module)')} · "
                        f"<code>{escape(src.culprit_op)}</code>")
        if src.location:
            item.append(f"at <code>{escape(_page_where(src.location))}</code>")
        if src.detail and said and src.detail in said:
            item.append('<span class="sub">what differs and why: as the cause above says</span>')
        elif src.detail:
            item.append(escape(src.detail))
        for frame in (src.stack or [])[:-1][::-1]:
            item.append(f'<span class="sub">called from <code>{escape(_page_where(frame))}</code></span>')
        pinned = src.pinned_by
        item.append(f'<span class="sub">{escape(f"pinned by {pinned}" if pinned else "not pinned (the last)")}</span>')
        out.append("<li>" + "<br>".join(item) + "</li>")
    out.append("</ol>")
    if part.sources_note:
        out.append(f"<p>{escape(part.sources_note)}</p>")
    return out
