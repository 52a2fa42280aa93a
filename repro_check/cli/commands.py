"""The subcommands behind the command line: check, record, verify, diff.

Each parses its flags, merges them over ``[tool.repro-check]`` (flags win), runs one target or
every configured target, prints the summaries, and writes the outputs CI reads (``--json``,
``--junit``, GitHub annotations and step summary). The work itself is in the library
(:mod:`repro_check.api`, :mod:`repro_check.gate.golden`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro_check.report import ci
from repro_check.compare import tolerances
from repro_check.trace.atomic import check_writable, write_text_atomic
from repro_check.config import Config, TargetEntry, load
from repro_check.errors import ExitCode, UsageError
from repro_check.report.model import Report


# ---- argument parsing --------------------------------------------------------------------------
def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """Our flags, and the target's arguments after ``--`` (None when there is no ``--``)."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, None


def add_output_options(p: argparse.ArgumentParser) -> None:
    """For diff, which has no run options (they carry these)."""
    p.add_argument("--json", dest="json_path", default=None, metavar="PATH",
                   help="write the machine-readable report to PATH")
    p.add_argument("--junit", dest="junit_path", default=None, metavar="PATH",
                   help="write a JUnit XML report to PATH")
    p.add_argument("--config", default=None, metavar="PATH",
                   help="read [tool.repro-check] from PATH instead of the nearest pyproject.toml")


def add_tolerance_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--atol", action="append", default=None, metavar="[NAME=]X",
                   help="absolute tolerance, for all values or one signal/metric "
                        "(loss=1e-6, metric:accuracy=1e-3); repeatable (default: exact bits)")
    p.add_argument("--rtol", action="append", default=None, metavar="[NAME=]X",
                   help="relative tolerance, as --atol")
    p.add_argument("--ulps", action="append", default=None, metavar="[NAME=]N",
                   help="accept values at most N representable floats apart, as --atol")
    p.add_argument("--signals", default=None, metavar="A,B",
                   help="compare only these per-step signals, e.g. loss (default: all of "
                        "rng, batch, loss, grads, params); final metrics always count")


def add_band_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--band-widen", type=float, default=None, metavar="F",
                   help="widen the golden's band of repeated runs by F about its centre")
    p.add_argument("--no-band", action="store_true",
                   help="ignore the band stored in the golden (judge by tolerances only)")


def tolerance_options(ns: argparse.Namespace) -> tolerances.ToleranceOptions:
    return tolerances.from_cli(ns.atol, ns.rtol, ns.ulps, getattr(ns, "band_widen", None),
                               getattr(ns, "no_band", False), getattr(ns, "signals", None))


# ---- shared ------------------------------------------------------------------------------------
@dataclass
class Outputs:
    json_path: str | None
    junit_path: str | None


def outputs(ns: argparse.Namespace, cfg: Config) -> Outputs:
    """Where the reports go (flag, else config); checked writable before anything runs."""
    json_path = ns.json_path or _cfg_path(cfg, "json")
    junit_path = ns.junit_path or _cfg_path(cfg, "junit")
    if json_path:
        check_writable(json_path, "--json")
    if junit_path:
        check_writable(junit_path, "--junit")
    return Outputs(_abs(json_path), _abs(junit_path))


def _abs(path: str | None) -> str | None:
    return os.path.abspath(path) if path else None


def _cfg_path(cfg: Config, key: str) -> str | None:
    p = cfg.path_of(key)
    return str(p) if p is not None else None


def first(*choices: Any) -> Any:
    return next((c for c in choices if c is not None), None)


@contextlib.contextmanager
def in_folder(folder: Path | None) -> Iterator[Path | None]:
    """Run configured targets from the config's folder, as its paths are written; yields the
    folder when it had to move there (replay lines then start with ``cd FOLDER &&``)."""
    if folder is None or folder.resolve() == Path.cwd().resolve():
        yield None
        return
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield folder
    finally:
        os.chdir(before)


def _replay_from(report: Report, moved: Path | None) -> None:
    if moved is not None and report.replay:
        report.replay = f"cd {shlex.quote(str(moved))} && {report.replay}"


def _under(path: Path, root: Path | None) -> str:
    """``path`` relative to ``root`` when inside it (as written in the config), else absolute."""
    if root is not None:
        try:
            return str(path.resolve().relative_to(root.resolve()))
        except ValueError:
            pass
    return str(path.resolve())


