"""The command line: argparse, a few lines a command; the library does the work.

``console_main`` turns every :class:`ReproCheckError` into its exit code and one line on stderr,
so no traceback of repro-check's own ever reaches the user.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from repro_check import __version__
from repro_check.errors import ExitCode, ReproCheckError, TargetNotFound, UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _components(text: str) -> list[str]:
    return [c for c in text.split(",") if c.strip()]


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The options of a run; unset ones (None) fall back to [tool.repro-check], then defaults."""
    p.add_argument("target", metavar="TARGET", nargs="?", default=None,
                   help="module:function, path/to/file.py:function or path/to/file.py "
                        "(default: the targets in [tool.repro-check])")
    p.add_argument("--seed", type=int, default=None, help="seed for every component (default 0)")
    p.add_argument("--no-seed", action="store_true", help="no seeding at all (the unseeded protocol)")
    p.add_argument("--without", type=_components, default=None, metavar="A,B",
                   help="seeding components to turn off (e.g. numpy,cudnn)")
    p.add_argument("--max-steps", type=int, default=None, metavar="N",
                   help="stop each run after N optimizer steps")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="seconds allowed per run")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch intra-op threads in every run (default 1: thread count changes bits)")
    p.add_argument("--json", dest="json_path", default=None, metavar="PATH",
                   help="write the machine-readable report to PATH")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.add_argument("--junit", dest="junit_path", default=None, metavar="PATH",
                   help="write a JUnit XML report (a testcase per target) to PATH")
    p.add_argument("--config", default=None, metavar="PATH",
                   help="read [tool.repro-check] from PATH instead of the nearest pyproject.toml")


def add_parallel_options(p: argparse.ArgumentParser) -> None:
    """Where runs go and how many at once (every command that starts several runs)."""
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="runs at the same time (default: as many as the CPUs hold)")
    p.add_argument("--trace-dir", default=None, metavar="DIR",
                   help="where run traces are kept (default .repro-check/runs)")


def add_distributed_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "distributed", "launch every run with torchrun (torch.distributed.run); these options are "
        "passed through to it, and each rank is recorded and compared")
    g.add_argument("--nproc-per-node", type=int, default=None, metavar="N",
                   help="ranks per node (turns distributed checking on)")
    g.add_argument("--nnodes", default=None, metavar="N|MIN:MAX", help="nodes (default 1)")
    g.add_argument("--node-rank", type=int, default=None, metavar="R", help="this node's rank")
    g.add_argument("--rdzv-backend", default=None, metavar="NAME", help="e.g. c10d, static")
    g.add_argument("--rdzv-endpoint", default=None, metavar="HOST[:PORT]")
    g.add_argument("--rdzv-id", default=None, metavar="ID",
                   help="job id, the same on every node (each run adds -run-K)")
    g.add_argument("--rdzv-conf", default=None, metavar="K=V,...")
    g.add_argument("--master-addr", default=None, metavar="HOST")
    g.add_argument("--master-port", type=int, default=None, metavar="PORT")


def _distributed_options(ns: argparse.Namespace) -> object | None:
    names = ("nproc_per_node", "nnodes", "node_rank", "rdzv_backend", "rdzv_endpoint", "rdzv_id",
             "rdzv_conf", "master_addr", "master_port")
    given = {n: getattr(ns, n) for n in names if getattr(ns, n, None) is not None}
    if not given:
        return None
    from repro_check.distributed.launch import DistOptions

    return DistOptions(**given)


def build_parser() -> argparse.ArgumentParser:
    from repro_check.cli.commands import add_tolerance_options

    p = _Parser(
        prog="repro-check",
        description="Run a PyTorch training entry point several times under full seeding and "
                    "report the first step where the runs diverge.",
        epilog="Arguments after -- are passed to the target as sys.argv[1:]. "
               "Other commands: record, verify, diff (repro-check COMMAND --help). "
               "Exit codes: 0 reproducible, 1 not reproducible, 2 usage error, 3 target failed.",
    )
    p.add_argument("--version", action="version", version=f"repro-check {__version__}")
    add_run_options(p)
    p.add_argument("--runs", type=int, default=None, metavar="N", help="number of runs (default 2)")
    add_tolerance_options(p)
    add_parallel_options(p)
    p.add_argument("--fail-fast", action="store_true",
                   help="stop every run as soon as the first divergent step is known")
    p.add_argument("--report", dest="report_path", default=None, metavar="PATH",
                   help="write a self-contained HTML report with loss curves to PATH "
                        "(needs matplotlib: pip install 'repro-check[report]')")
    add_distributed_options(p)
    return p


def _write_json(path: str | None, text: str) -> None:
    if path:
        from repro_check.trace.atomic import write_text_atomic

        try:
            write_text_atomic(path, text)
        except OSError as e:
            raise UsageError(f"cannot write --json {path!r}: {e.strerror}") from None


def cmd_check(argv: Sequence[str]) -> ExitCode:
    from repro_check.cli.commands import check_command

    return check_command(argv)


def cmd_record(argv: Sequence[str]) -> ExitCode:
    from repro_check.cli.commands import record_command

    return record_command(argv)


def cmd_verify(argv: Sequence[str]) -> ExitCode:
    from repro_check.cli.commands import verify_command

    return verify_command(argv)


