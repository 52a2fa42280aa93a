"""Every parser of the command line, and the flags the commands share.

The flags of run options are made from :data:`repro_check.run.options.OPTIONS` (where each is
listed once), and read back by :func:`flag_values`. Flags left out are ``None``, so that
``[tool.repro-check]`` (then the defaults of :class:`~repro_check.run.options.RunOptions`) can
fill them in.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from typing import Any

from repro_check.compare import tolerances
from repro_check.errors import UsageError
from repro_check.run.options import SPECS, components_list
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


def add_option(p: Any, name: str, help: str | None = None) -> None:
    """The flag of run option ``name`` as :data:`~repro_check.run.options.OPTIONS` lists it
    (``help``: a command's own wording)."""
    spec = SPECS[name]
    assert spec.flag is not None
    names = [spec.flag, *([spec.short] if spec.short else [])]
    kwargs: dict[str, Any] = {"help": help or spec.help}
    if spec.action == "switch":
        kwargs["action"] = "store_true"
    else:
        kwargs["default"] = None
        if spec.metavar:
            kwargs["metavar"] = spec.metavar
        if spec.action == "append":
            kwargs["action"] = "append"
        elif spec.type is not None:
            kwargs["type"] = spec.type
    p.add_argument(*names, **kwargs)


def flag_values(ns: argparse.Namespace) -> dict[str, Any]:
    """The run options given on the command line (a parser without a flag, or a switch left
    off, gives nothing), read as :func:`~repro_check.run.options.build_options` takes them."""
    out: dict[str, Any] = {}
    for spec in SPECS.values():
        if spec.flag is None:
            continue
        if spec.name == "distributed":
            value: Any = distributed_options(ns)
        else:
            value = getattr(ns, spec.dest, None)
            if spec.action == "switch" and not value:
                continue
        if value is not None:
            out[spec.name] = spec.from_flag(value)
    return out


def add_run_options(p: argparse.ArgumentParser, no_seed: bool = True) -> None:
    """The options of a run; unset ones (None) fall back to [tool.repro-check], then defaults.
    ``no_seed``: offer ``--no-seed`` (diagnose starts from seeding, so it does not)."""
    p.add_argument("target", metavar="TARGET", nargs="?", default=None,
                   help="module:function, path/to/file.py:function or path/to/file.py "
                        "(default: the targets in [tool.repro-check])")
    for name in ("seed", "no_seed", "without", "max_steps", "timeout", "threads",
                 "printed_metrics"):
        if name != "no_seed" or no_seed:
            add_option(p, name)
    p.add_argument("--json", dest="json_path", default=None, metavar="PATH",
                   help="write the machine-readable report to PATH")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.add_argument("--junit", dest="junit_path", default=None, metavar="PATH",
                   help="write a JUnit XML report (a testcase per target) to PATH")
    p.add_argument("--config", default=None, metavar="PATH",
                   help="read [tool.repro-check] from PATH instead of the nearest pyproject.toml")


def add_parallel_options(p: argparse.ArgumentParser) -> None:
    """Where runs go and how many at once (every command that starts several runs)."""
    add_option(p, "jobs")
    add_option(p, "trace_dir")


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
    # only when torchrun options are given: ``--help`` stays cheap
    from repro_check.run.options import DistOptions

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
                        "(needs matplotlib: pip install 'torch-repro-check[report]')")


def add_tolerance_options(p: argparse.ArgumentParser) -> None:
    for name in ("atol", "rtol", "ulps", "signals"):
        add_option(p, name)


def add_band_options(p: argparse.ArgumentParser) -> None:
    add_option(p, "band_widen")
    add_option(p, "band")


def tolerance_options(ns: argparse.Namespace) -> tolerances.ToleranceOptions:
    """The tolerance flags alone (``diff``, which runs nothing, compares with them)."""
    given = flag_values(ns)
    return tolerances.ToleranceOptions(
        given.get("atol", {}), given.get("rtol", {}), given.get("ulps", {}),
        given.get("band_widen"), given.get("band"), given.get("signals"))


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="repro-check",
        description="Run a PyTorch training entry point several times under full seeding and "
                    "report the first step where the runs diverge.",
        epilog="Arguments after -- are passed to the target as sys.argv[1:]. "
               "Commands: check (the default: repro-check TARGET), record (save a golden "
               "trace), verify (one run against a golden), diff (two saved traces), diagnose "
               "(why runs differ: culprit op, every source, seeding ablation), doctor (hazards "
               "found by reading the source), resume (does a run resumed from a checkpoint "
               "match the one that never stopped); repro-check COMMAND --help for each. "
               "Exit codes: 0 reproducible, 1 not reproducible, 2 usage error, 3 target failed, "
               "130 interrupted.",
    )
    p.add_argument("--version", action="version", version=f"repro-check {__version__}")
    add_run_options(p)
    add_option(p, "control")
    add_option(p, "runs")
    add_tolerance_options(p)
    add_parallel_options(p)
    add_option(p, "fail_fast")
    add_report_option(p)
    add_option(p, "across")
    add_distributed_options(p)
    return p


