"""Runs the target in fresh child processes and streams their trace lines as they happen.

Each run is a new process under a supervisor of its own (see :mod:`repro_check.run.procs`): its
DataLoader workers, its helpers and anything they start stay in the supervisor's tree, which is
killed as a whole when the run ends and when repro-check dies, however it dies. The seeding
environment is set before the interpreter starts. Trace lines arrive on a dedicated pipe; stdout
and stderr go to a second pipe of which only a bounded tail is kept. Runs may go in parallel:
every run uses the same fixed thread count, so parallel runs give the same bits as sequential
ones.

Stopping is two-stage: a run that must stop (timeout, fail-fast, Ctrl-C or SIGTERM to us) gets
SIGTERM, so it can hand over the steps it still holds, then SIGKILL for everything it started
after :data:`STOP_GRACE` seconds. Whenever a run's process has ended, whatever it left behind is
killed, including a process that holds its pipes from outside its tree; no run's process outlives
:func:`run_all`.
"""

from __future__ import annotations

import os
import queue
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from repro_check.compare import scanproc
from repro_check.compare.cause import MAX_ENV_RECORDS, MAX_GENERATOR_RECORDS
from repro_check.run import axes, pathentry, procs, streams
from repro_check.run.signals import CaughtSignals
from repro_check.trace import runconfig
from repro_check.trace import seeding
from repro_check.trace.pins import PLAN_VAR
from repro_check.errors import Interrupted, TargetNotFound, UsageError
from repro_check.run.exitstatus import Status, classify_exit, status_of
from repro_check.targets import Target
from repro_check.trace.protocol import (DEBUG_VAR, BatchSamplesInfo, DrawInfo, EndedInfo,
                                        EnvInfo, ErrorRecord, GeneratorInfo, HeaderRecord,
                                        LoaderInfo, MetricsRecord, ModelsInfo, PatchesInfo,
                                        ProtocolError, Record, RunConfig, StepRecord,
                                        WarningRecord, record_of)
from repro_check.trace.results import PRINTED_STATUSES, Listener, RankResult, RunResult
from repro_check.trace.format import (MAX_LINE_BYTES, TraceWriter, dropped_reason,
                                       dropped_warning, dumps, read_record)

#: bytes of a run's combined stdout/stderr that are kept
OUTPUT_TAIL_BYTES = 64 * 1024
#: seconds a run that is asked to stop gets before it is killed
STOP_GRACE = 2.0
#: seconds a run's pipes may stay open after its process ended before their holders are killed
LINGER = 0.3
#: seconds after that before the pipes are given up
ABANDON = 3.0
#: seconds a run may take to exit after the target returned (a non-daemon thread can hold it)
FINISH_GRACE = 10.0
#: trace lines read ahead of the comparison, at most
EVENT_BACKLOG = 1024
#: steps a run may record ahead of the slowest run still going
READ_AHEAD_STEPS = 256
#: lines of a run that cannot be taken are each named in a warning, up to this many
DROPPED_NAMED = 10
_POLL = 0.05
#: seconds a reader naps between reads of a run's pipe while lines keep coming (:meth:`_pump`)
PUMP_NAP = 0.005
#: bytes a read takes at most
PUMP_CHUNK = 65536
#: seconds between two looks in ``/proc`` at whether a run was stopped (SIGSTOP): the timers
#: are looked at on every trace line, a file read each would cost the parent more than the line
STOPPED_LOOK = 0.1
@dataclass
class RunSpec:
    """One run as the runner starts it: what its process is told (``told``, made once from the
    run options, :meth:`repro_check.run.options.RunOptions.told`), and what only this side needs."""

    told: RunConfig
    timeout: float | None = None
    trace_path: Path | None = None
    cwd: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    #: the interpreter the run starts with (None: this one); it must import this package
    executable: str | None = None
    #: starts the run some other way (e.g. as a torchrun job)
    launcher: Launcher | None = None
    #: record the processes the target starts, a stream each (see :mod:`repro_check.run.streams`)
    processes: bool = False

    @property
    def index(self) -> int:
        return self.told.run

    @property
    def target(self) -> Target:
        return self.told.target


