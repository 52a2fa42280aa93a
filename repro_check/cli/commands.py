"""The subcommands: check, record, verify, diff, doctor, diagnose, resume.

Each parses its flags, builds the :class:`~repro_check.run.options.RunOptions` of every target
it runs (flags over ``[tool.repro-check]``), calls the library, prints the summaries, and writes
the outputs CI reads (``--json``, ``--junit``, GitHub annotations and step summary).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from repro_check.cli import parsers
from repro_check.cli.plan import (
    absolute,
    announce,
    Outputs,
    finish,
    html_report,
    in_folder,
    options_for,
    outputs,
    planned,
    printer,
    replay_from,
    target_file,
    under,
)
from repro_check.config import Config, TargetEntry, load
from repro_check.errors import ExitCode, UsageError
from repro_check.report.model import Report
from repro_check.run import signals
from repro_check.run.options import RECORD_RUNS, RunOptions
from repro_check.trace.atomic import STDOUT, check_distinct, check_writable, write_text_atomic

#: one target of a plan: its TARGET, its config entry, and (record, verify) its golden file
Planned = tuple[Any, "TargetEntry | None", Any]


def run_plan(ns: argparse.Namespace, cfg: Config, plan: Sequence[Planned], from_config: bool,
             out: Outputs, describe: Callable[[Any, Any], str],
             run_one: Callable[[Any, TargetEntry | None, Any], Report],
             after: Callable[[Report, int], None] | None = None) -> list[Report]:
    """Run every planned target (from the config's folder when they come from it), printing
    each summary as it ends; an interrupt stops the plan."""
    show = printer(out)
    reports: list[Report] = []
    with in_folder(cfg.root if from_config else None) as moved:
        for i, (target, entry, extra) in enumerate(plan, 1):
            if signals.stop_requested():
                break  # a signal between two targets: report what was done
            announce(ns, len(plan) > 1, describe(target, extra))
            started = time.monotonic()
            report = run_one(target, entry, extra)
            report.wall_seconds = time.monotonic() - started
            replay_from(report, moved)
            show(report)
            if after is not None:
                after(report, i)
            reports.append(report)
            if report.interrupted:
                break
    return reports


def _from_root(path: str, cfg: Config, from_config: bool) -> str:
    """A golden path of the plan as the file it is (config paths are relative to its folder)."""
    return str(cfg.root / path) if from_config and cfg.root is not None else path


def parsed(parser: argparse.ArgumentParser, argv: Sequence[str]
           ) -> tuple[argparse.Namespace, list[str] | None, Config]:
    """The flags, the target's arguments after ``--`` (None without ``--``) and the config."""
    own, target_args = parsers.split_argv(argv)
    ns = parser.parse_args(own)
    return ns, target_args, load(ns.config)


def progress(ns: argparse.Namespace, options: RunOptions, runs: int) -> Any:
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.report.terminal import Progress

    return Progress(runs, quiet=ns.quiet, max_steps=options.max_steps)


def html_path_of(ns: argparse.Namespace) -> str | None:
    """``--report PATH`` made absolute, writable and with matplotlib there: checked before any
    run starts (one line, exit 2), so that no run is wasted on a report that cannot be written."""
    path = absolute(ns.report_path)
    if path:
        # loaded by the command that runs: ``--help`` and the other commands do without it
        from repro_check.report.html import require_matplotlib

        check_writable(path, "--report")
        require_matplotlib()
    return path


def run_targets(ns: argparse.Namespace, cfg: Config, command: str, verb: str,
                run_one: Callable[[str, TargetEntry | None, Any], Report]) -> ExitCode:
    """``check`` and ``resume``: TARGET or every configured target, their outputs and flags
    checked before any run, each run by ``run_one`` with its HTML report written after it."""
    targets, from_config = planned(ns, cfg)
    if not targets:
        raise UsageError("the following arguments are required: TARGET")
    out = outputs(ns, cfg, [("TARGET", target_file(t)) for t, _ in targets],
                  [("--report", ns.report_path)])
    html_path = html_path_of(ns)
    parsers.flag_values(ns)  # a bad flag (--atol los=1) fails before any target runs

    def after(report: Report, i: int) -> None:
        if html_path:
            html_report(report, html_path, i if len(targets) > 1 else None)

    reports = run_plan(ns, cfg, [(t, e, None) for t, e in targets], from_config, out,
                       lambda t, _: f"{verb} {t}", run_one, after)
    return finish(reports, command, out)


# ---- check -------------------------------------------------------------------------------------
def check_command(argv: Sequence[str]) -> ExitCode:
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.commands.check import run_check

    ns, target_args, cfg = parsed(parsers.build_parser(), argv)
    across = bool(ns.across)

    def run_one(target: str, entry: TargetEntry | None, _: Any) -> Report:
        # --across: each environment runs once unless --runs says (the config's runs are a check's)
        options = options_for(ns, cfg, target, entry, target_args, compare_runs=not across,
                              keys={"runs": None} if across else None,
                              defaults={"runs": 1} if across else None)
        if across:
            return across_one(ns, options)
        with progress(ns, options, options.runs) as listener:
            return run_check(options, listener)

    return run_targets(ns, cfg, "check", "checking", run_one)


def across_one(ns: argparse.Namespace, options: RunOptions) -> Report:
    """``--across``: every environment's runs, with progress and what is being done on stderr."""
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.report.terminal import make_console
    from repro_check.commands.across import run_across
    from repro_check.run.axes import grid

    errors = make_console(stderr=True)
    log = None if ns.quiet else (lambda text: errors.print(text, style="dim", highlight=False))
    with progress(ns, options, len(grid(options.axes)) * options.runs) as listener:
        return run_across(options, listener, log)


# ---- resume ------------------------------------------------------------------------------------
def resume_command(argv: Sequence[str]) -> ExitCode:
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.commands.resume import run_resume

    ns, target_args, cfg = parsed(parsers.resume_parser(), argv)

    def run_one(target: str, entry: TargetEntry | None, _: Any) -> Report:
        options = options_for(ns, cfg, target, entry, target_args)
        options.validate_resume()  # --at missing: one line before the progress display
        with progress(ns, options, 3) as listener:
            return run_resume(options, listener)

    return run_targets(ns, cfg, "resume", "resuming", run_one)


# ---- record ------------------------------------------------------------------------------------
def record_command(argv: Sequence[str]) -> ExitCode:
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.commands.record import record_golden

    ns, target_args, cfg = parsed(parsers.record_parser(), argv)
    targets, from_config = planned(ns, cfg)
    if not targets:
        raise UsageError("record needs TARGET (or targets in [tool.repro-check])")
    if ns.output and len(targets) > 1:
        raise UsageError("-o names one golden file: give TARGET too")
    plan: list[Planned] = []
    for target, entry in targets:
        path = ns.output or (str(g) if (g := cfg.golden_for(target, entry)) else None)
        if not path:
            raise UsageError(f"record needs -o PATH for {target} (or golden in "
                             "[tool.repro-check])")
        plan.append((target, entry, under(Path(path), cfg.root) if from_config else path))
    out = outputs(ns, cfg, [("TARGET", target_file(t)) for t, _ in targets],
                  [("-o", _from_root(g, cfg, from_config)) for _, _, g in plan])

    def run_one(target: str, entry: TargetEntry | None, golden: str) -> Report:
        options = options_for(ns, cfg, target, entry, target_args,
                              keys={"runs": "record-runs"}, defaults={"runs": RECORD_RUNS})
        with progress(ns, options, options.runs) as listener:
            return record_golden(options, golden, listener)

    reports = run_plan(ns, cfg, plan, from_config, out, lambda t, g: f"recording {t} -> {g}",
                       run_one)
    return finish(reports, "record", out)


# ---- verify ------------------------------------------------------------------------------------
def verify_command(argv: Sequence[str]) -> ExitCode:
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.commands.verify import prepare, verify_golden

    ns, target_args, cfg = parsed(parsers.verify_parser(), argv)
    if ns.target or ns.golden:
        targets: list[tuple[str | None, TargetEntry | None]] = [
            (ns.target, cfg.entry(ns.target) if ns.target else None)]
        from_config = False
    else:
        targets = [(e.target, e) for e in cfg.targets]
        from_config = True
    if not targets:
        raise UsageError("verify needs TARGET and --golden PATH (or targets and golden paths "
                         "in [tool.repro-check])")
    plan: list[Planned] = []
    for target, entry in targets:
        path = ns.golden or (str(g) if target and (g := cfg.golden_for(target, entry)) else None)
        if not path:
            raise UsageError(f"verify needs --golden PATH for {target} (or golden in "
                             "[tool.repro-check])")
        plan.append((target, entry, under(Path(path), cfg.root) if from_config else path))
    out = outputs(ns, cfg, [("TARGET", target_file(t)) for t, _ in targets]
                  + [("golden", _from_root(g, cfg, from_config)) for _, _, g in plan],
                  [("--report", ns.report_path)])
    html_path = html_path_of(ns)
    # the run count is verify's own (one run against the golden): never the config's check runs
    keys: dict[str, str | None] = {"runs": None}
    with in_folder(cfg.root if from_config else None):
        for target, entry, golden in plan:  # every golden is checked before anything runs
            prepare(options_for(ns, cfg, target, entry, target_args, keys=keys), golden)

    def run_one(target: str | None, entry: TargetEntry | None, golden: str) -> Report:
        options = options_for(ns, cfg, target, entry, target_args, keys=keys)
        with progress(ns, options, 1) as listener:
            return verify_golden(options, golden, listener)

    def after(report: Report, i: int) -> None:
        if html_path:
            html_report(report, html_path, i if len(plan) > 1 else None)

    reports = run_plan(ns, cfg, plan, from_config, out,
                       lambda t, g: f"verifying {t} against {g}", run_one, after)
    return finish(reports, "verify", out)


# ---- bisect ------------------------------------------------------------------------------------
def bisect_command(argv: Sequence[str]) -> ExitCode:
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check import api
    from repro_check.report.terminal import make_console

    ns, target_args, cfg = parsed(parsers.bisect_parser(), argv)
    if not ns.target:
        raise UsageError("bisect needs GOOD BAD TARGET")
    out = outputs(ns, cfg, [("TARGET", target_file(ns.target))]
                  + ([("golden", ns.golden)] if ns.golden else []),
                  [("--report", ns.report_path)])
    html_path = html_path_of(ns)
    # one run a commit: the config's check runs are not bisect's
    options = options_for(ns, cfg, ns.target, cfg.entry(ns.target), target_args,
                          keys={"runs": None}, defaults={"runs": 1})
    options.policy()  # a bad tolerance fails before any run
    errors = make_console(stderr=True)
    log = None if ns.quiet else (lambda text: errors.print(text, style="dim", highlight=False))
    started = time.monotonic()
    with progress(ns, options, 1) as listener:
        report = api.bisect(ns.good, ns.bad, golden=ns.golden, options=options,
                            listener=listener, log=log)
    report.wall_seconds = time.monotonic() - started
    printer(out)(report)
    if html_path:
        html_report(report, html_path, None)
    return finish([report], "bisect", out)


# ---- diff --------------------------------------------------------------------------------------
def diff_command(argv: Sequence[str]) -> ExitCode:
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.commands.diff import diff_traces

    ns = parsers.diff_parser().parse_args(list(argv))
    cfg = load(ns.config)
    out = outputs(ns, cfg, [("trace A", ns.a), ("trace B", ns.b)], [("--report", ns.report_path)])
    html_path = html_path_of(ns)
    tol = cfg.tolerances.merged(parsers.tolerance_options(ns))
    report = diff_traces(ns.a, ns.b, tol)
    printer(out)(report)
    if html_path:
        html_report(report, html_path, None)
    return finish([report], "diff", out)


# ---- doctor and diagnose -----------------------------------------------------------------------
def write_json(path: str | None, text: str) -> None:
    write_output(path, "--json", text)


def write_output(path: str | None, flag: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (``-``: standard output)."""
    if path:
        try:
            write_text_atomic(path, text)
        except OSError as e:
            raise UsageError(f"cannot write {flag} {path!r}: {e.strerror}") from None


def summary_stream(json_path: str | None) -> Any:
    """Where the summary goes: stdout, unless the JSON report does (``--json -``)."""
    return sys.stderr if json_path == STDOUT else sys.stdout


def doctor_command(argv: Sequence[str]) -> ExitCode:
    ns = parsers.build_doctor_parser().parse_args(list(argv))
    if ns.no_env and not ns.target:
        raise UsageError("nothing to do: give a TARGET to scan, or leave out --no-env")
    if ns.sarif_path and not ns.target:
        raise UsageError("--sarif needs a TARGET to scan")
    outputs = [("--json", ns.json_path), ("--sarif", ns.sarif_path)]
    if ns.json_path == STDOUT and ns.sarif_path == STDOUT:
        raise UsageError("--json and --sarif cannot both write to standard output")
    check_distinct(outputs, [("TARGET", target_file(t)) for t in ns.target])
    for flag, path in outputs:
        if path:
            check_writable(path, flag)
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.doctor.checkup import doctor, print_summary

    report = doctor(ns.target, ignore=ns.ignore, env=not ns.no_env,
                    project=lambda: load(with_table=True))
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.report.terminal import make_console

    quiet = STDOUT in (ns.json_path, ns.sarif_path)
    print_summary(report, make_console(file=sys.stderr if quiet else sys.stdout))
    write_json(ns.json_path, report.to_json())
    if ns.sarif_path:
        # loaded by the command that runs: only --sarif writes SARIF
        from repro_check.doctor.sarif import sarif_text

        write_output(ns.sarif_path, "--sarif", sarif_text(report))
    return report.exit_code


#: config keys diagnose does not take: it starts from seeding and makes its own pairs of runs
DIAGNOSE_OWN: dict[str, str | None] = {"no_seed": None, "runs": None, "fail_fast": None}


def diagnose_command(argv: Sequence[str]) -> ExitCode:
    own, target_args = parsers.split_argv(argv)
    ns = parsers.build_diagnose_parser().parse_args(own)
    if not ns.target:
        raise UsageError("the following arguments are required: TARGET")
    check_distinct([("--json", ns.json_path), ("--report", ns.report_path),
                    ("--trace-dir", ns.trace_dir)], [("TARGET", target_file(ns.target))])
    if ns.json_path:
        check_writable(ns.json_path, "--json")
    html_path = html_path_of(ns)
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.commands.diagnose import diagnose
    from repro_check.report.diagnosis import print_diagnosis
    from repro_check.report.terminal import Progress, make_console

    errors = make_console(stderr=True)
    cfg = load(ns.config)
    # the run settings of [tool.repro-check] too (flags over the target's entry over the table);
    # not its no-seed, runs or fail-fast: diagnose starts from seeding and makes its own pairs
    options = options_for(ns, cfg, ns.target, cfg.entry(ns.target), target_args,
                          keys=DIAGNOSE_OWN)
    report = diagnose(
        options, ablate=[] if ns.no_ablation else ns.ablate, localize=not ns.no_localize,
        max_sources=ns.max_sources, keep_replay=ns.keep_replay, listener=Progress(2, quiet=ns.quiet),
        log=None if ns.quiet else (lambda text: errors.print(text, style="dim", highlight=False)),
    )
    print_diagnosis(report, make_console(file=summary_stream(ns.json_path)))
    if html_path:
        html_report(report, html_path, None)
    write_json(ns.json_path, report.to_json())
    return report.exit_code


COMMANDS: dict[str, Callable[[Sequence[str]], ExitCode]] = {
    "check": check_command, "record": record_command, "verify": verify_command,
    "diff": diff_command, "doctor": doctor_command, "diagnose": diagnose_command,
    "resume": resume_command,
    "bisect": bisect_command,
}
