"""Small pieces of text every renderer shares: values, differences, verdicts, a run's output (a part
of the report with outputs of its own renders them in its own module: ``savedpart``, ``failedpart``,
``evidencepart``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from repro_check.compare.printed import HOW_TO_GET_A_METRIC
from repro_check.compare.saved import SavedDivergence
from repro_check.compare.steps import ComparisonResult
from repro_check.report.failedpart import stopped_note
from repro_check.report.model import Report
from repro_check.trace.results import RunResult
from repro_check.trace import values
from repro_check.trace import signals

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult

#: rich style of each verdict tone
TONE_STYLE = {"good": "bold green", "bad": "bold red", "warn": "bold yellow"}


def value_text(v: Any) -> str:
    """A recorded value as people read it (an encoded number exactly, a fingerprint cut short)."""
    if isinstance(v, dict):
        return values.readable(v)
    if v is None:
        return "—"
    return str(v)[:24]


def diff_text(d: float | None) -> str:
    return "—" if d is None else f"{d:.3g}"


def agreement(cmp: ComparisonResult, results: Sequence[RunResult] = ()) -> str:
    """What agreed, in one sentence; a check that compared no metric says why (runs cut short
    by ``--max-steps`` never reach their final metrics), or how to get one compared; timing
    values left out are named."""
    skipped = list(cmp.metrics_skipped)
    left_out = ""
    if skipped:
        shown = ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
        left_out = (f" Not compared, as timing or memory figures: {shown} (compare one with "
                    f"--atol metric:NAME=0).")
    missing = [why for r in results for why in r.incomplete]
    if missing:
        left_out += (f" The comparison is incomplete: {missing[0]}"
                     + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "") + ".")
    if not cmp.steps_compared:
        # the training itself was never seen: never say it is reproducible
        if cmp.metrics_compared:
            return (f"No training step was seen; the verdict rests on {cmp.metrics_compared} "
                    f"final metric(s), which agree: what the training did is not compared."
                    + left_out)
        return ("No training step was seen and no metric was compared: "
                + (stopped_note(results) or f"{HOW_TO_GET_A_METRIC}.") + left_out)
    if cmp.metrics_compared:
        return (f"All {cmp.steps_compared} steps and {cmp.metrics_compared} metric(s) agree."
                + left_out)
    head = f"All {cmp.steps_compared} steps agree; no metric was compared: "
    return head + (stopped_note(results) or f"{HOW_TO_GET_A_METRIC}.") + left_out


def cause_shown(report: Report) -> str | None:
    """The cause's paragraph as the check's summary shows it under "Cause:" (None when it
    shows no cause): what the diagnosis below it does not repeat."""
    if report.cause is None or report.cause == "none":
        return None
    return f"{report.cause} — {report.cause_detail}" if report.cause_detail else report.cause


def divergence_failure(report: Report, div: Any) -> str:
    """A first divergence in the one line CI outputs give it: where, the signal, both sides'
    values (named as the report names them), how it was judged and what the detail says."""
    labels = report.labels
    if signals.is_saved(div.signal) or signals.is_state(div.signal):
        # every step agrees: a saved file or the end state differs (the detail says where)
        text = f"{report.target}: not reproducible: {divergence_place(div)} differs " \
               f"(signal {div.signal})"
    else:
        where = f"first divergent step {div.step}" if div.step is not None \
            else "final metrics differ"
        text = (f"{report.target}: not reproducible: {where} (signal {div.signal}): "
                f"{labels[0]} {value_text(div.reference)}, {labels[1]} {value_text(div.value)}")
    if div.policy:
        text += f" [judged by {div.policy}]"
    if div.detail:
        text += f"; {div.detail}"
    return text


def divergence_place(div: Any) -> str:
    """Where a first divergence is: ``step 7``, ``final metrics``, ``saved file ema.pt (after
    step 30)``, ``the modules' state at the end``."""
    if isinstance(div, SavedDivergence):
        if div.file is None:
            return f"the modules' state at the end (after step {div.save_step})"
        return f"saved file {div.file} (after step {div.save_step})"
    return f"step {div.step}" if div.step is not None else "final metrics"


def verdict_style(report: Report) -> str:
    return TONE_STYLE[report.verdict.tone]


#: the list of loaded extension modules Python's fault handler prints after a crash's stack
#: (one line of 30-odd names: nothing about the crash, and it pushes the stack off the screen)
_EXTENSION_MODULES = re.compile(r"\n*^Extension modules: .*?\(total: \d+\)[ \t]*$",
                                re.MULTILINE | re.DOTALL)