#: what the runs put on the runner's queue: ``("event", run, event, raw line)`` for each trace
#: record, ``("eof", run)`` for each of the run's streams that ended
Events = queue.Queue[tuple[Any, ...]]


class LiveRun(Protocol):
    """A run in progress, as :func:`run_all` drives it: a plain run (:class:`_LiveRun`) or a
    torchrun job (:class:`repro_check.distributed.launch.Job`)."""

    #: what the run was started from
    spec: RunSpec
    #: streams of the run whose ``("eof", run)`` has not arrived yet
    open_streams: int
    #: a ``--metric`` rule that took too long on the run's output (set by :meth:`finish`): the
    #: check stops with it as a usage error
    scan_error: UsageError | None

    @property
    def ready(self) -> bool:
        """Every stream ended and the process too: :meth:`finish` may be called."""
        ...

    def handle(self, event: Record, raw: bytes) -> None:
        """One trace record of the run, in the order it arrived."""
        ...

    def stop(self, reason: Status, graceful: bool = True) -> None:
        """Stop the run (``reason`` becomes its status); ``graceful``: let it hand over its steps."""
        ...

    def tick(self, now: float) -> None:
        """Timers: the timeout, the grace period of a stop, what an ended run left behind."""
        ...

    def finish(self) -> RunResult:
        """Classify how the run ended, clean up, close its traces (once, when ready)."""
        ...

    def kill_now(self) -> None:
        """Something went wrong in the runner: kill the run at once, as cancelled."""
        ...

    def give_up(self) -> None:
        """After :meth:`kill_now`: stop reading the run and make sure its process is gone
        (bounded), so :meth:`finish` can be called."""
        ...


class Launcher(Protocol):
    """Starts a run some other way than the plain run entry (``RunSpec.launcher``)."""

    def start(self, spec: RunSpec, events: Events) -> LiveRun: ...


class _Lines:
    """Splits a byte stream into lines; a line longer than any valid trace line is dropped, and
    ``on_long()`` says so (once per line)."""

    def __init__(self, on_line: Callable[[bytes], None], on_long: Callable[[], None]) -> None:
        self.on_line = on_line
        self.on_long = on_long
        self.partial = b""
        self.skipping = False

    def add(self, chunk: bytes) -> None:
        *lines, rest = (self.partial + chunk).split(b"\n")
        for line in lines:
            if self.skipping:
                self.skipping = False
            elif len(line) > MAX_LINE_BYTES:
                self.on_long()
            elif line:
                self.on_line(line)
        self.partial = rest
        if len(self.partial) > MAX_LINE_BYTES:
            if not self.skipping:
                self.on_long()
            self.partial, self.skipping = b"", True


def run_environment(spec: RunSpec, config_at: str) -> dict[str, str]:
    """The environment a run starts with: seeding variables, where its configuration is
    (``config_at``: :func:`runconfig.by_descriptor` or :func:`runconfig.by_path`), our package."""
    told = spec.told
    env = seeding.child_environment(os.environ, told.seed, told.components, told.threads)
    env.update(spec.extra_env)
    if told.pin_plan is not None:
        env[PLAN_VAR] = told.pin_plan
    env[runconfig.RUN_VAR] = config_at
    env["REPRO_CHECK_RUN_INDEX"] = str(spec.index)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = pathentry.with_package(env.get("PYTHONPATH"))
    return env


#: where torch.compile keeps what it compiled (inductor's kernels, Triton's binaries)
COMPILE_CACHE_VARS = axes.CACHE_VARIABLES


