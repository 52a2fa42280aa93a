"""The HTML page's pieces every part of a report draws with: escaping, numbers, tables and the
plots (matplotlib on use, embedded as PNG data). Rich-free and import-light: each part's module
writes its own section of the page with them."""

from __future__ import annotations

import base64
import html
import io
import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

from repro_check.compare.series import Thinned
from repro_check.errors import UsageError
from repro_check.trace import values
from repro_check.trace.format import iter_records
from repro_check.trace.protocol import StepRecord

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
def new_figure() -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(FIG_W / DPI, FIG_H / DPI), dpi=DPI)
    ax = fig.subplots()
    ax.grid(True, color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig, ax


def png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def legend(ax: Any) -> None:
    """The legend above the plot, outside the axes: inside, it covers points wherever it goes."""
    labels = ax.get_legend_handles_labels()[1]
    # as many columns as fit the plot's width (long environment names: fewer, in more rows)
    per_row = max(1, min(len(labels), 4, 110 // (max(map(len, labels), default=1) + 6)))
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.01), ncol=per_row, fontsize=9,
              frameon=False, borderaxespad=0)


def pad_steps(ax: Any, first: float, last: float) -> None:
    """Room on both sides of the steps, so that a marker at the first or last step is drawn
    clear of the axis, not over it (half a step, or 2 % of a long run)."""
    pad = max(0.5, 0.02 * (last - first))
    ax.set_xlim(first - pad, last + pad)


def mark_divergence(ax: Any, step: int | None) -> None:
    if step is not None:
        ax.axvline(step, color=MARKER_COLOR, linewidth=2.5, zorder=5,
                   label=f"first divergence (step {step})")


def draw_curves(ax: Any, curves: dict[int, list[tuple[int, float]]], labels: dict[int, str]) -> None:
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
    fig, ax = new_figure()
    draw_curves(ax, curves, {k: (names or {}).get(k, f"run {k}") for k in curves})
    step = divergence.step if divergence is not None else None
    mark_divergence(ax, step)
    if step is not None:
        for enc in (divergence.reference, divergence.value):
            if isinstance(enc, dict):
                y = values.to_float(enc)
                if not (math.isnan(y) or math.isinf(y)):
                    ax.plot([step], [y], marker="o", markersize=9, markerfacecolor="none",
                            markeredgecolor=MARKER_COLOR, markeredgewidth=2, zorder=6)
    xs_all = [x for pts in curves.values() for x, _ in pts] + ([step] if step else [])
    pad_steps(ax, min(xs_all), max(xs_all))
    ys_all = [y for pts in curves.values() for _, y in pts]
    if min(ys_all) > 0 and max(ys_all) / min(ys_all) > 50:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    legend(ax)
    return png(fig)


def difference_plot(series: dict[str, Sequence[tuple[int, float]]], step: int | None) -> str | None:
    """Differences per step on a log scale (steps where the values agree are left out)."""
    shown = {label: [(s, v) for s, v in pts if v > 0 and not math.isinf(v)]
             for label, pts in series.items()}
    shown = {label: pts for label, pts in shown.items() if pts}
    if not shown:
        return None
    fig, ax = new_figure()
    steps = [s for pts in series.values() for s, _ in pts]
    pad_steps(ax, min(steps), max(steps))  # the whole run, equal steps included
    colors = ["#444444", "#d62728"] if len(shown) <= 2 else RUN_COLORS[1:]
    for i, (label, pts) in enumerate(shown.items()):
        xs, ys = zip(*pts)
        ax.plot(xs, ys, color=colors[i % len(colors)], linewidth=1.4, marker=".",
                markersize=3 if len(xs) > 200 else 6, label=label)
    mark_divergence(ax, step)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("difference")
    legend(ax)
    return png(fig)


def escape(x: Any) -> str:
    return html.escape(str(x), quote=True)


def value_cell(enc: Any) -> str:
    if isinstance(enc, dict):
        return values.readable(enc)
    return "—" if enc is None else str(enc)


def number(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def table(head: Sequence[str], rows: Iterable[tuple[Sequence[Any], str]], cls: str = "") -> str:
    out = [f'<table class="{cls}"><thead><tr>' if cls else "<table><thead><tr>", *(f"<th>{escape(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for cells, cls in rows:
        out.append(f'<tr class="{cls}">' if cls else "<tr>")
        out += [f"<td>{escape(c)}</td>" for c in cells]
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def resume_plot(curves: dict[int, list[tuple[int, float]]], resumed_after: int,
                divergent: int | None, names: dict[int, str]) -> str | None:
    """The reference's and the resumed run's losses, the resume point and the first divergence
    marked; base64 PNG."""
    curves = {k: c for k, c in curves.items() if c}
    if not curves:
        return None
    fig, ax = new_figure()
    draw_curves(ax, curves, {k: names.get(k, str(k)) for k in curves})
    ax.axvline(resumed_after + 0.5, color="#888888", linewidth=2, linestyle=":",
               label=f"resumed after step {resumed_after}")
    mark_divergence(ax, divergent)
    xs_all = [x for pts in curves.values() for x, _ in pts]
    pad_steps(ax, min(xs_all), max(xs_all))
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    legend(ax)
    return png(fig)