def failure_output(r: RunResult, lines: int = 30, chars: int = 6000) -> str:
    """What a failed run left to read: its traceback, else the last lines of its output (a
    crash's line and stack kept, the fault handler's list of extension modules left out)."""
    if r.error and r.error.get("kind") == "exit":
        # sys.exit(N): what the script said before it (argparse's usage and error), as Python
        # shows it, not the traceback of a SystemExit (the run writes it after that output)
        said = r.output_tail.rstrip()
        tb = str(r.error.get("traceback") or "").rstrip()
        if tb and said.endswith(tb):
            said = said[: -len(tb)].rstrip()
        if said:
            return "\n".join(said.splitlines()[-lines:])[-chars:]
    if r.error and r.error.get("traceback"):
        return str(r.error["traceback"]).rstrip()[-chars:]
    tail = _EXTENSION_MODULES.sub("", r.output_tail)
    return "\n".join(tail.rstrip().splitlines()[-lines:])[-chars:]


#: characters a terminal would act on: C0 controls but newline and tab, DEL, C1 controls, and
#: the bidirectional overrides that reorder what is shown
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` with every control character written out (``\\x1b``), so that text that came
    from a target or a file can move no cursor, set no title and open no hyperlink."""
    return _CONTROL.sub(_escape, text)


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


class Visible:
    """A renderable that shows ``inner`` with the control characters of its text made visible;
    rich's own styling (its control segments and styles) passes untouched."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for seg in console.render(self.inner, options):
            if seg.control or not _CONTROL.search(seg.text):
                yield seg
            else:
                from rich.segment import Segment

                yield Segment(visible(seg.text), seg.style, seg.control)


#: what each per-step signal is, as a sentence's subject (``{}``: the step)
_SIGNAL_SUBJECT: dict[str, tuple[str, str]] = {
    "init": ("the parameters going into step {}", "differ"),
    "batch": ("the batch of step {}", "differs"),
    "loss": ("the loss of step {}", "differs"),
    "grads": ("the gradients of step {}", "differ"),
    "params_in": ("the parameters going into step {}", "differ"),
    "lr": ("the learning rates of step {}", "differ"),
    "opt": ("the optimizer state going into the update of step {}", "differs"),
    "scaler": ("the gradient scaler's scale at step {}", "differs"),
    "params": ("the parameters after step {}", "differ"),
    "updated": ("the tensors trained by hand going into step {}", "differ"),
    "rank_desync": ("the ranks' parameters after step {}", "differ"),
}


def signal_sentence(signal: str | None, step: int | None) -> str:
    """The first divergence in words: ``rng.torch`` at step 1 is "the torch RNG state going into
    step 1 differs" (a fingerprint says nothing to a reader; the sentence says what it stands for)."""
    if not signal:
        return "the runs differ"
    if signals.is_metric(signal):
        return f"the final metric {signal.removeprefix(signals.METRIC_PREFIX)} differs"
    if signals.is_saved(signal):
        file, _, key = signal.removeprefix(signals.SAVED_PREFIX).partition(":")
        return f"the saved file {file} differs" + (f" in {key}" if key else "")
    if signals.is_state(signal):
        return (f"{signal.removeprefix(signals.STATE_PREFIX)}, held by a module outside the "
                "optimizer, differs at the end of the run")
    if signal == "steps":
        return f"one run has no step {step}: it stopped earlier"
    if signals.is_rng(signal):
        return f"the {signal.removeprefix('rng.')} RNG state going into step {step} differs"
    subject, verb = _SIGNAL_SUBJECT.get(signal, (f"{signal} at step {{}}", "differs"))
    return f"{subject.format(step)} {verb}"


def is_number(enc: Any) -> bool:
    """Whether a recorded value is a number (else a fingerprint, whose |diff| means nothing)."""
    return isinstance(enc, dict) and enc.get("dtype") in ("float16", "bfloat16", "float32",
                                                          "float64") or (
        isinstance(enc, dict) and str(enc.get("dtype", "")).startswith(("int", "uint", "bool")))


def later_text(div: Any, rows: list[dict[str, Any]]) -> str:
    """How many steps after the first divergent one differ too, not counting those the table of
    steps around it (``rows``) already shows; empty when there is nothing more to say."""
    if div is None or div.step is None or not div.later_steps:
        return ""
    shown = sum(1 for r in rows if r.get("step", 0) > div.step and r.get("differs"))
    beyond = div.later_steps - shown
    if beyond <= 0:
        return ""
    if shown:
        return f"{beyond} later step(s) beyond those shown differ too"
    return f"{div.later_steps} later step(s) differ too"
