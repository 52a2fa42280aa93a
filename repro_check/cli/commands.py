"""The subcommands: check, record, verify, diff, doctor, diagnose, resume.

Each parses its flags, builds the :class:`~repro_check.run.options.RunOptions` of every target
it runs (flags over ``[tool.repro-check]``), calls the library, prints the summaries, and writes
the outputs CI reads (``--json``, ``--junit``, GitHub annotations and step summary).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from repro_check.cli import parsers
from repro_check.cli.plan import (
    OutputPaths,
    Terminal,
    absolute,
    options_for,
    outputs,
    printer,
    planned,
    target_file,
    under,
)
from repro_check.commands.skeleton import Command, Given, Planned, execute
from repro_check.config import Config, load
from repro_check.errors import ExitCode, UsageError
from repro_check.run import axes
from repro_check.run.options import RunOptions
from repro_check.trace.atomic import STDOUT, check_distinct, check_writable, write_text_atomic


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


def given(ns: argparse.Namespace, cfg: Config, target_args: list[str] | None,
          log: bool = False) -> Given:
    """What the command line gives a command: each target's options from the flags over the
    config, the progress display, and (``log``) what is being done on stderr."""
    return Given(
        options=lambda target, entry, **how: options_for(ns, cfg, target, entry, target_args,
                                                         **how),
        progress=lambda options, runs: progress(ns, options, runs),
        log=said(ns) if log else None)


def terminal(out: OutputPaths, *, quiet: bool = False, html_path: str | None = None) -> Terminal:
    """The command line's outputs of a plan: each summary printed as :func:`printer` prints it."""
    return Terminal(out, quiet=quiet, html_path=html_path, show=printer(out))


def said(ns: argparse.Namespace) -> Callable[[str], None] | None:
    """What is being done, dim on stderr (None with ``--quiet``)."""
    if ns.quiet:
        return None
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.report.terminal import make_console

    errors = make_console(stderr=True)
    return lambda text: errors.print(text, style="dim", highlight=False)


def targets_plan(ns: argparse.Namespace, cfg: Config) -> tuple[list[Planned], bool]:
    """TARGET or every configured target, and whether they come from the config."""
    targets, from_config = planned(ns, cfg)
    return [Planned(t, e) for t, e in targets], from_config


def with_goldens(plan: list[Planned], cfg: Config, from_config: bool, flag: str | None,
                 command: str, option: str) -> list[Planned]:
    """Each target with its golden: the flag's, else its config entry's (a usage error
    without)."""
    out = []
    for p in plan:
        path = flag or (str(g) if p.target and (g := cfg.golden_for(p.target, p.entry))
                        else None)
        if not path:
            raise UsageError(f"{command} needs {option} for {p.target} (or golden in "
                             "[tool.repro-check])")
        out.append(Planned(p.target, p.entry,
                           under(Path(path), cfg.root) if from_config else path))
    return out


def cells_of(plan: list[Planned], texts: list[str] | None) -> list[Planned]:
    """``record``/``verify --across 'args=A|B'``: each target once for each argument list,
    with the golden of that list (a plan as several targets make)."""
    if not texts:
        return plan
    out = []
    for p in plan:
        assert p.golden is not None
        for cell, golden in axes.golden_cells(p.golden, texts):
            out.append(dataclasses.replace(p, golden=golden, args=cell.args, cell=cell.label))
    return out


# ---- check and resume --------------------------------------------------------------------------
def check_command(argv: Sequence[str]) -> ExitCode:
    ns, target_args, cfg = parsed(parsers.build_parser(), argv)
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.commands.across import AcrossCommand
    from repro_check.commands.check import CheckCommand

    command = AcrossCommand(given(ns, cfg, target_args, log=True)) if ns.across \
        else CheckCommand(given(ns, cfg, target_args))
    return run_targets(ns, cfg, command)


def resume_command(argv: Sequence[str]) -> ExitCode:
    ns, target_args, cfg = parsed(parsers.resume_parser(), argv)
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.commands.resume import ResumeCommand

    return run_targets(ns, cfg, ResumeCommand(given(ns, cfg, target_args)))


def run_targets(ns: argparse.Namespace, cfg: Config, command: Command) -> ExitCode:
    """``check`` and ``resume``: TARGET or every configured target, their outputs and flags
    checked before any run, each with its HTML report written after it."""
    plan, from_config = targets_plan(ns, cfg)
    if not plan:
        raise UsageError("the following arguments are required: TARGET")
    out = outputs(ns, cfg, [("TARGET", target_file(p.target)) for p in plan],
                  [("--report", ns.report_path)])
    html_path = html_path_of(ns)
    parsers.flag_values(ns)  # a bad flag (--atol los=1) fails before any target runs
    return execute(command, plan, terminal(out, quiet=ns.quiet, html_path=html_path),
                   root=cfg.root if from_config else None)


