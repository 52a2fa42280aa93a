"""The entry point of one run: seed, install capture, run the target, stream the trace.

Started by the runner as ``python -m repro_check.child`` with its configuration in a file that the
``REPRO_CHECK_RUN`` environment variable names (:mod:`repro_check.trace.runconfig`) and a pipe on which every trace line is written as it
happens (unbuffered, so steps survive ``os._exit`` and crashes). The target's own output goes to
this process's stdout/stderr, which the runner keeps a tail of.

Before the target starts, everything loaded so far (torch, this package) is frozen out of the
garbage collector's reach (``gc.freeze``): it lives as long as the process anyway, and the
collector's passes over it at interpreter exit would cost more than the whole capture.

The runner asks a run to stop with SIGTERM (through the run's supervisor): the steps still held
(device losses not yet turned into bits) are handed over before the process exits. The run dies
with its supervisor (a parent-death signal), and the supervisor kills the run's whole tree when
repro-check dies, so not even a ``kill -9`` of repro-check leaves anything running.
"""

from __future__ import annotations

import atexit
import faulthandler
import gc
import os
import signal
import sys
import time
from typing import Any

from repro_check import targets
from repro_check.child.seeding import clock
from repro_check.child.process import isolation
from repro_check.trace import runconfig
from repro_check.child.process.emit import Emitter
from repro_check.trace.exits import (EXIT_ORPHANED, EXIT_PROTOCOL, EXIT_RAISED, EXIT_RESOLVE,
                                     EXIT_TERMINATED)
from repro_check.trace.protocol import DEBUG_VAR, ProtocolError, RunConfig
from repro_check.child import features, patches


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM, so the run unwinds and hands over its steps.

    A BaseException, so that a training loop's ``except Exception`` does not swallow it.
    """


def _on_sigterm(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once is enough; SIGKILL follows if need be
    raise Terminated


#: the variable naming the process this one must have as its parent: its supervisor sets it
#: (``repro_check.run.procs``, or the rank supervisor under torchrun)
PARENT_VAR = "REPRO_CHECK_PARENT"


def _die_with_parent() -> None:
    """Have the kernel kill this process when its supervisor dies (Linux), and exit if it
    already did: the supervisor is what kills the run's tree, so the run never outlives it."""
    parent = os.environ.pop(PARENT_VAR, None)
    if sys.platform.startswith("linux"):
        try:
            # Linux only (prctl)
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if parent is not None and os.getppid() != int(parent):
        os._exit(EXIT_ORPHANED)


def main() -> int:
    configured = _configuration()
    if configured is None:  # nothing to record through: the parent reads the exit status
        return EXIT_PROTOCOL
    config, event_fd = configured
    emit = Emitter(event_fd)
    started = time.time()
    faulthandler.enable(file=sys.stderr, all_threads=True)  # a segfault shows where it happened
    context = _prepare(config, emit, started)
    try:
        run = targets.resolve(config.target, list(config.args))
    except targets.TargetNotFound as e:
        emit({"error": {"kind": "resolve", "message": str(e), "traceback": e.detail}})
        return EXIT_RESOLVE
    status = _run_target(run, context)
    if isinstance(status, int):
        return status
    _report_end(context, status, started)
    if config.distributed:
        # a process group still alive (stopped mid-training, or a script that never destroys it):
        # its communication threads can abort the interpreter's exit with SIGABRT
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _configuration() -> tuple[RunConfig, int] | None:
    """The run's configuration and the descriptor of its trace channel, this process tied to
    its supervisor; None (said on stderr) when the configuration cannot be read or names no
    channel."""
    try:
        config = runconfig.read_config(os.environ)
    except ProtocolError as e:
        sys.stderr.write(f"repro-check: {e}\n")
        return None
    _die_with_parent()
    if config.event_fd is None:
        sys.stderr.write("repro-check: the run configuration names no trace channel\n")
        return None
    return config, config.event_fd


