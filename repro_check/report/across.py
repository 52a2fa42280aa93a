"""The terminal summary of ``--across``: every environment with its versions and its time per
step, then one row a pair (each environment against the first) with the verdict, where and in
which op they part, and a sparkline of the loss drift; the price of determinism; the metrics."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from repro_check.report.contents import PriceRow
from repro_check.report.htmlkit import FIG_H, FIG_W, difference_plot, escape, number, table
from repro_check.report.model import AcrossPair, AcrossPart, BisectCommit, Report
from repro_check.report.part import PageSections, RunsByReport, Section
from repro_check.report.terminal import (
    SPARK_EQUAL,
    SPARK_LEVELS,
    Sparkline,
    failure_parts,
    footer_parts,
    verdict,
)
from repro_check.report.text import diff_text, divergence_failure, verdict_style

#: the revision that stands for the working tree (:data:`repro_check.run.revisions.WORKTREE`)
WORKTREE = "WORKTREE"
#: cells of a pair's drift sparkline
SPARK_CELLS = 12
#: version columns, shown when the environments differ in them (or an axis is about them)
VERSION_COLUMNS = (("python", "Python"), ("torch", "torch"), ("cuda", "CUDA"),
                   ("numpy", "numpy"), ("device", "device"))


#: an environment's label takes at least this much of a table's width before it folds (less
#: in the pairs table, whose other columns take more)
LABEL_WIDTH = 24
PAIR_LABEL_WIDTH = 16


def label_width(part: AcrossPart, most: int = LABEL_WIDTH) -> int:
    return min(most, max(len(c.label) for c in part.cells))


def seconds_text(x: float | None) -> str:
    """A duration short enough for a table cell."""
    if x is None:
        return "—"
    return f"{x * 1000:.3g} ms" if x < 1 else f"{x:.3g} s"


#: the colour of each pair verdict
VERDICT_STYLE = {"bit-identical": "green", "agrees": "yellow", "differs": "red"}


def pair_verdict(pair: AcrossPair) -> Text:
    return Text(pair.verdict, style=VERDICT_STYLE[pair.verdict])


def drift_cells(pair: AcrossPair) -> str:
    if pair.drift is None or not pair.drift.series:
        return "—"
    return Sparkline(pair.drift.series).cells(SPARK_CELLS)


def _head(report: Report, part: AcrossPart) -> Panel:
    head = Text.assemble(verdict(report), "  ", (report.target, "bold"))
    seed = "no seeding" if report.seed is None else f"seed {report.seed}"
    flags = " ".join(f"{name}={('|' if name == 'args' else ',').join(vals)}"
                     for name, vals in part.axes)
    each = f"{part.runs_per_cell} run{'s' if part.runs_per_cell > 1 else ''} each"
    head.append(f"\nacross {flags} · {len(part.cells)} environments · {each} · {seed}"
                f" · {report.policy.describe()}")
    head.append(f"\nseeding: {', '.join(report.components) or 'none'}")
    return Panel(head, box=box.ROUNDED, expand=False, border_style=verdict_style(report))


def _shown_versions(part: AcrossPart) -> list[tuple[str, str]]:
    kinds = {name.split(":")[0] for name, _ in part.axes}
    out = []
    for key, title in VERSION_COLUMNS:
        seen = {str(c.versions.get(key)) for c in part.cells}
        if len(seen) > 1 or "python" in kinds and key in ("torch", "cuda", "numpy") or \
                "device" in kinds and key in ("device", "cuda"):
            out.append((key, title))
    return out


def environments_table(part: AcrossPart) -> Table:
    """Every environment: steps, time per step (the whole run over its steps, and between its
    first and last step), the versions that differ or that its axis is about."""
    t = Table(title="Environments", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
              pad_edge=False)
    t.add_column("environment", overflow="fold", min_width=label_width(part))
    t.add_column("steps", justify="right")
    t.add_column("per step", justify="right")
    t.add_column("in the loop", justify="right")
    versions = _shown_versions(part)
    for _, title in versions:
        t.add_column(title, overflow="fold")
    own = part.runs_per_cell > 1
    if own:
        t.add_column(f"its {part.runs_per_cell} runs")
    for c in part.cells:
        row = [c.label, str(c.steps), seconds_text(c.per_step),
               seconds_text(c.loop_per_step)]
        row += [str(c.versions.get(key) or "—") for key, _ in versions]
        if own:
            row.append("agree" if c.reproducible else "differ")
        t.add_row(*row)
    return t


def pairs_table(part: AcrossPart, tolerance: bool) -> Table:
    """One row a pair: verdict, first divergent step and signal, drift (the culprit op is
    named in a line below, where it has room)."""
    first = part.cells[0].label
    t = Table(title=f"Each environment against {first}", title_justify="left",
              box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    t.add_column("environment", overflow="fold",
                 min_width=label_width(part, PAIR_LABEL_WIDTH))
    t.add_column("verdict", no_wrap=True)
    t.add_column("from", justify="right", no_wrap=True)
    t.add_column("max |Δ loss|", justify="right", no_wrap=True)
    t.add_column("final", justify="right", no_wrap=True)
    if tolerance:
        t.add_column("exceeds", justify="right", no_wrap=True)
    t.add_column("drift", no_wrap=True, style="magenta")
    for p in part.pairs:
        d = p.drift
        where = f"{p.first_divergent_step} {p.signal}" if p.first_divergent_step else \
            (p.signal or "—")
        row: list[Any] = [p.b, pair_verdict(p), where if not p.identical else "—",
                          diff_text(d.max_abs) if d else "—", diff_text(d.final_abs) if d else "—"]
        if tolerance:
            row.append(str(d.exceeds_at) if d and d.exceeds_at else "—")
        t.add_row(*row, drift_cells(p))
    return t


def _notes(part: AcrossPart) -> list[Any]:
    """Per pair that parts: where, and what the culprit op did."""
    out: list[Any] = []
    for p in part.pairs:
        loc = p.localization
        if loc is not None and loc.detail:
            out.append(Text.assemble((f"  {p.b}: ", "bold"), f"step {loc.step}, ",
                                     str(loc.detail)))
        elif not p.identical and p.first_divergent_step is not None:
            out.append(Text.assemble((f"  {p.b}: ", "bold"),
                                     f"first differs at step {p.first_divergent_step}, signal "
                                     f"{p.signal}"))
        d = p.drift
        if d is not None and d.first_at is not None:
            out.append(Text(f"  {p.b}: the loss bits differ from step {d.first_at}, at "
                            f"{d.differing_steps} of {d.steps} steps; largest at step "
                            f"{d.max_at}", style="dim"))
        if p.drift is not None and p.drift.nonfinite_at is not None:
            out.append(Text(f"  {p.b}: the loss is not a number on one side from step "
                            f"{p.drift.nonfinite_at}", style="yellow"))
        if p.loading_note:
            out.append(Text.assemble((f"  {p.b}: ", "bold"), p.loading_note))
        if p.scaling_note:
            out.append(Text.assemble((f"  {p.b}: ", "bold"), p.scaling_note))
    return out


def price_text(row: PriceRow) -> str:
    """One price-of-determinism row in words: each side's time per step with the spread of its
    step times, and the cost, or "within noise" when the difference is inside that spread."""
    ratio = row.ratio
    cost = "—" if ratio is None else f"{(ratio - 1) * 100:+.1f} %"
    how = "between the first and the last step" if row.measure == "loop" \
        else "the whole run over its steps"

    def side(label: str, per_step: float | None, spread: float | None) -> str:
        pm = f" ± {seconds_text(spread)}" if spread is not None else ""
        return f"{label}: {seconds_text(per_step)}{pm}/step"

    if row.within_noise:
        cost = f"within noise ({cost}, inside the spread of the step times)"
    return (f"{side(row.on, row.on_seconds_per_step, row.on_step_spread)}, "
            f"{side(row.off, row.off_seconds_per_step, row.off_step_spread)}: {cost} ({how})")


def price_lines(part: AcrossPart) -> list[Any]:
    """The price of determinism (each deterministic=on environment against its off twin) and of
    torch.compile (each compile=on environment against its compile=off twin)."""
    out: list[Any] = []
    if part.price:
        out.append(Text("Price of determinism", style="bold"))
        out += [Text(f"  {price_text(row)}") for row in part.price]
    if part.compile_price:
        out.append(Text("Price of torch.compile", style="bold"))
        out += [Text(f"  {price_text(row)}") for row in part.compile_price]
        out += [Text(f"  whole run, compiling included: {seconds_text(row.on_run_seconds_per_step)}"
                     f"/step compiled, {seconds_text(row.off_run_seconds_per_step)}/step "
                     "eager", style="dim")
                for row in part.compile_price]
    return out


def revision_text(c: BisectCommit) -> str:
    """A revision's commit (hash, subject, date), or the working tree as it is."""
    if c.sha == WORKTREE:
        return c.subject
    when = f" ({c.date})" if c.date else ""
    return f"{c.sha[:12]} {c.subject}{when}"