def fresh_compile_caches(env: dict[str, str], given: dict[str, str],
                         under: str | os.PathLike[str] | None = None) -> str | None:
    """Give the run compile caches of its own, in a new folder (returned, removed when the run
    ends; ``under``: made in that folder): a run reusing another's kernels would hide a
    nondeterministic autotuning choice. Caches the run's environment sets on purpose
    (``given``: an ``--across env:`` axis) stay."""
    if all(v in given for v in COMPILE_CACHE_VARS):
        return None
    folder = tempfile.mkdtemp(prefix="repro-check-compile-", dir=under)
    env.update({var: path for var, path in axes.cache_folders(folder).items() if var not in given})
    return folder


#: the global streams a run notes its DataLoader fetches drawing from
DRAWN_STREAMS = ("python", "numpy", "torch")


def apply_event(res: RunResult | RankResult, ev: Record) -> bool:
    """Fold one trace record of a run (or a rank) into its result; True when it is the record
    saying the target returned (its final status)."""
    if isinstance(ev, HeaderRecord):
        res.header = ev.header
    elif isinstance(ev, StepRecord):
        res.steps = ev.step
    elif isinstance(ev, ErrorRecord):
        res.error = ev.error
    elif isinstance(ev, WarningRecord):
        res.warnings.append(ev.warning)
        if ev.incomplete:
            res.incomplete.append(ev.warning)
        if ev.override is not None:
            res.overrides.append(ev.override)
    elif isinstance(ev, GeneratorInfo) and ev.note is not None:
        if len(res.generators) < MAX_GENERATOR_RECORDS:
            res.generators.append(ev.note)
    elif isinstance(ev, LoaderInfo) and ev.note is not None:
        if len(res.loaders) < MAX_GENERATOR_RECORDS:
            res.loaders.append(ev.note)
    elif isinstance(ev, EnvInfo) and ev.call is not None:
        if len(res.env_calls) < MAX_ENV_RECORDS:
            res.env_calls.append(ev.call)
    elif isinstance(ev, DrawInfo):
        entry = (ev.stream, ev.worker)
        if isinstance(res, RunResult) and entry[0] in DRAWN_STREAMS and entry not in res.draws:
            res.draws.append(entry)  # a torchrun rank's are not read
    elif isinstance(ev, PatchesInfo):
        if os.environ.get(DEBUG_VAR):  # --debug: what the run patched, shown as it starts
            name = f"run {res.index}" if isinstance(res, RunResult) else "a run"
            for row in ev.rows:
                sys.stderr.write(f"repro-check: {name} patched {row.line}\n")
    elif isinstance(ev, ModelsInfo):
        res.models = list(ev.models)
        res.shared_params = ev.shared_params
    elif isinstance(ev, BatchSamplesInfo):
        res.batch_samples = ev.samples
    elif isinstance(ev, EndedInfo):
        res.status = status_of(ev.status)
        if ev.held_metrics is not None:
            res.held_metrics = list(ev.held_metrics)
        return True
    return False


class _Pacer:
    """Keeps every run within ``limit`` steps of the slowest run still going.

    The parent holds the steps one run has recorded and another has not reached yet; without a
    limit that gap, and the parent's memory, would grow with the length of the runs. A run that
    gets ahead waits in its reader thread, its pipe fills and the run itself waits. Runs not
    started yet (``--jobs 1``) and runs that ended hold nobody back.
    """

    def __init__(self, limit: int = READ_AHEAD_STEPS) -> None:
        self.limit = limit
        self.cond = threading.Condition()
        self.steps: dict[int, int] = {}

    def start(self, index: int) -> None:
        with self.cond:
            self.steps[index] = 0

    def finish(self, index: int) -> None:
        with self.cond:
            self.steps.pop(index, None)
            self.cond.notify_all()

    def advance(self, index: int, step: int, abandon: threading.Event) -> None:
        with self.cond:
            if index not in self.steps:
                return
            self.steps[index] = step
            self.cond.notify_all()
            while (not abandon.is_set() and index in self.steps
                   and step - min(self.steps.values()) > self.limit):
                self.cond.wait(0.2)