def aggregate_exit(reports: Sequence[Report]) -> ExitCode:
    codes = {r.exit_code for r in reports}
    for code in (ExitCode.INTERRUPTED, ExitCode.TARGET_FAILED, ExitCode.NOT_REPRODUCIBLE):
        if code in codes:
            return code
    return ExitCode.REPRODUCIBLE


def combined_json(reports: Sequence[Report]) -> str:
    """One report as is; several as the first failing one's keys with ``reproducible`` true
    only when all are, ``exit_code`` of them all, and ``reports`` listing each."""
    if len(reports) == 1:
        return reports[0].to_json()
    failing = [r for r in reports if r.exit_code != ExitCode.REPRODUCIBLE]
    lead = (failing or list(reports))[0]
    data = lead.to_dict()
    data["reproducible"] = not failing
    data["exit_code"] = int(aggregate_exit(reports))
    data["targets"] = [r.target for r in reports]
    data["reports"] = [r.to_dict() for r in reports]
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


def finish(reports: list[Report], command: str, out: Outputs) -> ExitCode:
    """Write the JSON and CI outputs of every target; the exit code of them all."""
    if out.json_path:
        try:
            write_text_atomic(out.json_path, combined_json(reports))
        except OSError as e:
            raise UsageError(f"cannot write --json {out.json_path!r}: {e.strerror}") from None
    ci.emit(reports, command, junit=out.junit_path)
    return aggregate_exit(reports)


def _printer(gate: bool) -> Any:
    from repro_check.report.terminal import make_console

    console = make_console(file=sys.stdout)
    if gate:
        from repro_check.report.gate import summary
    else:
        from repro_check.report.terminal import summary
    return lambda report: console.print(summary(report), crop=False)


def _announce(ns: argparse.Namespace, several: bool, text: str) -> None:
    if several and not ns.quiet:
        sys.stderr.write(f"repro-check: {text}\n")


def _planned(ns: argparse.Namespace, cfg: Config) -> tuple[list[tuple[str, TargetEntry | None]], bool]:
    """The targets to run: TARGET from the command line, else every configured one (then from
    the config's folder)."""
    if ns.target:
        return [(ns.target, cfg.entry(ns.target))], False
    return [(e.target, e) for e in cfg.targets], True


def _write_html(report: Report, path: str, index: int | None) -> None:
    """The HTML report; with several targets, one file each (``report-2.html``, ...)."""
    from repro_check.report.html import write_html
    from repro_check.report.terminal import make_console

    if index is not None:
        p = Path(path)
        path = str(p.with_name(f"{p.stem}-{index}{p.suffix}"))
    write_html(report, path)
    make_console(file=sys.stdout).print(f"report: {path}", style="dim", crop=False)


# ---- check -------------------------------------------------------------------------------------
def run_settings(ns: argparse.Namespace, cfg: Config, entry: TargetEntry | None,
                 target_args: list[str] | None) -> dict[str, Any]:
    """Flags over the target's config entry over the config table (None: not set anywhere)."""
    return {
        "seed": first(ns.seed, cfg.get("seed", entry)),
        "no_seed": bool(ns.no_seed or cfg.get("no-seed", entry, False)),
        "without": ns.without if ns.without is not None else cfg.get("without", entry),
        "max_steps": first(ns.max_steps, cfg.get("max-steps", entry)),
        "timeout": first(ns.timeout, cfg.get("timeout", entry)),
        "threads": first(ns.threads, cfg.get("threads", entry)),
        "args": target_args if target_args is not None else cfg.get("args", entry),
    }


