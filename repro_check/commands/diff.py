"""``diff``: two saved traces compared step by step, or what two finished runs left (their scalar
logs or checkpoints, :mod:`repro_check.finished`); nothing is run."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from repro_check.compare.steps import Comparison, Policy
from repro_check.commands.skeleton import Planned
from repro_check.compare.tolerances import ToleranceOptions
from repro_check.errors import UsageError
from repro_check.finished import detect
from repro_check.finished.checkpoints import compare_checkpoints
from repro_check.finished.logs import compare_logs, read_log
from repro_check.gate.golden import (
    BodyCheck,
    environment_finding,
    header_settings,
    result_from_trace,
)
from repro_check.report.model import FinishedPart, GatePart, Report
from repro_check.run.options import RunOptions
from repro_check.run.replay import replay_line
from repro_check.trace.results import FAILED_STATUSES
from repro_check.trace.format import TraceStream


def diff_traces(a: str | os.PathLike[str], b: str | os.PathLike[str],
                tolerances: ToleranceOptions | None = None, policy: Policy | None = None) -> Report:
    """Compare two saved traces step by step (A is the reference, its band applies).

    Both files are read side by side, so memory stays flat however long they are. A file that is
    not a complete trace raises :class:`~repro_check.errors.TraceFileError` (exit 2).
    """
    tolerances = tolerances or ToleranceOptions()
    policy = policy or tolerances.policy()
    pa, pb = str(a), str(b)
    sa, sb = TraceStream(pa, require_end=True), TraceStream(pb, require_end=True)
    try:
        ha, hb = header_settings(sa.header, pa), header_settings(sb.header, pb)
        labels = side_labels(pa, pb)
        comparison = Comparison(2, policy, names=labels)
        _compare_side_by_side(comparison, sa, sb, BodyCheck(sa.header, pa),
                              BodyCheck(sb.header, pb))
    finally:
        sa.close()
        sb.close()
    ra, rb = result_from_trace(1, sa), result_from_trace(2, sb)
    result = comparison.result()
    failed = [(label, r) for label, r in zip(labels, (ra, rb)) if r.status in FAILED_STATUSES]
    error = "; ".join(f"{label} records a failed run ({r.describe_failure()})"
                      for label, r in failed) if failed else None
    env = environment_finding(sa.header, sb.header, labels, result, error=error)
    report = Report(target=hb.target or ha.target or "?", args=hb.args, seed=hb.seed,
                    components=hb.components, runs=2, results=[ra, rb], comparison=result,
                    policy=policy, max_steps=hb.max_steps, threads=hb.threads, error=error,
                    gate=GatePart("diff", labels=labels, a=pa, b=pb, **env.gate_fields()),
                    cause=env.cause, cause_detail=env.cause_detail)
    if report.reproducible or not hb.target:
        return report
    return dataclasses.replace(report, replay=replay_line(
        RunOptions(target=hb.target).inherit(hb), subcommand="verify", golden=pa,
        upto=result.first_divergent_step or hb.max_steps, extra=tolerances.to_args()))


def side_labels(pa: str, pb: str) -> list[str]:
    """What the report calls the two files: their names, or their paths when the names are
    the same."""
    labels = [Path(pa).name or pa, Path(pb).name or pb]
    return [pa, pb] if labels[0] == labels[1] else labels


def diff_finished(a: str | os.PathLike[str], b: str | os.PathLike[str], fmt: str,
                  tolerances: ToleranceOptions | None = None) -> Report:
    """Compare what two finished runs left, read as format ``fmt`` (a log or checkpoint format
    of :mod:`repro_check.finished.detect`): scalar by scalar and step by step, or key by key.
    A file that cannot be read as ``fmt`` raises :class:`~repro_check.errors.UsageError`
    (exit 2), naming it and what was expected."""
    tolerances = tolerances or ToleranceOptions()
    policy = tolerances.policy()
    pa, pb = str(a), str(b)
    for path in (pa, pb):
        if not os.path.exists(path):
            raise UsageError(f"{path}: no such file or folder")
    labels = side_labels(pa, pb)
    part = FinishedPart(fmt, pa, pb, labels)
    if fmt in detect.LOG_FORMATS:
        part.logs = compare_logs(read_log(pa, fmt), read_log(pb, fmt), policy)
    elif fmt in detect.CHECKPOINT_FORMATS:
        folders = [os.path.isdir(p) for p in (pa, pb)]
        if fmt == detect.CHECKPOINT_FOLDER and not all(folders):
            raise UsageError(f"{pa if not folders[0] else pb}: not a folder; expected a "
                             "checkpoint folder (--format checkpoint-folder)")
        if fmt != detect.CHECKPOINT_FOLDER and any(folders):
            raise UsageError(f"{pa if folders[0] else pb}: a folder; expected a {fmt} file")
        part.checkpoints = compare_checkpoints(pa, pb, fmt, policy.default,
                                               policy.default.describe())
    else:
        raise UsageError(f"--format {fmt!r} is not a log or checkpoint format")
    return Report(target=f"{labels[0]} vs {labels[1]}", args=[], seed=None, components=[],
                  runs=2, results=[], comparison=None, policy=policy, finished=part)


def _failed(stream: TraceStream) -> bool:
    end = stream.end or {}
    return end.get("status") in FAILED_STATUSES


def _compare_side_by_side(comparison: Comparison, sa: TraceStream, sb: TraceStream,
                          ca: BodyCheck, cb: BodyCheck) -> None:
    """Feed both traces' steps in lockstep, then their metrics (A's band applies); each file's
    body is checked against its header as it passes."""
    ended = {1: False, 2: False}
    while not (ended[1] and ended[2]):
        for run, stream, check in ((1, sa, ca), (2, sb, cb)):
            if ended[run]:
                continue
            ev = stream.next_step()
            if ev is None:
                ended[run] = True
                check.finish(stream)
                # a trace of a failed run is cut short: its missing steps are no divergence
                comparison.end(run, stream.steps, complete=not _failed(stream))
            else:
                check.step(ev)
                comparison.add_step(run, ev.step, ev.signals, ev.band if run == 1 else None)
    comparison.set_metrics(1, sa.metrics, sa.metrics_band)
    comparison.set_metrics(2, sb.metrics)


class DiffCommand:
    """``diff``: two saved traces compared; nothing runs."""

    name = "diff"
    timed = False

    def __init__(self, a: str, b: str, tolerances: ToleranceOptions | None,
                 fmt: str | None = None, policy: Policy | None = None) -> None:
        self.a, self.b, self.tolerances, self.fmt = a, b, tolerances, fmt
        #: a comparison policy object instead of the tolerances (the Python API's ``policy=``)
        self.policy = policy

    def describe(self, planned: Planned) -> str:
        return f"comparing {self.a} with {self.b}"

    def prepare(self, planned: Planned) -> None:
        """Both sides of one format (``--format``, else detected): a usage error otherwise."""
        self.fmt = detect.formats_of(self.a, self.b, self.fmt)

    def run(self, planned: Planned) -> Report:
        fmt = self.fmt or detect.formats_of(self.a, self.b, None)
        if fmt == detect.TRACE:
            return diff_traces(self.a, self.b, self.tolerances, self.policy)
        return diff_finished(self.a, self.b, fmt, self.tolerances)
