"""Terminal output of ``record``, ``verify`` and ``diff`` (rich; the check has render.py)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from repro_check.report.controlpart import control_parts
from repro_check.report.evidencepart import evidence_terminal
from repro_check.report.htmlkit import escape, table
from repro_check.compare.steps import Divergence
from repro_check.report.metricspart import MetricsView
from repro_check.report.model import GatePart, Report
from repro_check.report.part import PageSections, Section
from repro_check.trace.results import RunResult
from repro_check.report.terminal import (
    Unwrapped,
    failure_parts,
    make_console,
    verdict,
)
from repro_check.report.text import (Visible, agreement, diff_text, divergence_failure,
                                     value_text)


def judged_text(judged: dict[str, int]) -> str:
    """``38 exact, 2 band``: what accepted the values that agreed."""
    order = ["exact", "tolerance", "band"]
    keys = [k for k in order if k in judged] + sorted(k for k in judged if k not in order)
    return ", ".join(f"{judged[k]} by {'exact bits' if k == 'exact' else k}" for k in keys)


def _seed_text(report: Report) -> str:
    return "no seeding" if report.seed is None else f"seed {report.seed}"


def _head(report: Report) -> Text:
    gate = report.gate
    assert gate is not None, "a gate report"
    mode = gate.mode
    head = Text.assemble(verdict(report), "  ", (report.target, "bold"))
    head.append(evidence_terminal(report))
    steps = [r.steps for r in report.results]
    if mode == "verify":
        head.append(f"\ngolden ({steps[0]} steps) · this run "
                    f"{steps[1] if len(steps) > 1 else 0} steps · {_seed_text(report)}")
    elif mode == "diff":
        labels = report.labels
        head.append(f"\n{labels[0]} ({steps[0]} steps) vs {labels[1]} ({steps[1]} steps)")
    elif mode == "record":
        head.append(f"\n{_seed_text(report)} · {report.runs} run(s) · steps recorded "
                    f"{', '.join(map(str, steps))}")
    if mode != "record":
        head.append(f"\njudged by: {report.policy.describe()}"
                    f"{'; bands stored in the golden' if _has_band(report) else ''}")
    return head


def _path_lines(report: Report) -> list[Any]:
    """The files compared, each on a line of its own that is never wrapped (paths are copied)."""
    gate = report.gate
    assert gate is not None
    if gate.mode == "diff":
        return [Unwrapped(f"A: {gate.a}"), Unwrapped(f"B: {gate.b}")]
    if gate.golden:
        return [Unwrapped(f"golden: {gate.golden}")]
    return []


def _has_band(report: Report) -> bool:
    header = report.results[0].header if report.results else None
    golden = (header or {}).get("golden")
    return isinstance(golden, dict) and bool(golden.get("band"))


def summary(report: Report) -> Group:
    """The whole result of record, verify or diff as rich renderables."""
    parts: list[Any] = [Panel(_head(report), box=box.ROUNDED, expand=False)]
    gate = report.gate
    assert gate is not None, "a gate report"
    parts += _path_lines(report)
    if gate.mode != "diff":  # a saved trace has no output to show, only its error
        parts += failure_parts(report, label=lambda r: "the run")
    elif report.error is not None:
        parts.append(Text(f"error: {report.error}", style="red"))
    parts += _record_lines(report) if gate.mode == "record" else _compared_parts(report, gate)
    parts += control_parts(report)
    for w in report.warnings:
        parts.append(Text(f"warning: {w}", style="yellow"))
    if report.replay:  # never wrapped: it must paste back as one command
        parts.append(Text.assemble(("Replay: ", "bold"), report.replay, no_wrap=True,
                                   overflow="ignore"))
    if report.trace_dir:
        parts.append(Unwrapped(f"traces: {report.trace_dir}", style="dim"))
    return Group(*parts)


def _compared_parts(report: Report, gate: GatePart) -> list[Any]:
    """Verify's or diff's comparison: the first divergence (or the agreement), the values
    accepted, the environment differences, the metrics."""
    labels, cmp = report.labels, report.comparison
    parts: list[Any] = []
    div = cmp.divergence if cmp else None
    if div is not None:
        parts += _divergence_parts(div, labels, report.policy.describe())
    elif report.error is None and not report.interrupted and cmp is not None:
        parts.append(Text(agreement(cmp, report.results)))
    if cmp is not None and cmp.judged:
        parts.append(Text(f"values accepted: {judged_text(cmp.judged)}", style="dim"))
    diffs = gate.environment_differences
    diverged = cmp is not None and not cmp.reproducible
    if diffs:
        head = (f"The divergence comes with {len(diffs)} environment difference(s):"
                if diverged else f"Environment differences ({len(diffs)}), values agree:")
        parts.append(Text(head, style="bold yellow" if diverged else "bold"))
        for d in diffs:
            parts.append(Text(f"  {d.text}"))
    elif diverged and gate.environment_note:
        parts.append(Text(f"Note: {gate.environment_note}", style="yellow"))
    return parts + _metrics_table(report, labels)


def _divergence_parts(div: Divergence, labels: list[str], panel_policy: str) -> list[Any]:
    """The first divergence: where, on which signal, its values side by side (what judged it
    only when the panel's "judged by:" does not already say it)."""
    where = f"step {div.step}" if div.step is not None else "final metrics"
    parts: list[Any] = [Text.assemble(("First divergence: ", "bold"), f"{where}, signal ",
                                      (div.signal, "bold"), f", {labels[1]} vs {labels[0]}")]
    if div.detail:
        parts.append(Text(f"  {div.detail}"))
    if div.policy and div.policy != panel_policy:
        parts.append(Text(f"  judged by {div.policy}"))
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col, justify in (("", "left"), (labels[0], "right"), (labels[1], "right"),
                         ("|diff|", "right"), ("rel", "right")):
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    t.add_row(div.signal, value_text(div.reference), value_text(div.value), diff_text(div.abs_diff),
              diff_text(div.rel_diff))
    parts.append(t)
    if div.step is not None:
        parts.append(Text(f"  {div.later_steps} later step(s) differ too"))
    return parts


def _record_lines(report: Report) -> list[Any]:
    out: list[Any] = []
    if not report.recorded:
        return out
    gate = report.gate
    assert gate is not None
    if report.runs > 1:
        spread = gate.spread_steps
        if spread:
            out.append(Text(f"The runs spread at {spread} step(s) (widest {gate.widest_spread:.3g}); "
                            "verify accepts values inside that band."))
        else:
            out.append(Text(f"All {report.runs} runs agree exactly; the band stored is exact."))
    metrics = report.metrics_readable()[0] if report.results else {}
    if metrics:
        out.append(Text("metrics: " + ", ".join(f"{k}={v}" for k, v in metrics.items())))
    return out


def _metrics_table(report: Report, labels: list[str]) -> list[Any]:
    """Both sides' metrics, marked where the comparison found them to differ."""
    view = MetricsView.of(report, [1, 2], judged=report.comparison, say_skipped=False)
    return [] if view is None else view.terminal(labels[:2])


def print_summary(report: Report, console: Console | None = None) -> None:
    (console or make_console()).print(Visible(summary(report)), crop=False)


def html_section(report: Report) -> list[str]:
    """``verify`` and ``diff``: what was compared with what, and how the two environments
    differ (the golden comparison)."""
    gate = report.gate
    if gate is None or gate.mode == "record":
        return []
    out = ["<h2>Golden comparison</h2>" if gate.mode == "verify" else "<h2>Traces compared</h2>"]
    if gate.mode == "verify":
        out.append(f"<p>{escape(gate.labels[1])} against the golden <code>{escape(gate.golden)}</code>"
                   f" ({escape(gate.labels[0])}).</p>")
    else:
        out.append(f"<p>A: <code>{escape(gate.a)}</code><br>B: <code>{escape(gate.b)}</code></p>")
    diffs = gate.environment_differences
    if diffs:
        out.append(table(["environment", gate.labels[0], gate.labels[1]],
                          [([d.key, "—" if d.reference is None else d.reference,
                             "—" if d.value is None else d.value], "differs")
                           for d in diffs], "env"))
    else:
        out.append("<p>The two environments agree.</p>")
    # the cause's box above says the note when the cause is the environment: not said twice
    said = report.cause_detail if report.cause not in (None, "none") else None
    if gate.environment_note and gate.environment_note != said:
        out.append(f"<p>{escape(gate.environment_note)}</p>")
    return out


class GateKind:
    """``record``, ``verify`` and ``diff``: a report with a gate part."""

    name = "gate"

    def applies(self, report: Report) -> bool:
        return report.gate is not None

    def terminal(self, report: Report) -> Any:
        return summary(report)

    def page(self, common: PageSections) -> tuple[Section, ...]:
        return (common.head, common.outcome, common.bisect, common.diagnosis, html_section,
                common.loss, common.difference, common.context, common.groups, common.metrics,
                common.runs, common.foot)

    def failure_text(self, report: Report, div: Any) -> str:
        text = divergence_failure(report, div)
        note = report.gate.environment_note if report.gate else None
        return f"{text}; {note}" if note else text

    def run_name(self, report: Report, index: int) -> str:
        """The golden and this run (``verify``), A and B (``diff``)."""
        if report.gate is not None and 1 <= index <= len(report.gate.labels):
            return report.gate.labels[index - 1]
        return report.run_name(index)

    def sides(self, report: Report, div: Any) -> tuple[str, str]:
        labels = report.labels
        return labels[0], labels[1]

    def timed_runs(self, report: Report) -> list[RunResult]:
        """``verify``: this run, not the golden's; ``diff``: none (both were read from files)."""
        mode = report.gate.mode if report.gate else None
        return report.results[1:] if mode == "verify" else [] if mode == "diff" \
            else list(report.results)


GATE = GateKind()
