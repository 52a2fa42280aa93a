"""Multi-target plans: which targets a command runs (TARGET, or every configured one), the run
options of each (flags over its ``[tool.repro-check]`` entry over the table), where the reports
go, and the exit code of them all."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro_check.cli import parsers
from repro_check.commands.skeleton import aggregate_exit
from repro_check.config import Config, TargetEntry
from repro_check.errors import ExitCode, UsageError
from repro_check.report import ci
from repro_check.report.model import Report
from repro_check.run import retention
from repro_check.run.options import RunOptions, build_options
from repro_check.trace.atomic import STDOUT, check_distinct, check_writable, write_text_atomic


def options_for(ns: argparse.Namespace, cfg: Config, target: str | None,
                entry: TargetEntry | None, target_args: list[str] | None, *,
                keys: Mapping[str, str | None] | None = None,
                defaults: Mapping[str, Any] | None = None,
                compare_runs: bool = False) -> RunOptions:
    """The run options of one target: flags over its config entry over the config table (the
    one builder, :func:`~repro_check.run.options.build_options`, which takes ``keys``,
    ``defaults`` and ``compare_runs``); ``target_args``: after ``--`` (None: not given)."""
    given = parsers.flag_values(ns)
    if target_args is not None:
        given["args"] = target_args
    return build_options(target, given=given, config=cfg, entry=entry, keys=keys,
                         defaults=defaults, compare_runs=compare_runs)


@dataclass
class OutputPaths:
    """Where the JSON report and the JUnit file go (None: not written)."""

    json_path: str | None
    junit_path: str | None


Named = tuple[str, "str | os.PathLike[str] | None"]


def outputs(ns: argparse.Namespace, cfg: Config, inputs: Sequence[Named] = (),
            more: Sequence[Named] = ()) -> OutputPaths:
    """Where the reports go (flag, else config); checked writable before anything runs, and
    checked to be none of the files read (``inputs``, the config, each other and ``more``, the
    command's other outputs), so that no report replaces what it reports on."""
    json_path = ns.json_path or cfg_path(cfg, "json")
    junit_path = ns.junit_path or cfg_path(cfg, "junit")
    trace_dir = getattr(ns, "trace_dir", None) or cfg_path(cfg, "trace-dir")
    check_distinct([("--json", json_path), ("--junit", junit_path), *more,
                    ("--trace-dir", trace_dir)],
                   [("the config", cfg.path), *inputs])
    if json_path:
        check_writable(json_path, "--json")
    if junit_path:
        check_writable(junit_path, "--junit")
    return OutputPaths(absolute(json_path), absolute(junit_path))


def target_file(target: str | None) -> str | None:
    """The file a TARGET names (``train.py``, ``train.py:main``), when it names one: an input,
    which no output may replace."""
    if not target:
        return None
    path = target.rpartition(":")[0] if ".py:" in target else target
    return path if os.path.isfile(path) else None


def absolute(path: str | None) -> str | None:
    """An output path made absolute (configured targets run from another folder); ``-`` (standard
    output) stays as it is."""
    if not path or path == STDOUT:
        return path or None
    return os.path.abspath(path)


def cfg_path(cfg: Config, key: str) -> str | None:
    p = cfg.path_of(key)
    return str(p) if p is not None else None


def under(path: Path, root: Path | None) -> str:
    """``path`` relative to ``root`` when inside it (as written in the config), else absolute."""
    if root is not None:
        try:
            return str(path.resolve().relative_to(root.resolve()))
        except ValueError:
            pass
    return str(path.resolve())


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


def finish(reports: Sequence[Report], command: str, out: OutputPaths) -> ExitCode:
    """Write the JSON and CI outputs of every target; the exit code of them all."""
    if out.json_path:
        try:
            write_text_atomic(out.json_path, combined_json(reports))
        except OSError as e:
            raise UsageError(f"cannot write --json {out.json_path!r}: {e.strerror}") from None
    ci.emit(reports, command, junit=out.junit_path)
    for report in reports:  # their traces stay while these reports exist
        retention.keep_for(report.trace_dir, [out.json_path, out.junit_path])
    return aggregate_exit(reports)


def printer(out: OutputPaths | None = None) -> Any:
    """Prints each report's summary with the renderer its kind needs: on stdout, or on stderr
    when the JSON report goes to stdout (``--json -``), so that stdout stays one JSON document."""
    # rich and the renderers: only when a report is printed or written
    from repro_check.report.render import summary
    from repro_check.report.terminal import make_console

    to_stderr = out is not None and out.json_path == STDOUT
    console = make_console(file=sys.stderr if to_stderr else sys.stdout)
    return lambda report: console.print(summary(report), crop=False)


def planned(ns: argparse.Namespace, cfg: Config) -> tuple[list[tuple[str, TargetEntry | None]], bool]:
    """The targets to run: TARGET from the command line, else every configured one (then from
    the config's folder)."""
    if ns.target:
        return [(ns.target, cfg.entry(ns.target))], False
    return [(e.target, e) for e in cfg.targets], True


def html_report(report: Report, path: str, index: int | None) -> None:
    """The HTML report; with several targets, one file each (``report-2.html``, ...)."""
    # rich and the renderers: only when a report is printed or written
    from repro_check.report.html import write_html
    from repro_check.report.terminal import Unwrapped, make_console
    from repro_check.report.text import Visible

    if index is not None:
        p = Path(path)
        path = str(p.with_name(f"{p.stem}-{index}{p.suffix}"))
    write_html(report, path)
    retention.keep_for(report.trace_dir, [path])
    make_console(file=sys.stdout).print(Visible(Unwrapped(f"report: {path}", style="dim")),
                                        crop=False)


class Terminal:
    """The command line's outputs (:class:`~repro_check.commands.skeleton.Outputs`): which
    target starts on stderr (unless quiet), each summary as its target ends (``show``: a
    command's own, else :func:`printer`'s) with its HTML report (``--report``), then the JSON
    report, and with ``ci`` the JUnit file, the GitHub outputs and the traces kept for them."""

    def __init__(self, paths: OutputPaths, *, quiet: bool = False, html_path: str | None = None,
                 show: Callable[[Report], None] | None = None, ci: bool = True) -> None:
        self.paths = paths
        self.quiet = quiet
        self.html_path = html_path
        self.print = show or printer(paths)
        self.ci = ci

    def announce(self, text: str) -> None:
        if not self.quiet:
            sys.stderr.write(f"repro-check: {text}\n")

    def show(self, report: Report, index: int | None) -> None:
        self.print(report)
        if self.html_path:
            html_report(report, self.html_path, index)

    def write(self, reports: Sequence[Report], command: str) -> None:
        if self.ci:
            finish(reports, command, self.paths)
        elif self.paths.json_path and reports:
            write_json(self.paths.json_path, reports[0].to_json() if len(reports) == 1
                       else combined_json(reports))


def write_json(path: str, text: str) -> None:
    """Write the JSON report to ``path`` atomically (``-``: standard output)."""
    try:
        write_text_atomic(path, text)
    except OSError as e:
        raise UsageError(f"cannot write --json {path!r}: {e.strerror}") from None
