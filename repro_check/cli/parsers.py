"""Every parser of the command line, and the flags the commands share.

Flags left out are ``None``, so that ``[tool.repro-check]`` (then the defaults of
:class:`~repro_check.run.options.RunOptions`) can fill them in.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from repro_check.compare import tolerances
from repro_check.errors import UsageError
from repro_check.version import __version__


class Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are :class:`UsageError` (exit 2, one line)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """Our flags, and the target's arguments after ``--`` (None when there is no ``--``)."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, None


def components_list(text: str) -> list[str]:
    return [c for c in text.split(",") if c.strip()]


def add_run_options(p: argparse.ArgumentParser, no_seed: bool = True) -> None:
    """The options of a run; unset ones (None) fall back to [tool.repro-check], then defaults.
    ``no_seed``: offer ``--no-seed`` (diagnose starts from seeding, so it does not)."""
    p.add_argument("target", metavar="TARGET", nargs="?", default=None,
                   help="module:function, path/to/file.py:function or path/to/file.py "
                        "(default: the targets in [tool.repro-check])")
    p.add_argument("--seed", type=int, default=None, help="seed for every component (default 0)")
    if no_seed:
        p.add_argument("--no-seed", action="store_true",
                       help="no seeding at all (the unseeded protocol)")
    p.add_argument("--without", type=components_list, default=None, metavar="A,B",
                   help="seeding components to turn off (e.g. numpy,cudnn)")
    p.add_argument("--max-steps", type=int, default=None, metavar="N",
                   help="stop each run after N optimizer steps")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="seconds allowed per run")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch intra-op threads in every run (default 1: thread count changes bits)")
    p.add_argument("--metric", action="append", default=None, metavar="NAME=REGEX",
                   help="also compare the number REGEX finds in the run's output (its first "
                        "group, or the group named value) as metric printed:NAME; repeatable")
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


def distributed_options(ns: argparse.Namespace) -> object | None:
    names = ("nproc_per_node", "nnodes", "node_rank", "rdzv_backend", "rdzv_endpoint", "rdzv_id",
             "rdzv_conf", "master_addr", "master_port")
    given = {n: getattr(ns, n) for n in names if getattr(ns, n, None) is not None}
    if not given:
        return None
    from repro_check.distributed.launch import DistOptions

    return DistOptions(**given)


def add_output_options(p: argparse.ArgumentParser) -> None:
    """For diff, which has no run options (they carry these)."""
    p.add_argument("--json", dest="json_path", default=None, metavar="PATH",
                   help="write the machine-readable report to PATH")
    p.add_argument("--junit", dest="junit_path", default=None, metavar="PATH",
                   help="write a JUnit XML report to PATH")
    p.add_argument("--config", default=None, metavar="PATH",
                   help="read [tool.repro-check] from PATH instead of the nearest pyproject.toml")


def add_report_option(p: argparse.ArgumentParser) -> None:
    """``--report``: every command that reaches a verdict writes the same HTML page."""
    p.add_argument("--report", dest="report_path", default=None, metavar="PATH",
                   help="write a self-contained HTML report with loss curves to PATH "
                        "(needs matplotlib: pip install 'repro-check[report]')")


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


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="repro-check",
        description="Run a PyTorch training entry point several times under full seeding and "
                    "report the first step where the runs diverge.",
        epilog="Arguments after -- are passed to the target as sys.argv[1:]. "
               "Commands: check (the default: repro-check TARGET), record (save a golden "
               "trace), verify (one run against a golden), diff (two saved traces), diagnose "
               "(why runs differ: culprit op, every source, seeding ablation), doctor (hazards "
               "found by reading the source); repro-check COMMAND --help for each. "
               "Exit codes: 0 reproducible, 1 not reproducible, 2 usage error, 3 target failed, "
               "130 interrupted.",
    )
    p.add_argument("--version", action="version", version=f"repro-check {__version__}")
    add_run_options(p)
    p.add_argument("--runs", type=int, default=None, metavar="N", help="number of runs (default 2)")
    add_tolerance_options(p)
    add_parallel_options(p)
    p.add_argument("--fail-fast", action="store_true",
                   help="stop every run as soon as the first divergent step is known")
    add_report_option(p)
    p.add_argument("--across", action="append", default=None, metavar="AXIS=A,B",
                   help="run in each environment (--runs times, default once) and compare each "
                        "with the first; axes: threads=1,2  device=cpu,cuda  python=PATH,PATH  "
                        "deterministic=on,off  env:NAME=a,b; repeat for a grid")
    add_distributed_options(p)
    return p


