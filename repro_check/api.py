"""``repro_check.check``: what ``repro-check TARGET`` does, as a function that returns a Report."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from repro_check.compare import cause
from repro_check.child import seeding
from repro_check import targets
from repro_check.child import watch
from repro_check.compare.steps import Comparison, Policy
from repro_check.errors import Interrupted, TargetNotFound, UsageError
from repro_check.report.model import Report, replay_command
from repro_check.run.runner import Listener, RunResult, RunSpec, run_all
from repro_check.trace.values import Tolerance

TRACE_ROOT = ".repro-check"


class _NullListener:
    def run_started(self, index: int) -> None:
        pass

    def event(self, index: int, event: dict[str, Any]) -> None:
        pass

    def run_finished(self, result: RunResult) -> None:
        pass


class _Feed:
    """Passes run events to the streaming comparison and to the caller's listener.

    ``add_step``, ``add_metrics`` and ``end`` are what a comparison of another shape (one per
    rank, say) overrides; the rest is shared.
    """

    def __init__(self, comparison: Any, listener: Listener) -> None:
        self.comparison = comparison
        self.listener = listener
        self.uses_dataloader = False

    def run_started(self, index: int) -> None:
        self.listener.run_started(index)

    def event(self, index: int, event: dict[str, Any]) -> None:
        if "step" in event:
            self.add_step(index, event)
            self.uses_dataloader = self.uses_dataloader or "batch" in event["signals"]
        elif "metrics" in event:
            self.add_metrics(index, event)
        self.listener.event(index, event)

    def run_finished(self, result: RunResult) -> None:
        self.end(result)
        self.listener.run_finished(result)

    def add_step(self, index: int, event: dict[str, Any]) -> None:
        self.comparison.add_step(index, event["step"], event["signals"])

    def add_metrics(self, index: int, event: dict[str, Any]) -> None:
        self.comparison.set_metrics(index, event["metrics"])

    def end(self, result: RunResult) -> None:
        # a run that failed or was stopped by us is cut short: its missing steps are no divergence
        cut_short = result.failed or result.status == "cancelled"
        self.comparison.end(result.index, result.steps, complete=not cut_short)


def make_trace_dir(trace_dir: str | os.PathLike[str] | None) -> Path:
    """A fresh folder for this check's traces, so concurrent checks never share files.

    The path is absolute, so the report stays usable from another working directory."""
    return _make_trace_dir(trace_dir).resolve()


def _make_trace_dir(trace_dir: str | os.PathLike[str] | None) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    prefix = f"{stamp}-{os.getpid()}-"
    if trace_dir is None:
        try:
            root = Path(TRACE_ROOT) / "runs"
            root.mkdir(parents=True, exist_ok=True)
            try:
                with open(Path(TRACE_ROOT) / ".gitignore", "x") as fh:
                    fh.write("# created by repro-check\n*\n")
            except FileExistsError:
                pass
            return Path(tempfile.mkdtemp(prefix=prefix, dir=root))
        except OSError:  # a read-only checkout: traces go to the temporary folder
            root = Path(tempfile.gettempdir()) / "repro-check" / "runs"
            root.mkdir(parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    root = Path(trace_dir)
    if not root.is_dir():
        parent = root.parent if str(root.parent) else Path(".")
        if not parent.is_dir():
            raise UsageError(f"--trace-dir folder {str(parent)!r} does not exist")
        try:
            root.mkdir()
        except FileExistsError:
            if not root.is_dir():
                raise UsageError(f"--trace-dir {str(root)!r} is not a folder") from None
        except OSError as e:
            raise UsageError(f"cannot create --trace-dir {str(root)!r}: {e.strerror}") from None
    try:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    except OSError as e:
        raise UsageError(f"--trace-dir folder {str(root)!r} is not writable: {e.strerror}") from None


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


def check_bounds(runs: int, max_steps: int | None, timeout: float | None,
                 threads: int | None) -> None:
    """The run options every command shares, as one-line usage errors."""
    if runs < 1:
        raise UsageError(f"--runs must be at least 1, got {runs}")
    if max_steps is not None and max_steps < 1:
        raise UsageError(f"--max-steps must be at least 1, got {max_steps}")
    if timeout is not None and timeout <= 0:
        raise UsageError(f"--timeout must be positive, got {timeout}")
    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be at least 1, got {threads}")


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
    distributed: Any = None,
    warn_only: bool = False,
    probe_step: int | None = None,
) -> Report:
    """Run ``target`` ``runs`` times under full seeding and compare every step.

    ``distributed`` (a :class:`repro_check.distributed.launch.DistOptions`) launches every run with
    torchrun and compares each rank across runs and the ranks of each run with each other.
    ``warn_only``: deterministic algorithms warn instead of raising, and the runs report the ops
    PyTorch flags. ``probe_step``: record every op and module output of that step (see
    :mod:`repro_check.child.probe`); the records reach ``listener``.

    Raises :class:`~repro_check.errors.UsageError` (exit 2) for bad arguments or a TARGET that
    cannot be resolved; a target that fails is reported (``report.error``, exit 3), not raised.
    """
    check_bounds(runs, max_steps, timeout, threads)
    if atol < 0 or rtol < 0:
        raise UsageError("--atol and --rtol must not be negative")
    seeding.check_seed(seed)
    components = list(seeding.select_components(without, no_seed))
    tgt = targets.parse(target)
    targets.check(tgt)
    policy = policy or Policy(Tolerance(atol, rtol))
    dist = None
    if distributed is not None:
        from repro_check.distributed.launch import Distributed

        dist = Distributed(distributed, runs)
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
            launcher=dist,
            warn_only=warn_only,
            probe_step=probe_step,
        )
        for i in range(1, runs + 1)
    ]
    comparison: Any = Comparison(runs, policy) if dist is None else dist.comparison(policy)
    feed: Any = _Feed(comparison, listener or _NullListener()) if dist is None \
        else dist.feed(comparison, listener or _NullListener())
    if dist is None:
        n_jobs = jobs or default_jobs(runs, run_threads)
    else:
        n_jobs = dist.jobs(jobs, default_jobs(runs, (run_threads or 1) * dist.local_ranks))
    stop = (lambda: comparison.settled_divergence()) if fail_fast else (lambda: False)
    interrupted = False
    previous = _sigterm_as_interrupt()
    try:
        results = run_all(specs, feed, n_jobs, should_stop=stop)
    except Interrupted as e:
        interrupted, results = True, list(e.results)
    except TargetNotFound:
        shutil.rmtree(folder, ignore_errors=True)  # nothing ran: no traces to keep
        raise
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
    report.error = None if interrupted and not any(r.failed for r in results) \
        else _failure(results, result)
    report.warnings += merge_warnings(results)
    report.cause, why = cause.classify(
        reproducible=report.reproducible,
        failed=report.error is not None or interrupted,
        divergent_signal=report.divergent_signal,
        environments=[(r.header or {}).get("environment") for r in results],
        uses_dataloader=feed.uses_dataloader,
    )
    report.extra["cause_detail"] = why or None
    if not report.reproducible or report.error:
        upto = result.first_divergent_step or max_steps
        report.replay = replay_command(target, args, run_seed, components, runs, upto,
                                       run_threads, seeding.COMPONENTS)
    if dist is not None:
        dist.finish_report(report, comparison)
    return report


def merge_warnings(results: Sequence[RunResult]) -> list[str]:
    """One line per distinct warning: prefixed with its runs unless every run gave it."""
    by_text: dict[str, list[int]] = {}
    for r in results:
        for w in r.warnings:
            runs = by_text.setdefault(w, [])
            if r.index not in runs:
                runs.append(r.index)
    out = watch.cross_run_notes({r.index: r.overrides for r in results if r.overrides})
    for text, runs in by_text.items():
        if len(runs) == len(results) and len(results) > 1:
            out.append(text)
        else:
            out.append(f"run{'s' if len(runs) > 1 else ''} {', '.join(map(str, runs))}: {text}")
    return out


def _failure(results: Sequence[RunResult], result: Any) -> str | None:
    """The error message for exit 3, or None."""
    failed = [r for r in results if r.failed]
    if failed:
        return "; ".join(r.describe_failure() for r in failed)
    if all(r.steps == 0 for r in results) and not any(result.metrics_of(r.index) for r in results):
        return ("the target recorded no optimizer step, no backward call and no metric: nothing to "
                "compare (return a metric from the function or call repro_check.log_metric)")
    return None



# record, verify and diff (the golden-trace gate) live in repro_check.gate.golden, which builds on this
# module; they are exported here beside check so the whole Python API is ``repro_check.api``.
_GATE = ("diff", "record", "verify")
__all__ = ["check", *_GATE]


def __getattr__(name: str) -> Any:
    if name in _GATE:
        from repro_check.gate import golden

        return getattr(golden, name)
    raise AttributeError(f"module 'repro_check.api' has no attribute {name!r}")