# ---- record ------------------------------------------------------------------------------------
def record_command(argv: Sequence[str]) -> ExitCode:
    ns, target_args, cfg = parsed(parsers.record_parser(), argv)
    plan, from_config = targets_plan(ns, cfg)
    if not plan:
        raise UsageError("record needs TARGET (or targets in [tool.repro-check])")
    if ns.output and len(plan) > 1:
        raise UsageError("-o names one golden file: give TARGET too")
    plan = cells_of(with_goldens(plan, cfg, from_config, ns.output, "record", "-o PATH"),
                    ns.golden_cells)
    out = outputs(ns, cfg, [("TARGET", target_file(p.target)) for p in plan],
                  [("-o", _from_root(p.golden or "", cfg, from_config)) for p in plan])
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.commands.record import RecordCommand

    return execute(RecordCommand(given(ns, cfg, target_args)), plan,
                   terminal(out, quiet=ns.quiet), root=cfg.root if from_config else None)


# ---- verify ------------------------------------------------------------------------------------
def verify_command(argv: Sequence[str]) -> ExitCode:
    ns, target_args, cfg = parsed(parsers.verify_parser(), argv)
    if ns.target or ns.golden:
        plan = [Planned(ns.target, cfg.entry(ns.target) if ns.target else None)]
        from_config = False
    else:
        plan, from_config = [Planned(e.target, e) for e in cfg.targets], True
    if not plan:
        raise UsageError("verify needs TARGET and --golden PATH (or targets and golden paths "
                         "in [tool.repro-check])")
    plan = cells_of(with_goldens(plan, cfg, from_config, ns.golden, "verify", "--golden PATH"),
                    ns.golden_cells)
    out = outputs(ns, cfg, [("TARGET", target_file(p.target)) for p in plan]
                  + [("golden", _from_root(p.golden or "", cfg, from_config)) for p in plan],
                  [("--report", ns.report_path)])
    html_path = html_path_of(ns)
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.commands.verify import VerifyCommand

    return execute(VerifyCommand(given(ns, cfg, target_args)), plan,
                   terminal(out, quiet=ns.quiet, html_path=html_path),
                   root=cfg.root if from_config else None)


# ---- bisect ------------------------------------------------------------------------------------
def bisect_command(argv: Sequence[str]) -> ExitCode:
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.commands.bisect import BisectCommand

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
    command = BisectCommand(options, ns.good, ns.bad, ns.golden,
                            lambda opts, runs: progress(ns, opts, runs), said(ns))
    return execute(command, [Planned(ns.target)], terminal(out, html_path=html_path))


# ---- diff --------------------------------------------------------------------------------------
def diff_command(argv: Sequence[str]) -> ExitCode:
    # loaded by the command that runs: ``--help`` and the other commands do without it
    from repro_check.commands.diff import DiffCommand

    ns = parsers.diff_parser().parse_args(list(argv))
    cfg = load(ns.config)
    out = outputs(ns, cfg, [("trace A", ns.a), ("trace B", ns.b)], [("--report", ns.report_path)])
    html_path = html_path_of(ns)
    tol = cfg.tolerances.merged(parsers.tolerance_options(ns))
    return execute(DiffCommand(ns.a, ns.b, tol, ns.format), [Planned(None)],
                   terminal(out, html_path=html_path))


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
    from repro_check.commands.diagnose import DiagnoseCommand
    from repro_check.report.diagnosis import print_diagnosis
    from repro_check.report.terminal import Progress, make_console

    cfg = load(ns.config)
    # the run settings of [tool.repro-check] too (flags over the target's entry over the table);
    # not its no-seed, runs or fail-fast: diagnose starts from seeding and makes its own pairs
    options = options_for(ns, cfg, ns.target, cfg.entry(ns.target), target_args,
                          keys=DIAGNOSE_OWN)
    command = DiagnoseCommand(
        options, Progress(2, quiet=ns.quiet), said(ns),
        ablate=[] if ns.no_ablation else ns.ablate, localize=not ns.no_localize,
        max_sources=ns.max_sources, keep_replay=ns.keep_replay)
    console = make_console(file=summary_stream(ns.json_path))
    return execute(command, [Planned(ns.target)],
                   Terminal(OutputPaths(ns.json_path, None), html_path=html_path,
                            show=lambda report: print_diagnosis(report, console), ci=False))


COMMANDS: dict[str, Callable[[Sequence[str]], ExitCode]] = {
    "check": check_command, "record": record_command, "verify": verify_command,
    "diff": diff_command, "doctor": doctor_command, "diagnose": diagnose_command,
    "resume": resume_command,
    "bisect": bisect_command,
}
