"""``bisect``'s part of a report, in every output: the first commit that differs and where,
every commit tested, the runs and time it took, where the bisect log is (the terminal's lines,
the page's section, the CI line). A bisect adds its part to a check's or a verify's report."""

from __future__ import annotations

from typing import Any

from repro_check.report.htmlkit import escape, table
from repro_check.report.model import BisectPart, Report


def bisect_lines(part: BisectPart) -> list[str]:
    """The bisect's result in lines, for every renderer."""
    lines = []
    if part.first_bad:
        c = part.first_bad
        lines.append(f"first commit that differs: {c.sha[:12]} {c.subject} "
                     f"({c.date}, {c.author})")
        where = f"step {part.step}, signal {part.signal}" if part.step else f"signal {part.signal}"
        if part.op:
            where += f", op {part.op}" + (f" in module {part.module!r}" if part.module else "")
        lines.append(f"  {where}")
        drift = part.drift.to_dict() if part.drift is not None else {}
        if drift.get("max_abs") is not None:
            final = drift.get("final_abs")
            lines.append(f"  loss drift: largest |Δ| {drift['max_abs']:.3g} at step "
                         f"{drift.get('max_at')}, final "
                         f"{'?' if final is None else format(final, '.3g')}")
    elif part.matches:
        lines.append(f"BAD {part.bad.sha[:12]} matches {part.reference}: no commit differs")
    elif part.undecided:
        lines.append("undecided: the first commit that differs is one of "
                     f"{', '.join(s[:12] for s in part.undecided)} (skipped: the target fails)")
    lines.append(f"{part.runs} run(s) ({len(part.tested)} commit(s) tested of {part.candidates}, "
                 f"{len(part.skipped)} skipped) + {part.probe_runs} probe run(s) in "
                 f"{part.seconds:.1f} s")
    for t in part.tested:
        lines.append(f"  {t.sha[:12]} {t.verdict:4}  {t.subject}")
    if part.log_path:
        lines.append(f"bisect log: {part.log_path}")
    return lines


def terminal_parts(part: BisectPart) -> list[Any]:
    """The bisect's lines under the report's summary, headed."""
    from rich.text import Text

    return [Text("Bisect", style="bold"), *(Text(line) for line in bisect_lines(part))]


def html_section(report: Report) -> list[str]:
    """With ``bisect``: the first commit that differs, and every commit tested."""
    part = report.bisect
    if part is None:
        return []
    lines = bisect_lines(part)
    rows = [([t.sha[:12], t.verdict, t.step or "—", t.signal or "—", t.subject, t.date],
             "differs" if t.verdict == "bad" else "") for t in part.tested]
    return ['<h2>Bisect</h2>', f'<p id="bisect">{escape(lines[0])}</p>',
            *(f"<p>{escape(line.strip())}</p>" for line in lines[1:2] if line.startswith("  ")),
            table(["commit", "verdict", "first step", "signal", "subject", "date"], rows)]


def bisect_failure(target: str, part: BisectPart) -> str:
    """``bisect``'s CI line: the first commit that differs (hash, subject, date) and where it
    parts, not only that commit's comparison with the reference."""
    c = part.first_bad
    assert c is not None, "a bisect that found its commit"
    when = f" ({c.date})" if c.date else ""
    where = f"step {part.step}, signal {part.signal}" if part.step is not None \
        else f"signal {part.signal}"
    if part.op:
        where += f", op {part.op}" + (f" in module {part.module!r}" if part.module else "")
    return (f"{target}: the first commit that differs from {part.reference} is "
            f"{c.sha[:12]} {c.subject}{when}: {where}")