class _LiveRun:
    """One plain run: the run entry under its supervisor, with a reader thread per pipe."""

    scan_error: UsageError | None

    def __init__(self, spec: RunSpec, events: Events, pacer: _Pacer | None = None) -> None:
        self.spec = spec
        self.events = events
        self.pacer = pacer
        self.result = RunResult(spec.index)
        self.tail = procs.Tail(OUTPUT_TAIL_BYTES)
        #: set when a --metric rule did not finish in time: raised once the run is finished
        self.scan_error = None
        self.streams = streams.ProcessStreams(spec.index, spec.trace_path, events) \
            if spec.processes else None
        self.open_streams = 2 if self.streams is None else 3
        self.started = time.monotonic()
        self.killed_for: Status | None = None
        self.stop_deadline: float | None = None
        #: when ``/proc`` is next looked at for a stopped run (:meth:`tick`)
        self.next_look = 0.0
        self.exited_at: float | None = None
        self.done_at: float | None = None
        self.swept = False
        self.killed: set[int] = set()  # processes of the run we sent SIGKILL
        self.abandon = threading.Event()
        self.dropped = 0  # lines of the run that could not be taken
        self.refused = False  # its header spoke another version of the trace format
        self.writer = TraceWriter(spec.trace_path) if spec.trace_path else None
        # the user's --metric rules run in a process of their own (see scanproc)
        self.printed = scanproc.scanner(spec.told.printed_metrics)
        read_fd, write_fd = os.pipe()
        self.compile_cache: str | None = None
        self.supervised = self._launch(read_fd, write_fd)
        self.proc = self.supervised.proc
        self._start_reading(read_fd)

    def _launch(self, read_fd: int, write_fd: int) -> procs.Supervised:
        """The run entry started under its supervisor, told (in its configuration file) to
        write its trace to ``write_fd``, which this process then closes; when it cannot start,
        what the run had opened is let go (``read_fd`` closed) and the error raised."""
        spec = self.spec
        config_fd = -1
        try:
            told = spec.told.replace(
                event_fd=write_fd,
                processes=str(self.streams.events_dir) if self.streams is not None else None)
            config_fd = runconfig.config_file(told)
            env = run_environment(spec, runconfig.by_descriptor(config_fd))
            self.compile_cache = fresh_compile_caches(env, spec.extra_env)
            return procs.Supervised([spec.executable or sys.executable, "-m",
                                     "repro_check.child"], env,
                                    spec.cwd, pass_fds=(write_fd, config_fd))
        except BaseException:
            os.close(read_fd)
            self.printed.close()
            if self.compile_cache is not None:
                shutil.rmtree(self.compile_cache, ignore_errors=True)
            if self.writer is not None:
                self.writer.abort()
            if self.streams is not None:
                self.streams.discard()
            raise
        finally:
            os.close(write_fd)
            if config_fd >= 0:
                os.close(config_fd)

    def _start_reading(self, read_fd: int) -> None:
        """A reader thread for the trace pipe (``read_fd``) and one for the run's output."""
        assert self.proc.stdout is not None
        out_fd = self.proc.stdout.fileno()
        self.pipes = {procs.pipe_inode(read_fd), procs.pipe_inode(out_fd)}
        lines = _Lines(self._line, self._long_line)
        if self.pacer is not None:
            self.pacer.start(self.spec.index)
        self.readers = [
            threading.Thread(target=self._pump, args=(read_fd, lines.add, True), daemon=True),
            threading.Thread(target=self._pump, args=(out_fd, self._output, False), daemon=True),
        ]
        for t in self.readers:
            t.start()

    # ---- reading (in threads) ------------------------------------------------------------
    def _pump(self, fd: int, sink: Callable[[bytes], None], own_fd: bool) -> None:
        """Read ``fd`` until its end. While lines keep coming, the pipe is read every
        :data:`PUMP_NAP` seconds without waiting on it: a reader that waits on a pipe is woken by
        every line written to it, and the run pays for that wake-up in each write (tens of
        microseconds a step on a virtual machine). Once a read finds nothing, the reader waits
        on the pipe again."""
        os.set_blocking(fd, False)
        try:
            streaming = False
            while not self.abandon.is_set():
                if streaming:
                    time.sleep(PUMP_NAP)
                else:
                    ready, _, _ = select.select([fd], [], [], 0.2)
                    if not ready:
                        continue
                while True:
                    try:
                        chunk = os.read(fd, PUMP_CHUNK)
                    except BlockingIOError:
                        chunk = None
                        break
                    except OSError:
                        chunk = b""  # the pipe is gone: as at its end
                        break
                    if not chunk:
                        break
                    sink(chunk)
                    if len(chunk) < PUMP_CHUNK:  # drained: the next look after a nap
                        break
                if chunk == b"":
                    break
                streaming = chunk is not None
        finally:
            if own_fd:
                os.close(fd)
                if self.pacer is not None:
                    self.pacer.finish(self.spec.index)
            else:
                assert self.proc.stdout is not None
                self.proc.stdout.close()
            self.events.put(("eof", self.spec.index))

    def _output(self, chunk: bytes) -> None:
        """The run's stdout and stderr: every byte is scanned for printed metrics, the last
        64 KB are kept."""
        self.tail.add(chunk)
        self.printed.add(chunk)

    def _long_line(self) -> None:
        self._dropped(f"over the {MAX_LINE_BYTES:,}-byte line limit")

    def _dropped(self, why: str) -> None:
        """A line of the run could not be taken: a warning that marks the run incomplete."""
        self.dropped += 1
        if self.dropped > DROPPED_NAMED:
            return
        ev = dropped_warning(why, self.dropped == DROPPED_NAMED)
        self.events.put(("event", self.spec.index, record_of(ev), dumps(ev).encode("utf-8")))

    def _line(self, raw: bytes) -> None:
        if self.refused:  # after a header of another version nothing can be read right
            return
        try:
            rec = read_record(raw)
        except ProtocolError as e:  # the run speaks another version: it fails (see handle)
            self.refused = True
            ev = {"error": {"kind": "protocol", "message": str(e)}}
            self.events.put(("event", self.spec.index, record_of(ev), dumps(ev).encode("utf-8")))
            return
        except Exception as e:  # noqa: BLE001 - a garbled line is dropped, never silently
            self._dropped(dropped_reason(e))
            return
        if self.pacer is not None and isinstance(rec, StepRecord):
            self.pacer.advance(self.spec.index, rec.step, self.abandon)
        self.events.put(("event", self.spec.index, rec, raw))

    # ---- stopping ------------------------------------------------------------------------
    def stop(self, reason: Status, graceful: bool = True) -> None:
        """Ask the run to stop (SIGTERM, then SIGKILL after the grace period)."""
        if self.proc.poll() is not None:
            if not graceful:
                self.kill()
            return  # it ended on its own; what it left is swept up in tick()
        if self.killed_for is None:
            self.killed_for = reason
        if graceful and self.stop_deadline is None:
            self.stop_deadline = time.monotonic() + STOP_GRACE
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        elif not graceful:
            self.kill()

    def kill(self) -> None:
        self.killed.update(self.supervised.kill())
        self.stop_deadline = time.monotonic()

    def kill_now(self) -> None:
        self.killed_for = self.killed_for or "cancelled"
        self.killed.update(self.supervised.kill(self.pipes))

    def give_up(self) -> None:
        self.abandon.set()
        if self.streams is not None:
            self.streams.stop()
        self.supervised.end(ABANDON)

    def tick(self, now: float) -> None:
        """Timers: the run's timeout, the grace period, and what a finished run left behind."""
        limit = self.spec.timeout
        if limit is not None and self.killed_for is None and now - self.started > limit:
            self.stop("timeout")
        if self.proc.poll() is None:
            if now >= self.next_look:
                self.next_look = now + STOPPED_LOOK
                if procs.is_stopped(self.proc.pid):  # the target stopped its supervisor (SIGSTOP)
                    try:
                        os.kill(self.proc.pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
            if self.stop_deadline is not None and now >= self.stop_deadline:
                self.kill()
                self.stop_deadline = now + 1.0  # and again, should anything have been starting
            elif self.done_at is not None and now - self.done_at > FINISH_GRACE:
                self.result.warnings.append(
                    f"the process did not exit within {FINISH_GRACE:.0f} s after the target "
                    "returned (a non-daemon thread?); it was stopped")
                self.done_at = None
                self.killed_for = self.result.status  # what it recorded is complete
                self.kill()
            return
        if self.exited_at is None:
            self.exited_at = now
            # DataLoader workers or anything else it left running
            self.killed.update(self.supervised.kill())
            if self.streams is not None:
                self.streams.last_pass(self.killed)
        elif self.open_streams and not self.swept and now - self.exited_at > LINGER:
            self.swept = True  # something outside its tree holds its pipes
            self.killed.update(self.supervised.kill(self.pipes))
        elif self.open_streams and now - self.exited_at > LINGER + ABANDON:
            self.abandon.set()

    @property
    def ready(self) -> bool:
        return self.open_streams == 0 and self.proc.poll() is not None

    # ---- results -------------------------------------------------------------------------
    def handle(self, event: Record, raw: bytes) -> None:
        if self.streams is not None and event.proc is not None:
            self.streams.handle(event, raw)
            return
        if apply_event(self.result, event):
            self.done_at = time.monotonic()
        if isinstance(event, ErrorRecord) and event.error.get("kind") == "protocol":
            self.stop("failed")  # its records cannot be read: nothing it does counts
        if self.writer is not None:
            self.writer.write_raw(raw.decode("utf-8"))

    def finish(self) -> RunResult:
        """Called once both pipes are closed and the process ended: classify, clean up, close
        the trace."""
        returncode = self.proc.poll()
        if returncode is None:  # only after an emergency stop that could not end it
            returncode = -signal.SIGKILL
        self.killed.update(self.supervised.kill())
        procs.wait_gone(self.killed)
        for t in self.readers:
            t.join(timeout=1.0)
        if self.compile_cache is not None:  # its kernels are no other run's
            shutil.rmtree(self.compile_cache, ignore_errors=True)
        res = self.result
        res.returncode = returncode
        res.seconds = time.monotonic() - self.started
        res.output_tail = self.tail.text()
        if self.killed_for is not None:
            res.status = self.killed_for
            if res.status == "timeout":
                res.error = {"kind": "timeout", "limit": self.spec.timeout,
                             "message": f"stopped after --timeout {self.spec.timeout:g} s"}
        else:
            ending = classify_exit(returncode, res.status, res.error, output=res.output_tail)
            res.status, res.error = ending.status, ending.error
            res.signal = ending.signal or res.signal
        try:
            if res.status in PRINTED_STATUSES:
                res.printed_metrics = self.printed.finish(self._scan_wait())
        except scanproc.RuleTimedOut as e:
            self.scan_error = e
        finally:
            self.printed.close()
        if self.streams is not None:
            res.processes = self.streams.finish(res)
        if self.writer is not None:
            if res.printed_metrics:
                self.writer.write_raw(dumps({"metrics": res.printed_metrics}))
            end = {
                "status": res.status, "returncode": returncode, "signal": res.signal,
                "seconds": round(res.seconds, 3), "steps": res.steps,
                "output_tail": res.output_tail[-8192:],
            }
            self.writer.write_raw(dumps({"end": end}))
            if res.header is not None:
                res.trace_path = self._keep_trace(self.writer)
            else:
                self.writer.abort()
        return res

    def _scan_wait(self) -> float | None:
        """Seconds the --metric rules may still take: what is left of --timeout (at least
        MIN_WAIT); None (their own bound) without a timeout."""
        if self.spec.timeout is None:
            return None
        left = self.started + self.spec.timeout - time.monotonic()
        return max(left, scanproc.MIN_WAIT)

    def _keep_trace(self, writer: TraceWriter) -> str | None:
        """The run's trace under its name; None, with a warning, when its folder is gone (the
        target removed it): what was compared stands, only the file is lost."""
        try:
            return str(writer.close())
        except UsageError:
            if writer.path.parent.is_dir():
                raise  # the disk is full or the like: one line, exit 2
            writer.abort()
            self.result.warnings.append(f"the trace of run {self.spec.index} was not kept: its "
                                        f"folder {str(writer.path.parent)!r} was removed while "
                                        "the run went")
            return None


class _Runs:
    """The state of :func:`run_all`: runs waiting, going and done, and the steps of its loop."""

    def __init__(self, specs: Sequence[RunSpec], listener: Listener, jobs: int,
                 should_stop: Callable[[], bool],
                 fits: Callable[[RunSpec, list[RunSpec]], bool] | None = None,
                 stop_run: Callable[[int], bool] | None = None) -> None:
        self.specs = specs
        self.listener = listener
        self.jobs = max(1, jobs)
        self.should_stop = should_stop
        self.fits = fits
        self.stop_run = stop_run
        #: runs stopped by ``stop_run`` (each once)
        self.stopped: set[int] = set()
        # bounded: when the runs record faster than we compare, the readers wait, the pipes fill
        # and the runs wait too, so memory stays flat however many steps stream in
        self.events: Events = queue.Queue(maxsize=EVENT_BACKLOG)
        self.pacer = _Pacer()
        self.waiting = list(specs)
        self.live: dict[int, LiveRun] = {}
        self.results: dict[int, RunResult] = {}
        self.stopping = False
        self.interrupted = 0

    @property
    def going(self) -> bool:
        return bool(self.waiting or self.live)

    def cancel_waiting(self) -> None:
        for spec in self.waiting:
            self.results[spec.index] = RunResult(spec.index, status="cancelled")
        self.waiting.clear()

    def cancel_all(self) -> None:
        """The verdict is known (fail-fast, a target that cannot be found): stop every run."""
        self.stopping = True
        for run in self.live.values():
            run.stop("cancelled")

    def interrupt(self, count: int) -> None:
        """Ctrl-C or SIGTERM number ``count`` to us: stop everything, the second time at once."""
        if count > self.interrupted:
            self.interrupted = count
            self.cancel_waiting()
            for run in self.live.values():
                run.stop("cancelled", graceful=count == 1)

    def start_due(self) -> None:
        while self.waiting and len(self.live) < self.jobs and not self.stopping:
            if self.live and self.fits is not None and not self.fits(
                    self.waiting[0], [r.spec for r in self.live.values()]):
                break  # the next run waits for room (cores, a GPU)
            spec = self.waiting.pop(0)
            # a control run is compared with nothing it could get ahead of (its steps go to a
            # judge of a few steps): it neither waits for the others nor holds them back
            pacer = self.pacer if spec.told.control is None else None
            self.live[spec.index] = _LiveRun(spec, self.events, pacer) \
                if spec.launcher is None else spec.launcher.start(spec, self.events)
            self.listener.run_started(spec.index)
        if self.stopping:
            self.cancel_waiting()

    def take_event(self, compare: bool = True) -> None:
        """Hand the next item of a run (waiting briefly for one) to the run and the listener."""
        try:
            item = self.events.get(timeout=_POLL)
        except queue.Empty:
            return
        run = self.live.get(item[1])
        if run is None:
            return
        if item[0] != "event":
            run.open_streams -= 1
            return
        run.handle(item[2], item[3])
        if compare:
            self.listener.event(item[1], item[2])
            if not self.stopping and self.should_stop():
                self.cancel_all()
            elif self.stop_run is not None and item[1] not in self.stopped \
                    and self.stop_run(item[1]):
                self.stopped.add(item[1])
                run.stop("stopped")

    def tick(self) -> None:
        """Every run's timers; a run that is ready is finished and reported."""
        now = time.monotonic()
        for idx, run in list(self.live.items()):
            run.tick(now)
            if not run.ready:
                continue
            result = self.results[idx] = run.finish()
            del self.live[idx]
            if run.scan_error is not None:
                raise run.scan_error  # the other runs are stopped on the way out (run_all)
            if result.printed_metrics:  # compared like the metrics the run itself recorded
                self.listener.event(idx, MetricsRecord({"metrics": result.printed_metrics},
                                                       result.printed_metrics))
            if result.status == "unresolved":
                self.cancel_all()
            elif result.status == "timeout":
                self.cancel_waiting()
            self.listener.run_finished(result)

    def abort(self) -> None:
        """Something went wrong in here: kill every run at once, wait (bounded) for its pipes and
        keep what it recorded."""
        for run in self.live.values():
            run.kill_now()
        deadline = time.monotonic() + ABANDON
        while any(not run.ready for run in self.live.values()) and time.monotonic() < deadline:
            self.take_event(compare=False)
        for idx, run in self.live.items():
            run.give_up()
            self.results[idx] = run.finish()

    def in_order(self) -> list[RunResult]:
        return [self.results.get(s.index) or RunResult(s.index, status="cancelled")
                for s in self.specs]


def run_all(
    specs: Sequence[RunSpec],
    listener: Listener,
    jobs: int = 1,
    should_stop: Callable[[], bool] = lambda: False,
    fits: Callable[[RunSpec, list[RunSpec]], bool] | None = None,
    stop_run: Callable[[int], bool] | None = None,
) -> list[RunResult]:
    """Run every spec (``jobs`` at a time), feeding events to ``listener`` as they arrive.

    ``fits(spec, running)`` (when given) says whether the next spec may start beside the specs
    running now (cores, a GPU); one always may when nothing runs.

    ``should_stop`` is polled after each event; when it says so (fail-fast), every run still
    going is stopped and reported as cancelled. ``stop_run(run)`` too, for the run whose event it
    was: when it says so, that run alone is stopped, as ``stopped`` (a resume's interrupted
    torchrun job, once its checkpoint is taken: its other ranks would wait for the one that
    ended). A run that times out cancels the runs not yet
    started (the verdict is known). On Ctrl-C or SIGTERM every run is stopped, its recorded steps
    are kept, and :class:`Interrupted` is raised with the results so far; a second signal kills
    at once.
    """
    procs.ensure_standard_fds()  # no pipe of a run may land on 0, 1 or 2
    runs = _Runs(specs, listener, jobs, should_stop, fits, stop_run)
    # while runs go, Ctrl-C, SIGTERM and SIGHUP (a closed terminal) only count: the loop stops
    # the runs and keeps what they recorded
    with CaughtSignals() as signals:
        try:
            while runs.going:
                runs.interrupt(signals.count)
                runs.start_due()
                runs.take_event()
                runs.tick()
        except BaseException as exc:
            runs.abort()
            if isinstance(exc, KeyboardInterrupt):
                raise Interrupted("interrupted", runs.in_order()) from None
            raise
    ordered = runs.in_order()
    if signals.count:
        raise Interrupted("interrupted", ordered)
    for res in ordered:
        if res.status == "unresolved" and res.error:
            raise TargetNotFound(res.error.get("message", "target not found"), res.error.get("traceback"))
    return ordered