def check_command(argv: Sequence[str]) -> ExitCode:
    from repro_check.cli.main import build_parser

    own, target_args = split_argv(argv)
    ns = build_parser().parse_args(own)
    cfg = load(ns.config)
    plan, from_config = _planned(ns, cfg)
    if not plan:
        raise UsageError("the following arguments are required: TARGET")
    out = outputs(ns, cfg)
    html_path = _abs(ns.report_path)
    if html_path:
        from repro_check.report.html import require_matplotlib

        check_writable(html_path, "--report")
        require_matplotlib()
    tol = cfg.tolerances.merged(tolerance_options(ns))
    policy = tol.policy()
    trace_dir = _abs(ns.trace_dir) or _cfg_path(cfg, "trace-dir")
    from repro_check.api import check
    from repro_check.cli.main import _distributed_options
    from repro_check.report.terminal import Progress

    distributed = _distributed_options(ns)
    show = _printer(gate=False)
    reports: list[Report] = []
    with in_folder(cfg.root if from_config else None) as moved:
        for i, (target, entry) in enumerate(plan, 1):
            s = run_settings(ns, cfg, entry, target_args)
            runs = first(ns.runs, cfg.get("runs", entry), 2)
            _announce(ns, len(plan) > 1, f"checking {target}")
            with Progress(runs, quiet=ns.quiet, max_steps=s["max_steps"]) as progress:
                report = check(
                    target, args=s["args"] or [], seed=first(s["seed"], 0), runs=runs,
                    without=s["without"] or [], no_seed=s["no_seed"], max_steps=s["max_steps"],
                    timeout=s["timeout"], policy=policy, threads=first(s["threads"], 1),
                    jobs=first(ns.jobs, cfg.get("jobs")),
                    fail_fast=bool(ns.fail_fast or cfg.get("fail-fast", None, False)),
                    trace_dir=trace_dir, listener=progress, distributed=distributed,
                )
            _replay_from(report, moved)
            show(report)
            if html_path:
                _write_html(report, html_path, i if len(plan) > 1 else None)
            reports.append(report)
            if report.interrupted:
                break
    return finish(reports, "check", out)


# ---- record ------------------------------------------------------------------------------------
def record_parser() -> argparse.ArgumentParser:
    from repro_check.cli.main import _Parser, add_parallel_options, add_run_options

    p = _Parser(prog="repro-check record",
                description="Run TARGET and save its trace as the golden reference for verify. "
                            "With --runs N, each step also keeps the spread of the N runs, "
                            "which verify accepts.")
    add_run_options(p)
    p.add_argument("-o", "--output", default=None, metavar="PATH",
                   help="the golden file to write (default: golden path in [tool.repro-check])")
    p.add_argument("--runs", type=int, default=None, metavar="N",
                   help="runs to record (default 1); with more, their spread is stored as a band")
    add_parallel_options(p)
    return p


def record_command(argv: Sequence[str]) -> ExitCode:
    own, target_args = split_argv(argv)
    ns = record_parser().parse_args(own)
    cfg = load(ns.config)
    plan, from_config = _planned(ns, cfg)
    if not plan:
        raise UsageError("record needs TARGET (or targets in [tool.repro-check])")
    if ns.output and len(plan) > 1:
        raise UsageError("-o names one golden file: give TARGET too")
    goldens: list[str] = []
    for target, entry in plan:
        path = ns.output or (str(g) if (g := cfg.golden_for(target, entry)) else None)
        if not path:
            raise UsageError(f"record needs -o PATH for {target} (or golden in "
                             "[tool.repro-check])")
        goldens.append(_under(Path(path), cfg.root) if from_config else path)
    out = outputs(ns, cfg)
    trace_dir = _abs(ns.trace_dir) or _cfg_path(cfg, "trace-dir")
    from repro_check.gate.golden import record
    from repro_check.report.terminal import Progress

    show = _printer(gate=True)
    reports: list[Report] = []
    with in_folder(cfg.root if from_config else None) as moved:
        for (target, entry), golden in zip(plan, goldens):
            s = run_settings(ns, cfg, entry, target_args)
            runs = first(ns.runs, cfg.get("record-runs", entry), 1)
            _announce(ns, len(plan) > 1, f"recording {target} -> {golden}")
            with Progress(runs, quiet=ns.quiet, max_steps=s["max_steps"]) as progress:
                report = record(
                    target, golden, args=s["args"] or [], seed=first(s["seed"], 0), runs=runs,
                    without=s["without"] or [], no_seed=s["no_seed"], max_steps=s["max_steps"],
                    timeout=s["timeout"], threads=first(s["threads"], 1),
                    jobs=first(ns.jobs, cfg.get("jobs")), trace_dir=trace_dir,
                    listener=progress,
                )
            _replay_from(report, moved)
            show(report)
            reports.append(report)
            if report.interrupted:
                break
    return finish(reports, "record", out)


