"""The one path that runs a target and compares its runs, for check, record, verify, diagnose
and the pytest plugin alike.

A :class:`Session` resolves the target (nothing of it runs before it is found), makes a fresh
trace folder, builds one :class:`RunSpec` per run from the :class:`RunOptions`, and drives the
runs through a feed that hands every event to a streaming comparison. SIGTERM (a cancelled CI
job) is treated like Ctrl-C: the runs are stopped and what they recorded is kept.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro_check import targets
from repro_check.compare.seeds import cross_run_notes
from repro_check.trace import seeding
from repro_check.compare import printed
from repro_check.errors import Interrupted, TargetNotFound, UsageError
from repro_check.run import retention, revisions, signals
from repro_check.run.options import PLAIN, InternalSettings, RunOptions
from repro_check.run.runner import Launcher, RunSpec, run_all
from repro_check.trace.results import Listener, RunResult

TRACE_ROOT = ".repro-check"


# ---- trace folders and parallelism -------------------------------------------------------------
def make_trace_dir(trace_dir: str | os.PathLike[str] | None) -> Path:
    """A fresh folder for this session's traces, so concurrent checks never share files.

    The path is absolute, so the report stays usable from another working directory."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    prefix = f"{stamp}-{os.getpid()}-"
    if trace_dir is None:
        return _default_trace_dir(prefix).resolve()
    root = Path(trace_dir)
    if not root.is_dir():
        _create_trace_root(root)
    try:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=root)).resolve()
    except OSError as e:
        raise UsageError(f"--trace-dir folder {str(root)!r} is not writable: {e.strerror}") from None


def _default_trace_dir(prefix: str) -> Path:
    """Under ``.repro-check/runs`` (ignored by git), or the temporary folder in a read-only
    checkout."""
    try:
        root = Path(TRACE_ROOT) / "runs"
        root.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            with open(Path(TRACE_ROOT) / ".gitignore", "x") as fh:
                fh.write("# created by repro-check\n*\n")
        folder = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    except OSError:
        root = Path(tempfile.gettempdir()) / "repro-check" / "runs"
        root.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    retention.prune(root, retention.keep_count(), current=folder)
    return folder