def revision_lines(part: AcrossPart) -> list[Any]:
    """With a rev axis: the commit each revision names."""
    if not part.revisions:
        return []
    out: list[Any] = [Text("Revisions", style="bold")]
    for name, c in part.revisions.items():
        out.append(Text(f"  {name}: {revision_text(c)}"))
    return out


def metrics_table(part: AcrossPart) -> list[Any]:
    """The final metrics of every environment (a row each), each with its difference from the
    first environment's."""
    names: list[str] = []
    for p in part.pairs:
        names += [m.name for m in p.metrics if m.name not in names]
    if not names:
        return []
    t = Table(title="Metrics", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
              pad_edge=False)
    t.add_column("environment", overflow="fold", min_width=label_width(part))
    for name in names:
        t.add_column(name, justify="right")
        t.add_column("|Δ|", justify="right")
    rows: dict[str, list[str]] = {part.cells[0].label: []}
    for name in names:
        first = next((m.a for p in part.pairs for m in p.metrics if m.name == name), None)
        rows[part.cells[0].label] += [_plain(first), ""]
    for p in part.pairs:
        row = rows.setdefault(p.b, [])
        for name in names:
            m = next((m for m in p.metrics if m.name == name), None)
            if m is None:
                row += ["—", "—"]
            else:
                row += [_plain(m.b), "0" if m.identical else diff_text(m.abs_diff)]
    for label, cells in rows.items():
        t.add_row(label, *cells)
    return [t]