def resume_parser() -> argparse.ArgumentParser:
    p = Parser(prog="repro-check resume",
               description="Does a run stopped at a checkpoint and resumed match the run that "
                           "never stopped? Three runs under the same seeding: the reference, "
                           "the interrupted run (stopped right after its first checkpoint at or "
                           "after step K) in parallel, then the resumed run (ARGS appended, "
                           "{checkpoint} replaced by the checkpoint's copy). Names the state the "
                           "checkpoint did not restore.",
               epilog="Exit codes: 0 resumes exactly, 1 the resume differs (or the reference "
                      "is not reproducible), 2 usage error, 3 a run failed or no checkpoint "
                      "was written at or after K, 130 interrupted.")
    add_run_options(p)
    add_option(p, "control")
    for name in ("resume_at", "resume_args", "checkpoint"):
        add_option(p, name)
    add_tolerance_options(p)
    add_parallel_options(p)
    add_report_option(p)
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
    add_option(p, "runs",
               help="runs to record (default 1); with more, their spread is stored as a band")
    add_parallel_options(p)
    add_golden_cells(p, "record a golden for each argument list")
    return p


def add_golden_cells(p: argparse.ArgumentParser, what: str) -> None:
    """``record``/``verify --across 'args=A|B'``: a golden for each argument list."""
    p.add_argument("--across", dest="golden_cells", action="append", default=None,
                   metavar="'args=A|B'",
                   help=f"{what} (appended to the target's arguments), each golden named by "
                        "its list: -o g.json gives g.none.json, g.checkpointing.json, ...")


def verify_parser() -> argparse.ArgumentParser:
    p = Parser(prog="repro-check verify",
                description="Run TARGET once and compare every step with a golden trace. Seed, "
                            "seeding, threads, max steps and the target's arguments default to "
                            "the golden's; flags (and [tool.repro-check]) override them.")
    add_run_options(p)
    add_option(p, "control")
    p.add_argument("--golden", "-g", default=None, metavar="PATH",
                   help="the golden trace (default: golden path in [tool.repro-check])")
    add_tolerance_options(p)
    add_band_options(p)
    add_option(p, "fail_fast", help="stop the run as soon as it diverges from the golden")
    add_report_option(p)
    add_option(p, "trace_dir", help="where the run's trace is kept (default .repro-check/runs)")
    add_golden_cells(p, "verify each argument list against its own golden")
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
    add_option(p, "trace_dir", help="where the runs' traces and the bisect log are kept "
                                     "(default .repro-check/runs)")
    return p


def diff_parser() -> argparse.ArgumentParser:
    p = Parser(prog="repro-check diff",
                description="Compare two saved traces (run traces or golden files) step by step, "
                            "or what two finished runs left: their scalar logs (TensorBoard, "
                            "trainer_state.json, Lightning metrics.csv, CSV, JSONL) or their "
                            "checkpoints (torch.save files, .safetensors, folders of them); "
                            "nothing is run. A is the reference (its band, if any, applies).",
                epilog="Exit codes: 0 same, 1 differs, 2 usage error (a file unreadable, "
                       "malformed or of another format than the other).")
    p.add_argument("a", metavar="A", help="the reference trace, log or checkpoint")
    p.add_argument("b", metavar="B", help="the one compared with it")
    p.add_argument("--format", default=None, metavar="NAME",
                   choices=["trace", "tensorboard", "trainer-state", "lightning", "csv", "jsonl",
                            "wandb", "torch", "safetensors", "checkpoint-folder"],
                   help="read A and B as NAME instead of detecting it: trace, tensorboard, "
                        "trainer-state, lightning, csv, jsonl, wandb, torch, safetensors, "
                        "checkpoint-folder")
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
    p.add_argument("target", metavar="TARGET", nargs="*", default=[],
                   help="module:function, path/to/file.py:function or path/to/file.py; several "
                        "are scanned each as a program of its own (a pre-commit hook passes "
                        "the changed files)")
    p.add_argument("--json", dest="json_path", default=None, metavar="PATH",
                   help="write the environment and findings to PATH")
    p.add_argument("--sarif", dest="sarif_path", default=None, metavar="PATH",
                   help="write the findings as SARIF 2.1.0 to PATH (for GitHub code scanning)")
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