def _prepare(config: RunConfig, emit: Emitter, started: float) -> features.RunContext:
    """Everything before the target runs: the seeding, the trace header written, every feature
    installed, what is loaded by now frozen out of the collector's reach."""
    # torch comes with these: loaded once the run is tied to its supervisor (the rank supervisor
    # imports this module too, and never loads torch); the capture before seeding, as always
    from repro_check.child.observe import capture  # noqa: F401
    from repro_check.trace import environment  # noqa: F401
    from repro_check.child.seeding import components  # noqa: F401
    from repro_check.child.observe import watch  # noqa: F401
    from repro_check.child.observe import costs

    def write_header(context: features.RunContext) -> None:
        """The trace header, saying what the seeding (installed before it) did."""
        context.header = _header(config, config.target, context.done, started)
        # the trace format: loaded once the configuration is read (another version's is refused)
        from repro_check.trace.format import header_line

        emit(header_line(context.header))

    # every feature in the order patches.ORDER gives (child/features.py): the seeding, then the
    # trace header, then the overrides of an --across environment, the pins, the seeding watch,
    # the step recorder, the checkpoint signals, the saves, where models are built, the moved
    # clock, the flush before os._exit, the processes the target starts, the logging
    # libraries' metrics, an RL environment's calls and the negative control's plant
    context = features.RunContext(config, emit)
    # before the parts it times are installed
    context.costs = costs.from_environment(
        config.run, config.control is not None,
        os.environ.get("RANK") if config.distributed else None)
    features.install(context, run_features(), header=write_header)
    # What is loaded by now (torch and this package) lives as long as the process: the collector
    # need not walk it again. Its passes at interpreter exit otherwise take 0.4-0.8 s, longer
    # than the capture. What the target leaves is collected at exit by one collection of our
    # own, after the target's atexit handlers (registered later, they run earlier): with the
    # rest frozen, the interpreter's exit was seen to leave a whole script's namespace (runpy's,
    # garbage once the script returns) unfinalized, so a log it never closed lost its buffer.
    gc.freeze()
    atexit.register(gc.collect)
    return context


def run_features() -> list[features.Feature]:
    """A fresh instance of every feature of a run (in no particular order:
    :func:`repro_check.child.features.ordered` orders them); the processes the target starts
    install theirs (:mod:`repro_check.child.process.processes`)."""
    # loaded once the run is tied to its supervisor: the run's start before seeding does without it
    from repro_check.child.process import processes

    return [features.Capture(), features.Checkpoints(), features.Clock(), features.Control(),
            features.EnvHooks(), features.Flush(), features.MetricHooks(), features.Origins(),
            features.Overrides(), features.Pins(), processes.Processes(), features.Saves(),
            features.Seeding(), features.SeedingWatch()]


def _run_target(run: Any, context: features.RunContext) -> str | int:
    """Call the resolved target and close what watched it: its status (completed, stopped,
    exited), or the exit status of a run that failed."""
    emit = context.emit
    shown = _debug_patches(emit)
    status = _call(run, context.config.target, emit, context.recorder)
    isolation.check(emit)  # a run at a git revision ran that revision's code only
    # a checkpoint being taken ends here: the interrupted run stops
    context.checkpoints.target_returned()
    if not isinstance(status, int):  # the modules' state at the end (a failed run: nothing)
        context.saves.target_returned()
    _debug_patches(emit, shown)  # hooks put in as the target imported a library
    return status


def _report_end(context: features.RunContext, status: str, started: float) -> None:
    """The trace's end of a run that did not fail: the held steps, the seeding watch's
    findings, the final metrics and the run's ``info``."""
    recorder, plant, emit = context.recorder, context.plant, context.emit
    recorder.flush()
    context.watch.check()
    if plant is not None and status != "stopped":
        plant.metrics()  # a control run that planted nothing yet: in the metric it names
    if recorder.metrics and status != "stopped":
        emit({"metrics": recorder.final_metrics()})
    info = {"status": status, "steps": recorder.step, "backward_calls": recorder.backward_calls,
            "seconds": clock.real_time() - started}
    if status == "stopped" and recorder.metrics:  # recorded before the cut: not final
        info["held_metrics"] = list(recorder.metrics)[:5]
    emit({"info": info})
    if context.costs is not None:
        context.costs.write(recorder.step)


