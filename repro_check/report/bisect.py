"""``bisect``'s result in lines: the first commit that differs and where, every commit tested,
the runs and time it took, where the bisect log is."""

from __future__ import annotations

from repro_check.report.model import BisectPart


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