# ---- verify ------------------------------------------------------------------------------------
def verify_parser() -> argparse.ArgumentParser:
    from repro_check.cli.main import _Parser, add_run_options

    p = _Parser(prog="repro-check verify",
                description="Run TARGET once and compare every step with a golden trace. Seed, "
                            "seeding, threads, max steps and the target's arguments default to "
                            "the golden's; flags (and [tool.repro-check]) override them.")
    add_run_options(p)
    p.add_argument("--golden", "-g", default=None, metavar="PATH",
                   help="the golden trace (default: golden path in [tool.repro-check])")
    add_tolerance_options(p)
    add_band_options(p)
    p.add_argument("--fail-fast", action="store_true",
                   help="stop the run as soon as it diverges from the golden")
    p.add_argument("--trace-dir", default=None, metavar="DIR",
                   help="where the run's trace is kept (default .repro-check/runs)")
    return p


def verify_command(argv: Sequence[str]) -> ExitCode:
    own, target_args = split_argv(argv)
    ns = verify_parser().parse_args(own)
    cfg = load(ns.config)
    if ns.target or ns.golden:
        plan: list[tuple[str | None, TargetEntry | None]] = [
            (ns.target, cfg.entry(ns.target) if ns.target else None)]
        from_config = False
    else:
        plan = [(e.target, e) for e in cfg.targets]  # type: ignore[misc]
        from_config = True
    if not plan:
        raise UsageError("verify needs TARGET and --golden PATH (or targets and golden paths "
                         "in [tool.repro-check])")
    goldens: list[str] = []
    for target, entry in plan:
        path = ns.golden or (str(g) if target and (g := cfg.golden_for(target, entry)) else None)
        if not path:
            raise UsageError(f"verify needs --golden PATH for {target} (or golden in "
                             "[tool.repro-check])")
        goldens.append(_under(Path(path), cfg.root) if from_config else path)
    out = outputs(ns, cfg)
    tol = cfg.tolerances.merged(tolerance_options(ns))
    tol.policy()  # a bad value fails before any run
    trace_dir = _abs(ns.trace_dir) or _cfg_path(cfg, "trace-dir")
    from repro_check.gate.golden import _check_golden, verify
    from repro_check.report.terminal import Progress

    show = _printer(gate=True)
    reports: list[Report] = []
    with in_folder(cfg.root if from_config else None) as moved:
        for golden in goldens:  # every golden is checked before anything runs
            _check_golden(golden)
        for (target, entry), golden in zip(plan, goldens):
            s = run_settings(ns, cfg, entry, target_args)
            _announce(ns, len(plan) > 1, f"verifying {target} against {golden}")
            with Progress(1, quiet=ns.quiet, max_steps=s["max_steps"]) as progress:
                report = verify(
                    target, golden, args=s["args"], seed=s["seed"], no_seed=s["no_seed"],
                    without=s["without"], max_steps=s["max_steps"], timeout=s["timeout"],
                    threads=s["threads"], tolerances=tol,
                    fail_fast=bool(ns.fail_fast or cfg.get("fail-fast", None, False)),
                    trace_dir=trace_dir, listener=progress,
                )
            _replay_from(report, moved)
            show(report)
            reports.append(report)
            if report.interrupted:
                break
    return finish(reports, "verify", out)


# ---- diff --------------------------------------------------------------------------------------
def diff_parser() -> argparse.ArgumentParser:
    from repro_check.cli.main import _Parser

    p = _Parser(prog="repro-check diff",
                description="Compare two saved traces (run traces or golden files) step by step; "
                            "nothing is run. A is the reference (its band, if any, applies).")
    p.add_argument("a", metavar="A", help="the reference trace")
    p.add_argument("b", metavar="B", help="the trace compared with it")
    add_tolerance_options(p)
    add_band_options(p)
    add_output_options(p)
    return p


def diff_command(argv: Sequence[str]) -> ExitCode:
    ns = diff_parser().parse_args(list(argv))
    cfg = load(ns.config)
    out = outputs(ns, cfg)
    tol = cfg.tolerances.merged(tolerance_options(ns))
    from repro_check.gate.golden import diff

    report = diff(ns.a, ns.b, tolerances=tol)
    _printer(gate=True)(report)
    return finish([report], "diff", out)