def _plain(v: Any) -> str:
    return "—" if v is None else str(v)


def _legend(part: AcrossPart) -> Text | None:
    if not any(p.drift is not None for p in part.pairs):
        return None
    return Text(f"drift: |Δ loss| on a log scale per pair ({SPARK_LEVELS[0]} smallest … "
                f"{SPARK_LEVELS[-1]} largest, {SPARK_EQUAL} equal); a bit-identical pair has "
                "none", style="dim")


def summary(report: Report) -> Group:
    """The whole ``--across`` result as rich renderables."""
    part = report.across
    assert part is not None, "an --across report"
    parts: list[Any] = [_head(report, part), *failure_parts(report, _run_label(part))]
    if report.interrupted:
        parts.append(Text("Interrupted: the runs were stopped; what they recorded is kept in the "
                          "traces.", style="yellow"))
    parts.append(environments_table(part))
    if part.pairs:
        parts.append(pairs_table(part, not report.policy.for_name("loss").exact))
        legend = _legend(part)
        if legend is not None:
            parts.append(legend)
        parts += _notes(part)
    parts += price_lines(part)
    parts += revision_lines(part)
    parts += metrics_table(part)
    parts += footer_parts(report)
    return Group(*parts)


def _run_label(part: AcrossPart) -> Any:
    """Names a failed run by its environment."""
    def label(result: Any) -> str:
        for c in part.cells:
            if result.index in c.runs:
                return f"run {result.index} ({c.label})"
        return f"run {result.index}"

    return label


def html_section(report: Report) -> list[str]:
    """With ``--across``: every pair's verdict, culprit and drift (plotted on a log scale), each
    environment's versions and time per step, and the price of determinism."""
    part = report.across
    if part is None:
        return []
    return [*_html_environments(part), *_html_pairs(part), *_html_revisions(part),
            *_html_drift(part), *_html_prices(part)]


def _html_environments(part: AcrossPart) -> list[str]:
    """Each environment's steps, time per step and versions."""
    return ['<h2>Environments</h2>', table(
        ["environment", "steps", "seconds", "per step", "in the loop", "Python", "torch", "CUDA",
         "numpy", "device"],
        [([c.label, c.steps, f"{c.seconds:.1f}", number(c.per_step), number(c.loop_per_step),
           *[c.versions.get(k) or "—" for k in ("python", "torch", "cuda", "numpy", "device")]],
          "") for c in part.cells], "env")]