def _header(config: RunConfig, target: Any, done: dict[str, Any],
            started: float) -> dict[str, Any]:
    """The trace header: what was run, how it was seeded, in which environment."""
    # loaded once the run is tied to its supervisor: the run's start before seeding does without it
    from repro_check.trace import environment

    seed = config.seed
    components = list(config.components)
    source = target.path
    if source is None and target.module:
        try:
            source = targets.find_module(target.module, targets.search_path(os.getcwd())).origin
        except targets.TargetNotFound:
            source = None
    header = {
        "target": target.text,
        "args": list(config.args),
        "run": config.run,
        "seed": seed,
        "components": list(components),
        "seeding": done,
        "max_steps": config.max_steps,
        "threads": config.threads,
        "probe_step": config.probe_step,
        "printed_metrics": [list(rule) for rule in config.printed_metrics],
        "environment": environment.fingerprint(source, seed, components),
        "started": started,
        "clock_shift_ns": clock.shift_of(config.run),
    }
    if config.distributed:
        # only under torchrun
        from repro_check.child.process import rank

        header.update(rank.rank_header())
    return header


#: the environment variable that asks for repro-check's debugging output (here: the listing of
#: what the run patched, on its stderr and its trace)


def _debug_patches(emit: Any, shown: list[Any] | None = None) -> list[Any]:
    """Under ``REPRO_CHECK_DEBUG``: what this run patched, by which features in which order, and
    what was skipped (:mod:`repro_check.child.patches`), as ``{"info": {"patches": [...]}}`` and
    on stderr; only when it changed since ``shown`` (the rows shown before). Returns the rows."""
    if not os.environ.get(DEBUG_VAR):
        return []
    rows = patches.PATCHES.listing()
    if rows != shown:
        emit({"info": {"patches": [row.as_dict() for row in rows]}})
        for row in rows:
            sys.stderr.write(f"repro-check: patched {row.text()}\n")
        sys.stderr.flush()
    return rows


def _call(run: Any, target: Any, emit: features.Emit, recorder: Any) -> str | int:
    """Call the target; how it went: a status to report (completed, stopped, exited), or the
    exit status of a run that failed (its error already emitted)."""
    # loaded once the run is tied to its supervisor: the run's start before seeding does without it
    from repro_check.child.observe import capture

    try:
        result = run()
    except capture.StopTraining:
        return "stopped"
    except Terminated:
        raise
    except (ImportError, SyntaxError) as e:
        if target.function is not None or recorder.step or recorder.backward_calls:
            return _raised(e, emit, recorder)
        # a whole script that cannot import what it needs never started: a TARGET problem
        tb = targets.target_traceback(e)
        emit({"error": {"kind": "resolve", "message": f"running {target.text} failed: "
                        f"{type(e).__name__}: {e}", "traceback": tb[-20000:]}})
        return EXIT_RESOLVE
    except SystemExit as e:
        if e.code in (None, 0):
            return "exited"
        tb = targets.target_traceback(e)
        sys.stderr.write(tb)
        emit({"error": {"kind": "exit", "message": f"the target called sys.exit({e.code!r})",
                        "traceback": tb, "time": clock.real_time()}})
        recorder.flush()
        return EXIT_RAISED
    except BaseException as e:  # noqa: BLE001 - the target's failure, reported to the user
        return _raised(e, emit, recorder)
    recorder.metrics_from_return(result)
    return "completed"


def _raised(e: BaseException, emit: features.Emit, recorder: Any) -> int:
    tb = targets.target_traceback(e)
    sys.stderr.write(tb)
    sys.stderr.flush()
    recorder.flush()
    emit({"error": {"kind": "raised", "type": type(e).__name__, "message": str(e)[:2000],
                    "traceback": tb[-20000:], "time": clock.real_time()}})
    return EXIT_RAISED


def _terminated() -> int:
    # loaded once the run is tied to its supervisor: the run's start before seeding does without them
    from repro_check.child.observe import capture

    recorder = capture.active()
    if recorder is not None:
        try:
            recorder.flush()
        except BaseException:  # noqa: BLE001 - stopping anyway
            pass
    return EXIT_TERMINATED


def launch() -> None:
    """The process entry: run, then leave the way the run asks (``python -m repro_check.child``)."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = main()
    except Terminated:
        code = _terminated()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (Terminated, OSError):
        pass
    if code:
        os._exit(code)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # being stopped during interpreter exit
    sys.exit(0)
