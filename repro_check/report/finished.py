"""``diff`` of two finished runs, in every output: what two runs left (their scalar logs or their
checkpoints) compared without running anything (:mod:`repro_check.finished`). The terminal shows
each scalar's first differing step, largest and final |A - B| with a drift sparkline, or each
checkpoint key that differs; the HTML page and the CI outputs show the same verdict and first
difference in brief."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from repro_check.finished.checkpoints import CheckpointsDiff, EntryDiff
from repro_check.finished.logs import LogsDiff, ScalarDiff
from repro_check.report.htmlkit import escape, table
from repro_check.report.model import FinishedPart, Report
from repro_check.report.part import PageSections, Section
from repro_check.report.terminal import Sparkline, Unwrapped, footer_parts, verdict
from repro_check.trace.results import RunResult

#: cells of a scalar's drift sparkline
SPARK_CELLS = 24
#: rows shown of a table (scalars, differing keys) and names listed inline
SHOWN_ROWS = 30
SHOWN_NAMES = 8


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.6g}"


def _exact(x: float | None) -> str:
    """A logged value in full (the shortest text that reads back as the same float)."""
    return "—" if x is None else repr(x)


def _names(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else ""
    return ", ".join(names[:SHOWN_NAMES]) + more


def _part(report: Report) -> FinishedPart:
    part = report.finished
    assert part is not None, "a report of finished runs"
    return part


def _scalar_sentence(s: ScalarDiff, labels: list[str]) -> str:
    if s.first_reason == "only_in_a":
        return f"step {s.first_divergent_step}, scalar {s.name}: logged by {labels[0]} only"
    if s.first_reason == "only_in_b":
        return f"step {s.first_divergent_step}, scalar {s.name}: logged by {labels[1]} only"
    return (f"step {s.first_divergent_step}, scalar {s.name}: A {_exact(s.a_value)}, "
            f"B {_exact(s.b_value)}")


def _entry_sentence(e: EntryDiff, labels: list[str]) -> str:
    if e.status == "shape":
        return f"key {e.key}: shape {e.shape_a} vs {e.shape_b}"
    if e.status == "dtype":
        return f"key {e.key}: dtype {e.dtype_a} vs {e.dtype_b}"
    if e.status == "type":
        return f"key {e.key}: {e.a_value!r} vs {e.b_value!r}"
    if e.kind == "value":
        return f"key {e.key}: A {e.a_value!r}, B {e.b_value!r}"
    return (f"key {e.key}: {e.differing_elements} element(s) differ, max |diff| "
            f"{_num(e.max_abs_diff)}, max rel {_num(e.max_rel_diff)}")


def first_sentence(part: FinishedPart) -> str | None:
    """The first difference in words (None when A and B agree)."""
    labels = part.labels
    logs, ck = part.logs, part.checkpoints
    if logs is not None:
        if logs.first is not None:
            return _scalar_sentence(logs.first, labels)
        if logs.scalars_only_in_a:
            return f"scalar(s) logged by {labels[0]} only: {_names(logs.scalars_only_in_a)}"
        if logs.scalars_only_in_b:
            return f"scalar(s) logged by {labels[1]} only: {_names(logs.scalars_only_in_b)}"
        return None
    if ck is None:
        return None
    if ck.first_differing_key is not None:
        key = ck.first_differing_key
        entry = next((e for e in ck.entries if e.key == key), None)
        if entry is not None:
            return _entry_sentence(entry, labels)
        side = labels[0] if key in ck.keys_only_in_a else labels[1]
        return f"key {key}: held by {side} only"
    if ck.files_only_in_a:
        return f"file(s) in {labels[0]} only: {_names(ck.files_only_in_a)}"
    if ck.files_only_in_b:
        return f"file(s) in {labels[1]} only: {_names(ck.files_only_in_b)}"
    return None


def evidence(part: FinishedPart) -> str:
    """What the verdict rests on: the scalars and steps, or the tensors and values compared."""
    if part.logs is not None:
        steps = sum(s.steps_compared for s in part.logs.scalars)
        return f"{len(part.logs.scalars)} scalar(s) compared over {steps} logged value(s)"
    ck = part.checkpoints
    if ck is None:
        return "nothing compared"
    files = f" in {len(ck.files)} file(s)" if ck.format == "checkpoint-folder" else ""
    return (f"{ck.tensors_compared} tensor(s) compared, {ck.tensors_identical} with identical "
            f"bits, {ck.values_compared} other value(s){files}")


# ---- terminal ---------------------------------------------------------------------------------
def _logs_parts(logs: LogsDiff, labels: list[str]) -> list[Any]:
    parts: list[Any] = []
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col, justify in (("", "left"), ("scalar", "left"), ("steps", "right"),
                         ("first differs", "right"), ("max |Δ| (step)", "right"),
                         ("final |Δ|", "right"), ("only A/B", "right"), ("|Δ| over steps", "left")):
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    for s in logs.scalars[:SHOWN_ROWS]:
        peak = "—" if s.max_abs_diff is None else "0" if s.max_abs_diff == 0 else \
            f"{_short(s.max_abs_diff)} ({s.max_abs_step})"
        spark = Sparkline(s.drift).cells(SPARK_CELLS) if s.drift else ""
        t.add_row("≠" if not s.same else "", s.name, str(s.steps_compared),
                  "—" if s.same else str(s.first_divergent_step), peak,
                  _short(s.final_abs_diff) or "—",
                  f"{s.steps_only_in_a}/{s.steps_only_in_b}", spark,
                  style="red" if not s.same else None)
    parts.append(t)
    if len(logs.scalars) > SHOWN_ROWS:
        parts.append(Text(f"  and {len(logs.scalars) - SHOWN_ROWS} more scalar(s) "
                          "(all in --json)", style="dim"))
    if logs.scalars_only_in_a:
        parts.append(Text(f"Logged by {labels[0]} only: {_names(logs.scalars_only_in_a)}",
                          style="red"))
    if logs.scalars_only_in_b:
        parts.append(Text(f"Logged by {labels[1]} only: {_names(logs.scalars_only_in_b)}",
                          style="red"))
    if logs.scalars_skipped:
        parts.append(Text(f"Not compared, as timing or memory figures: "
                          f"{_names(logs.scalars_skipped)} (compare one with --atol "
                          "metric:NAME=0)", style="dim"))
    return parts


def _short(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"


def _what(e: EntryDiff) -> str:
    """How a differing key differs, in a few words."""
    if e.status == "dtype":
        return f"dtype {e.dtype_a} / {e.dtype_b}"
    if e.status == "shape":
        return f"shape {e.shape_a} / {e.shape_b}"
    if e.kind == "value":
        return f"{e.a_value!r} / {e.b_value!r}"
    return f"{e.dtype_a}[{','.join(map(str, e.shape_a or []))}]"


def _checkpoint_parts(ck: CheckpointsDiff, labels: list[str]) -> list[Any]:
    parts: list[Any] = []
    differing = ck.differing
    if differing:
        t = Table(title="Keys that differ", title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False)
        widest = max(len(e.key) for e in differing[:SHOWN_ROWS])
        t.add_column("key", no_wrap=True, min_width=min(widest, 60))
        t.add_column("what", overflow="fold")
        for col in ("elements", "max |Δ|", "max rel"):
            t.add_column(col, justify="right", no_wrap=True)
        for e in differing[:SHOWN_ROWS]:
            t.add_row(e.key, _what(e),
                      "" if e.differing_elements is None else str(e.differing_elements),
                      _short(e.max_abs_diff), _short(e.max_rel_diff), style="red")
        parts.append(t)
        if len(differing) > SHOWN_ROWS:
            parts.append(Text(f"  and {len(differing) - SHOWN_ROWS} more (all in --json)",
                              style="dim"))
    for what, names, label in (("Keys", ck.keys_only_in_a, labels[0]),
                               ("Keys", ck.keys_only_in_b, labels[1]),
                               ("Files", ck.files_only_in_a, labels[0]),
                               ("Files", ck.files_only_in_b, labels[1])):
        if names:
            parts.append(Text(f"{what} in {label} only ({len(names)}): {_names(names)}",
                              style="red"))
    within = sum(1 for e in ck.entries if e.status == "within_tolerance")
    if within:
        parts.append(Text(f"{within} key(s) differ within the tolerance ({ck.tolerance})",
                          style="dim"))
    return parts


def summary(report: Report) -> Group:
    part = _part(report)
    labels = part.labels
    head = Text.assemble(verdict(report), "  ", ("finished runs", "bold"),
                         f" · {part.format} · {evidence(part)}")
    judged = part.logs.tolerance if part.logs is not None else \
        part.checkpoints.tolerance if part.checkpoints is not None else ""
    head.append(f"\njudged by: {judged}")
    parts: list[Any] = [Panel(head, box=box.ROUNDED, expand=False),
                        Unwrapped(f"A: {part.a}"), Unwrapped(f"B: {part.b}")]
    sentence = first_sentence(part)
    if sentence is not None:
        parts.append(Text.assemble(("First difference: ", "bold"), sentence))
    elif report.error is None:
        parts.append(Text(f"{labels[0]} and {labels[1]} agree: {evidence(part)}."))
    if part.logs is not None:
        parts += _logs_parts(part.logs, labels)
    if part.checkpoints is not None:
        parts += _checkpoint_parts(part.checkpoints, labels)
    parts += footer_parts(report)
    return Group(*parts)


# ---- HTML -------------------------------------------------------------------------------------
def html_section(report: Report) -> list[str]:
    """The two paths, the first difference, and the scalars or the differing keys as a table."""
    part = _part(report)
    out = ["<h2>Finished runs compared</h2>",
           f"<p>{escape(part.format)}<br>A: <code>{escape(part.a)}</code><br>"
           f"B: <code>{escape(part.b)}</code><br>{escape(evidence(part))}</p>"]
    sentence = first_sentence(part)
    out.append(f'<p id="first-difference"><b>First difference:</b> {escape(sentence)}</p>'
               if sentence else "<p>A and B agree.</p>")
    if part.logs is not None:
        out.append(table(["scalar", "steps", "first differs", "max |Δ|", "at step", "final |Δ|"],
                         [([s.name, s.steps_compared, s.first_divergent_step or "—",
                            _num(s.max_abs_diff), s.max_abs_step or "—",
                            _num(s.final_abs_diff)], "" if s.same else "differs")
                          for s in part.logs.scalars]))
    if part.checkpoints is not None and part.checkpoints.differing:
        out.append(table(["key", "what", "max |Δ|", "max rel"],
                         [([e.key, e.status, _num(e.max_abs_diff), _num(e.max_rel_diff)],
                           "differs") for e in part.checkpoints.differing[:200]]))
    return out


class FinishedKind:
    """``diff`` of two finished runs: a report with a finished part."""

    name = "finished"

    def applies(self, report: Report) -> bool:
        return report.finished is not None

    def terminal(self, report: Report) -> Any:
        return summary(report)

    def page(self, common: PageSections) -> tuple[Section, ...]:
        # nothing ran: no curves of runs, no run table; the head, this part and the foot
        return (common.head, html_section, common.foot)

    def failure_text(self, report: Report, div: Any) -> str:
        """The first difference in one line (``div``: unused, a finished diff has no step
        comparison)."""
        part = _part(report)
        return f"{report.target}: {first_sentence(part) or 'differs'}"

    def run_name(self, report: Report, index: int) -> str:
        labels = _part(report).labels
        return labels[index - 1] if 1 <= index <= len(labels) else f"run {index}"

    def sides(self, report: Report, div: Any) -> tuple[str, str]:
        labels = _part(report).labels
        return labels[0], labels[1]

    def timed_runs(self, report: Report) -> list[RunResult]:
        """None: both sides were read from files."""
        return []


FINISHED = FinishedKind()