def _html_pairs(part: AcrossPart) -> list[str]:
    """Each environment against the first: verdict, culprit, drift; then what each pair's
    localization and data loading say."""
    out = [f"<h2>Each environment against {escape(part.cells[0].label)}</h2>"]
    rows = []
    for p in part.pairs:
        d = p.drift
        rows.append(([p.b, p.verdict, p.first_divergent_step or "—", p.signal or "—",
                      p.culprit_op or "—", p.culprit or "—", number(d.max_abs) if d else "—",
                      number(d.final_abs) if d else "—", (d.exceeds_at if d else None) or "—"],
                     "" if p.identical else "differs"))
    out.append(table(["environment", "verdict", "first step", "signal", "culprit op", "module",
                       "max |Δ loss|", "final |Δ loss|", "exceeds at"], rows))
    for p in part.pairs:
        detail = p.localization.detail if p.localization is not None else None
        if detail:
            out.append(f"<p><b>{escape(p.b)}:</b> {escape(detail)}</p>")
        if p.loading_note:
            out.append(f'<p class="loading"><b>{escape(p.b)}:</b> {escape(p.loading_note)}</p>')
        if p.scaling_note:
            out.append(f'<p class="loading"><b>{escape(p.b)}:</b> {escape(p.scaling_note)}</p>')
    return out


def _html_revisions(part: AcrossPart) -> list[str]:
    """With a rev axis: the commit each revision named."""
    if not part.revisions:
        return []
    return ["<h2>Revisions</h2>", table(["revision", "commit", "subject", "date"],
                                         [([name, c.sha[:12], c.subject, c.date], "")
                                          for name, c in part.revisions.items()])]


def _html_drift(part: AcrossPart) -> list[str]:
    """The loss drift of each environment against the first, per step on a log scale."""
    img = difference_plot({f"|{p.b} − {p.a}|": p.drift.series for p in part.pairs
                           if p.drift is not None}, None)
    out = ["<h2>Loss drift per step</h2>"]
    if img:
        out.append(f'<figure id="drift-plot"><img alt="loss drift per step, log scale" '
                   f'width="{FIG_W}" height="{FIG_H}" src="data:image/png;base64,{img}">'
                   "<figcaption>|Δ loss| of each environment against the first, log scale; "
                   "steps where the losses are equal are left out.</figcaption></figure>")
    else:
        out.append("<p>The loss has the same bits in every environment at every step.</p>")
    return out


def _html_prices(part: AcrossPart) -> list[str]:
    """The price of determinism and of torch.compile: time per step on against off."""
    out = []
    if part.price:
        out.append("<h2>Price of determinism</h2>")
        out.append(table(["deterministic on", "per step", "± spread", "deterministic off",
                           "per step", "± spread", "on / off", ""],
                          [([r.on, number(r.on_seconds_per_step),
                             number(r.on_step_spread), r.off,
                             number(r.off_seconds_per_step), number(r.off_step_spread),
                             number(r.ratio), "within noise" if r.within_noise else ""],
                            "") for r in part.price]))
        out.append('<p class="sub">± spread: the standard deviation of the seconds between '
                   "consecutive steps; a difference inside it is within noise (a loaded machine "
                   "moves step times more than determinism does).</p>")
    if part.compile_price:
        out.append("<h2>Price of torch.compile</h2>")
        out.append(table(["compile on", "per step", "± spread", "compile off", "per step",
                           "± spread", "on / off", ""],
                          [([r.on, number(r.on_seconds_per_step), number(r.on_step_spread), r.off,
                             number(r.off_seconds_per_step), number(r.off_step_spread),
                             number(r.ratio), "within noise" if r.within_noise else ""],
                            "") for r in part.compile_price]))
    return out


class AcrossKind(RunsByReport):
    """``--across``: a report with an across part."""

    name = "across"

    def applies(self, report: Report) -> bool:
        return report.across is not None

    def terminal(self, report: Report) -> Any:
        return summary(report)

    def page(self, common: PageSections) -> tuple[Section, ...]:
        # no difference plot of the check's: the drift of every pair instead
        return (common.head, common.outcome, common.bisect, common.diagnosis, common.loss,
                html_section, common.context, common.groups, common.metrics, common.runs,
                common.foot)

    def failure_text(self, report: Report, div: Any) -> str:
        return divergence_failure(report, div)


ACROSS = AcrossKind()