def cmd_diff(argv: Sequence[str]) -> ExitCode:
    from repro_check.cli.commands import diff_command

    return diff_command(argv)


def build_doctor_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="repro-check doctor",
        description="Report the environment and, with a TARGET, the determinism hazards in its "
                    "source and the project files it imports (read, never run).",
        epilog="Silence a finding with '# repro-check: ignore[RC101]' on its line or "
               "[tool.repro-check.doctor] ignore = [\"RC101\"] in pyproject.toml. "
               "Exit codes: 0 no hazard left, 1 a hazard found, 2 usage error.",
    )
    p.add_argument("target", metavar="TARGET", nargs="?", default=None,
                   help="module:function, path/to/file.py:function or path/to/file.py")
    p.add_argument("--json", dest="json_path", default=None, metavar="PATH",
                   help="write the environment and findings to PATH")
    p.add_argument("--ignore", type=_components, default=[], metavar="CODES",
                   help="codes to silence, comma-separated (e.g. RC107,RC113)")
    p.add_argument("--no-env", action="store_true",
                   help="skip the environment section (it imports torch)")
    return p


def cmd_doctor(argv: Sequence[str]) -> ExitCode:
    ns = build_doctor_parser().parse_args(list(argv))
    if ns.no_env and ns.target is None:
        raise UsageError("nothing to do: give a TARGET to scan, or leave out --no-env")
    if ns.json_path:
        from repro_check.trace.atomic import check_writable

        check_writable(ns.json_path, "--json")
    from repro_check.doctor.checkup import doctor, print_summary

    report = doctor(ns.target, ignore=ns.ignore, env=not ns.no_env)
    print_summary(report)
    _write_json(ns.json_path, report.to_json())
    return report.exit_code


def build_diagnose_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="repro-check diagnose",
        description="Find why a training run is not reproducible: the check, the first op and "
                    "module that differ, the ops PyTorch flags, and which seeding components "
                    "the workload needs.",
    )
    add_run_options(p)
    p.add_argument("--ablate", type=_components, default=None, metavar="A,B",
                   help="seeding components the ablation tests (default: all)")
    p.add_argument("--no-ablation", action="store_true", help="skip the seeding ablation")
    p.add_argument("--no-localize", action="store_true",
                   help="do not replay a compute divergence to find the op")
    add_parallel_options(p)
    return p


def cmd_diagnose(argv: Sequence[str]) -> ExitCode:
    from repro_check.cli.commands import split_argv

    own, target_args = split_argv(argv)
    ns = build_diagnose_parser().parse_args(own)
    if not ns.target:
        raise UsageError("the following arguments are required: TARGET")
    if ns.json_path:
        from repro_check.trace.atomic import check_writable

        check_writable(ns.json_path, "--json")
    from repro_check.diagnose.diagnosis import check_options, diagnose
    from repro_check.report.terminal import Progress, make_console
    from repro_check.report.diagnosis import print_diagnosis

    check_options(ns.no_seed)
    errors = make_console(stderr=True)
    report = diagnose(
        ns.target, args=target_args or [], seed=0 if ns.seed is None else ns.seed,
        without=ns.without or [], max_steps=ns.max_steps, timeout=ns.timeout,
        threads=1 if ns.threads is None else ns.threads, jobs=ns.jobs,
        ablate=[] if ns.no_ablation else ns.ablate,
        localize=not ns.no_localize, trace_dir=ns.trace_dir,
        listener=Progress(2, quiet=ns.quiet),
        log=None if ns.quiet else (lambda text: errors.print(text, style="dim", highlight=False)),
    )
    print_diagnosis(report, make_console(file=sys.stdout))
    _write_json(ns.json_path, report.to_json())
    return report.exit_code


COMMANDS = {"check": cmd_check, "record": cmd_record, "verify": cmd_verify, "diff": cmd_diff,
            "doctor": cmd_doctor, "diagnose": cmd_diagnose}


def main(argv: Sequence[str] | None = None) -> ExitCode:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        return COMMANDS[argv[0]](argv[1:])
    return cmd_check(argv)


def console_main(argv: Sequence[str] | None = None) -> int:
    """The console script: exit codes at the edge, one line for every error of ours."""
    try:
        return int(main(argv))
    except SystemExit as e:  # --help, --version
        return int(e.code or 0) if isinstance(e.code, int) else 0
    except TargetNotFound as e:
        if e.detail:
            sys.stderr.write(e.detail.rstrip() + "\n")
        sys.stderr.write(f"repro-check: error: {e}\n")
        return int(e.exit_code)
    except ReproCheckError as e:
        sys.stderr.write(f"repro-check: error: {e}\n")
        return int(e.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("repro-check: interrupted\n")
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        return int(ExitCode.USAGE_ERROR)
    except Exception as e:  # noqa: BLE001 - the edge: a bug of ours is one line, not a traceback
        if os.environ.get("REPRO_CHECK_DEBUG"):
            raise
        sys.stderr.write(
            f"repro-check: internal error: {type(e).__name__}: {e} "
            "(set REPRO_CHECK_DEBUG=1 to see the traceback)\n"
        )
        return int(ExitCode.INTERNAL_ERROR)
