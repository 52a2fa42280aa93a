"""``repro_check.check``: what ``repro-check TARGET`` does, as a function that returns a Report."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import cause, seeding, targets
from .compare import Comparison, Policy
from .errors import Interrupted, UsageError
from .report import Report, replay_command
from .runner import Listener, RunResult, RunSpec, run_all
from .values import Tolerance

TRACE_ROOT = ".repro-check"


class _NullListener:
    def run_started(self, index: int) -> None:
        pass

    def event(self, index: int, event: dict[str, Any]) -> None:
        pass

    def run_finished(self, result: RunResult) -> None:
        pass


class _Feed:
    """Passes run events to the streaming comparison and to the caller's listener."""

    def __init__(self, comparison: Comparison, listener: Listener) -> None:
        self.comparison = comparison
        self.listener = listener
        self.uses_dataloader = False

    def run_started(self, index: int) -> None:
        self.listener.run_started(index)

    def event(self, index: int, event: dict[str, Any]) -> None:
        if "step" in event:
            self.comparison.add_step(index, event["step"], event["signals"])
            self.uses_dataloader = self.uses_dataloader or "batch" in event["signals"]
        elif "metrics" in event:
            self.comparison.set_metrics(index, event["metrics"])
        self.listener.event(index, event)

    def run_finished(self, result: RunResult) -> None:
        self.comparison.end(result.index, result.steps, complete=result.status != "cancelled")
        self.listener.run_finished(result)


def make_trace_dir(trace_dir: str | os.PathLike[str] | None) -> Path:
    """A fresh folder for this check's traces, so concurrent checks never share files."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if trace_dir is None:
        root = Path(TRACE_ROOT) / "runs"
        try:
            root.mkdir(parents=True, exist_ok=True)
            ignore = Path(TRACE_ROOT) / ".gitignore"
            if not ignore.exists():
                ignore.write_text("# created by repro-check\n*\n")
        except OSError:
            root = Path(tempfile.gettempdir()) / "repro-check" / "runs"
            root.mkdir(parents=True, exist_ok=True)
    else:
        root = Path(trace_dir)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"cannot create trace folder {str(root)!r}: {e.strerror}") from None
    return Path(tempfile.mkdtemp(prefix=f"{stamp}-{os.getpid()}-", dir=root))


def default_jobs(runs: int, threads: int | None) -> int:
    """As many runs at once as the CPUs hold at the fixed thread count."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(runs, cpus // max(1, threads or cpus)))


def _sigterm_as_interrupt() -> Any:
    """Treat SIGTERM (a cancelled CI job) like Ctrl-C, so runs are stopped and results kept."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        return None


def check(
    target: str,
    *,
    args: Sequence[str] = (),
    seed: int = 0,
    runs: int = 2,
    without: Sequence[str] = (),
    no_seed: bool = False,
    max_steps: int | None = None,
    timeout: float | None = None,
    atol: float = 0.0,
    rtol: float = 0.0,
    policy: Policy | None = None,
    threads: int | None = 1,
    jobs: int | None = None,
    fail_fast: bool = False,
    trace_dir: str | os.PathLike[str] | None = None,
    listener: Listener | None = None,
    warn_only: bool = False,
    probe_step: int | None = None,
) -> Report:
    """Run ``target`` ``runs`` times under full seeding and compare every step.

    ``warn_only``: deterministic algorithms warn instead of raising, and the runs report the ops
    PyTorch flags. ``probe_step``: record every op and module output of that step (see
    :mod:`repro_check.probe`); the records reach ``listener``.

    Raises :class:`~repro_check.errors.UsageError` (exit 2) for bad arguments or a TARGET that
    cannot be resolved; a target that fails is reported (``report.error``, exit 3), not raised.
    """
    if runs < 2:
        raise UsageError(f"--runs must be at least 2 to compare, got {runs}")
    if max_steps is not None and max_steps < 1:
        raise UsageError(f"--max-steps must be at least 1, got {max_steps}")
    if timeout is not None and timeout <= 0:
        raise UsageError(f"--timeout must be positive, got {timeout}")
    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be at least 1, got {threads}")
    if atol < 0 or rtol < 0:
        raise UsageError("--atol and --rtol must not be negative")
    seeding.check_seed(seed)
    components = list(seeding.select_components(without, no_seed))
    tgt = targets.parse(target)
    targets.check(tgt)
    policy = policy or Policy(Tolerance(atol, rtol))
    run_seed = seed if components else None
    run_threads = threads if "threads" in components else None
    folder = make_trace_dir(trace_dir)
    specs = [
        RunSpec(
            index=i,
            target=tgt,
            args=list(args),
            seed=run_seed,
            components=components,
            threads=run_threads,
            max_steps=max_steps,
            timeout=timeout,
            trace_path=folder / f"run-{i}.jsonl",
            warn_only=warn_only,
            probe_step=probe_step,
        )
        for i in range(1, runs + 1)
    ]
    comparison = Comparison(runs, policy)
    feed = _Feed(comparison, listener or _NullListener())
    stop = (lambda: comparison.settled_divergence()) if fail_fast else (lambda: False)
    interrupted = False
    previous = _sigterm_as_interrupt()
    try:
        results = run_all(specs, feed, jobs or default_jobs(runs, run_threads), should_stop=stop)
    except Interrupted as e:
        interrupted, results = True, list(e.results)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    result = comparison.result()
    report = Report(
        target=target,
        args=list(args),
        seed=run_seed,
        components=components,
        runs=runs,
        results=results,
        comparison=result,
        policy=policy,
        max_steps=max_steps,
        threads=run_threads,
        interrupted=interrupted,
        trace_dir=str(folder),
    )
    report.error = _failure(results, result)
    report.cause, why = cause.classify(
        reproducible=report.reproducible,
        failed=report.error is not None or interrupted,
        divergent_signal=report.divergent_signal,
        environments=[(r.header or {}).get("environment") for r in results],
        uses_dataloader=feed.uses_dataloader,
    )
    report.extra["cause_detail"] = why or None
    for r in results:
        report.warnings += [f"run {r.index}: {w}" for w in r.warnings]
    if not report.reproducible or report.error:
        upto = result.first_divergent_step or max_steps
        report.replay = replay_command(target, args, run_seed, components, runs, upto,
                                       run_threads, seeding.COMPONENTS)
    return report


def _failure(results: Sequence[RunResult], result: Any) -> str | None:
    """The error message for exit 3, or None."""
    failed = [r for r in results if r.failed]
    if failed:
        return "; ".join(r.describe_failure() for r in failed)
    if all(r.steps == 0 for r in results) and not any(result.metrics_of(r.index) for r in results):
        return ("the target recorded no optimizer step, no backward call and no metric: nothing to "
                "compare (return a metric from the function or call repro_check.log_metric)")
    return None