def _create_trace_root(root: Path) -> None:
    parent = root.parent if str(root.parent) else Path(".")
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        raise UsageError(f"--trace-dir folder {str(parent)!r} {what}")
    try:
        root.mkdir()
    except FileExistsError:
        if not root.is_dir():
            raise UsageError(f"--trace-dir {str(root)!r} is not a folder") from None
    except OSError as e:
        raise UsageError(f"cannot create --trace-dir {str(root)!r}: {e.strerror}") from None


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_jobs(runs: int, threads: int | None, shared: bool = False) -> int:
    """As many runs at once as the CPUs hold at the fixed thread count. Without one (the
    ``threads`` component off): one at a time, or, ``shared``, as many as the CPUs hold at the
    thread count the environment sets, else one a CPU (see :func:`shared_thread_env`)."""
    if threads is None and shared:
        threads = _inherited_threads() or 1
    return max(1, min(runs, _cpus() // max(1, threads or _cpus())))


def _inherited_threads() -> int | None:
    text = os.environ.get("OMP_NUM_THREADS", "")
    return int(text) if text.isdigit() and int(text) > 0 else None


def shared_thread_env(jobs: int) -> dict[str, str]:
    """The thread count runs get when the ``threads`` component is off and several go at once.

    Unpinned, torch takes one thread per core in every run, so parallel runs would fight over
    the cores; and the thread count changes result bits, so every run must get the same one for
    the runs to be comparable. Each gets the CPUs shared out among the runs at once (through
    ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``, read when torch starts: the script may still set
    its own). An ``OMP_NUM_THREADS`` the user set is kept (every run inherits it alike); one run
    at a time keeps torch's default."""
    if jobs <= 1 or _inherited_threads() is not None:
        return {}
    share = str(max(1, _cpus() // jobs))
    return {name: share for name in seeding.THREAD_ENV_VARS}


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM (a cancelled CI job) like Ctrl-C while runs go, so they are stopped and
    their results kept."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


# ---- what the runs tell ------------------------------------------------------------------------
def failure(results: Sequence[RunResult], result: Any,
            called: Mapping[int, str] | None = None) -> str | None:
    """The error message for exit 3, or None. ``called``: what a run is called where the
    command has its own names for them (``{1: "the reference (run 1)"}``)."""
    failed = [r for r in results if r.failed]
    if failed:
        return "; ".join(described(r, called) for r in failed)
    if all(r.steps == 0 and not any(p.recorded for p in r.processes) for r in results) \
            and not any(result.metrics_of(r.index) for r in results):
        return ("the target recorded no optimizer step, no backward call and no metric: nothing to "
                f"compare ({printed.HOW_TO_GET_A_METRIC})")
    return None


def described(result: RunResult, called: Mapping[int, str] | None = None) -> str:
    """How ``result`` failed, each run named as ``called`` names it (``run 1`` otherwise)."""
    text = result.describe_failure()
    for index, name in sorted((called or {}).items()):
        text = text.replace(f"run {index}", name)
    return text


def merge_warnings(results: Sequence[RunResult]) -> list[str]:
    """One line per distinct warning: prefixed with its runs unless every run gave it."""
    by_text: dict[str, list[int]] = {}
    for r in results:
        for w in r.warnings:
            runs = by_text.setdefault(w, [])
            if r.index not in runs:
                runs.append(r.index)
    out = cross_run_notes({r.index: r.overrides for r in results if r.overrides})
    for text, runs in by_text.items():
        if len(runs) == len(results) and len(results) > 1:
            out.append(text)
        else:
            out.append(f"run{'s' if len(runs) > 1 else ''} {', '.join(map(str, runs))}: {text}")
    return out


# ---- the session -------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What the runs of a session did."""

    results: list[RunResult]
    interrupted: bool
    folder: Path


class Session:
    """Runs of one target under one set of options, compared as they go.

    Creating it resolves the target (a :class:`TargetNotFound` is a usage error, exit 2) and
    makes the trace folder; :meth:`run` starts the runs and feeds their events to ``feed``.
    """

    def __init__(self, options: RunOptions, *, runs: int | None = None,
                 launcher: Launcher | None = None, share_threads: bool = False,
                 processes: bool = False, internal: InternalSettings = PLAIN) -> None:
        if not options.target:
            raise UsageError("the following arguments are required: TARGET")
        self.options = options
        #: what ``diagnose`` sets on its runs beside the options (warn-only, probe, pins)
        self.internal = internal
        self.runs = options.runs if runs is None else runs
        self.target = targets.parse(options.target)
        targets.check(self.target)
        self.launcher = launcher
        #: runs without a fixed thread count go in parallel, sharing out the CPUs alike
        self.share_threads = share_threads and launcher is None
        #: record the processes the target starts (a stream each)
        self.processes = processes
        self.folder = make_trace_dir(options.trace_dir)

    def specs(self, jobs: int = 1) -> list[RunSpec]:
        o, internal = self.options, self.internal
        env = shared_thread_env(min(jobs, self.runs)) \
            if self.share_threads and o.run_threads is None else {}
        specs = [
            RunSpec(o.told(i, self.target, internal), timeout=o.timeout,
                    trace_path=self.folder / f"run-{i}.jsonl", launcher=self.launcher,
                    extra_env=env, processes=self.processes)
            for i in range(1, self.runs + 1)
        ]
        if internal.checkout is not None:  # runs of another revision, from its checkout
            root, folder = internal.checkout
            specs = [revisions.relocate(s, Path(root), Path(folder)) for s in specs]
        return specs

    def default_jobs(self, ranks_per_run: int = 1) -> int:
        return default_jobs(self.runs, (self.options.run_threads or 1) * ranks_per_run
                            if ranks_per_run > 1 else self.options.run_threads,
                            shared=self.share_threads)

    def run(self, feed: Listener, jobs: int | None = None,
            should_stop: Callable[[], bool] | None = None,
            specs: Sequence[RunSpec] | None = None,
            fits: Callable[[RunSpec, list[RunSpec]], bool] | None = None,
            stop_run: Callable[[int], bool] | None = None) -> Outcome:
        """Start the runs (``jobs`` at a time; ``specs`` instead of :meth:`specs`, ``fits`` and
        ``stop_run`` as :func:`run_all` takes them) and wait for them; Ctrl-C or SIGTERM stop them and keep what
        they recorded (``interrupted``)."""
        if signals.stop_requested():  # a signal came before the runs: start none
            return Outcome([], True, self.folder)
        n_jobs = jobs or self.options.jobs or self.default_jobs()
        interrupted = False
        try:
            with sigterm_as_interrupt():
                results = run_all(self.specs(n_jobs) if specs is None else specs, feed, n_jobs,
                                  should_stop=should_stop or (lambda: False), fits=fits,
                                  stop_run=stop_run)
        except Interrupted as e:
            interrupted, results = True, list(e.results)
        except TargetNotFound:
            shutil.rmtree(self.folder, ignore_errors=True)  # nothing ran: no traces to keep
            raise
        return Outcome(results, interrupted, self.folder)