def record_parser() -> argparse.ArgumentParser:
    p = Parser(prog="repro-check record",
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


def verify_parser() -> argparse.ArgumentParser:
    p = Parser(prog="repro-check verify",
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
    add_report_option(p)
    p.add_argument("--trace-dir", default=None, metavar="DIR",
                   help="where the run's trace is kept (default .repro-check/runs)")
    return p


def bisect_parser() -> argparse.ArgumentParser:
    p = Parser(prog="repro-check bisect",
                description="Find the first commit after GOOD up to BAD whose run of TARGET "
                            "differs from GOOD's (or from --golden), with git bisect semantics: "
                            "a commit where the target fails to run is skipped. The checkout is "
                            "never moved (the commits run in temporary git worktrees). Exit 1: "
                            "a commit differs, 0: BAD matches GOOD, 2: usage, 3: GOOD cannot "
                            "run.")
    p.add_argument("good", metavar="GOOD", help="a revision whose numbers are right")
    p.add_argument("bad", metavar="BAD", help="a later revision whose numbers changed")
    add_run_options(p)
    p.add_argument("--golden", "-g", default=None, metavar="PATH",
                   help="compare every commit with this golden instead of GOOD's run")
    add_tolerance_options(p)
    add_report_option(p)
    p.add_argument("--trace-dir", default=None, metavar="DIR",
                   help="where the runs' traces and the bisect log are kept "
                        "(default .repro-check/runs)")
    return p


def diff_parser() -> argparse.ArgumentParser:
    p = Parser(prog="repro-check diff",
                description="Compare two saved traces (run traces or golden files) step by step; "
                            "nothing is run. A is the reference (its band, if any, applies).")
    p.add_argument("a", metavar="A", help="the reference trace")
    p.add_argument("b", metavar="B", help="the trace compared with it")
    add_tolerance_options(p)
    add_band_options(p)
    add_output_options(p)
    add_report_option(p)
    return p


def build_doctor_parser() -> argparse.ArgumentParser:
    p = Parser(
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
    p.add_argument("--ignore", type=components_list, default=[], metavar="CODES",
                   help="codes to silence, comma-separated (e.g. RC107,RC113)")
    p.add_argument("--no-env", action="store_true",
                   help="skip the environment section (it imports torch)")
    return p


def build_diagnose_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="repro-check diagnose",
        description="Find why a training run is not reproducible: the check, the first op and "
                    "module that differ, the ops PyTorch flags, and which seeding components "
                    "the workload needs.",
    )
    add_run_options(p, no_seed=False)  # it starts from seeding; --without turns components off
    p.add_argument("--ablate", type=components_list, default=None, metavar="A,B",
                   help="seeding components the ablation tests (default: all)")
    p.add_argument("--no-ablation", action="store_true", help="skip the seeding ablation")
    p.add_argument("--no-localize", action="store_true",
                   help="do not replay a compute divergence to find the op")
    p.add_argument("--max-sources", type=int, default=5, metavar="N",
                   help="find up to N sources, pinning each and going on (0: the first only)")
    p.add_argument("--keep-replay", action="store_true",
                   help="keep what the pinned runs replayed (in the trace folder)")
    add_report_option(p)
    add_parallel_options(p)
    add_distributed_options(p)
    return p
