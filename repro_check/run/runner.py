"""Runs the target in fresh child processes and streams their trace lines as they happen.

Each run is a new process in its own session (so its DataLoader workers and anything else it
starts share one process group and session that can be stopped as a whole), with the seeding
environment set before the interpreter starts. Trace lines arrive on a dedicated pipe; stdout and
stderr go to a second pipe of which only a bounded tail is kept. Runs may go in parallel: every
run uses the same fixed thread count, so parallel runs give the same bits as sequential ones.

Stopping is two-stage: a run that must stop (timeout, fail-fast, Ctrl-C or SIGTERM to us) gets
SIGTERM, so it can hand over the steps it still holds, then SIGKILL for its whole group and
session after :data:`STOP_GRACE` seconds. Whenever a run's process has ended, whatever it left
behind is killed, including a process that holds its pipes from outside its session; no run's
process outlives :func:`run_all`.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from repro_check.run import procs
from repro_check.child import seeding
from repro_check.child.exits import EXIT_RAISED, EXIT_RESOLVE
from repro_check.errors import Interrupted, TargetNotFound
from repro_check.targets import Target
from repro_check.trace.format import MAX_LINE_BYTES, TraceWriter, dumps, parse_event

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
_POLL = 0.05

_LIVE_GROUPS: set[int] = set()


def _kill_group(pgid: int) -> None:
    procs.signal_group(pgid, signal.SIGKILL)


@atexit.register
def _kill_all_live_groups() -> None:
    for pgid in list(_LIVE_GROUPS):
        procs.kill_run(pgid)


@dataclass
class RunSpec:
    """Everything one run needs."""

    index: int
    target: Target
    args: Sequence[str] = ()
    seed: int | None = 0
    components: Sequence[str] = seeding.COMPONENTS
    threads: int | None = 1
    max_steps: int | None = None
    timeout: float | None = None
    trace_path: Path | None = None
    warn_only: bool = False
    probe_step: int | None = None
    cwd: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    #: the interpreter the run starts with (None: this one); it must import this package
    executable: str | None = None
    #: starts the run some other way (e.g. under torchrun); ``launcher.start(spec, events)``
    #: returns an object that behaves like :class:`_LiveRun`
    launcher: Any = None


#: statuses of a run that mean the target failed (exit 3)
FAILED_STATUSES = ("failed", "crashed", "timeout", "unresolved")


@dataclass
class RunResult:
    """How one run ended; ``status`` is one of completed, stopped (max-steps), exited (early, with
    status 0), failed (raised or exited non-zero), crashed (killed by a signal), timeout,
    cancelled (stopped by fail-fast or an interrupt), unresolved."""

    index: int
    status: str = "pending"
    returncode: int | None = None
    signal: str | None = None
    error: dict[str, Any] | None = None
    output_tail: str = ""
    steps: int = 0
    header: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    trace_path: str | None = None
    #: seeding components the target overrode itself: {"component", "key", "value"} records
    overrides: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.status in FAILED_STATUSES

    def describe_failure(self) -> str:
        if self.status == "timeout":
            limit = (self.error or {}).get("limit")
            took = f"{limit:g}" if isinstance(limit, (int, float)) else f"{self.seconds:.1f}"
            return f"run {self.index} timed out after {took} s"
        if self.status == "crashed":
            return f"run {self.index} was killed by {self.signal}"
        if self.error and self.error.get("kind") == "raised":
            return f"run {self.index} raised {self.error.get('type')}: {self.error.get('message')}"
        if self.error:
            return f"run {self.index}: {self.error.get('message')}"
        return f"run {self.index} exited with status {self.returncode}"


class Listener(Protocol):
    """Receives what happens in the runs (progress display, streaming comparison)."""

    def run_started(self, index: int) -> None: ...

    def event(self, index: int, event: dict[str, Any]) -> None: ...

    def run_finished(self, result: RunResult) -> None: ...


class _Tail:
    """The last ``limit`` bytes of a stream, in bounded memory."""

    def __init__(self, limit: int = OUTPUT_TAIL_BYTES) -> None:
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.total = 0

    def add(self, data: bytes) -> None:
        self.chunks.append(data)
        self.size += len(data)
        self.total += len(data)
        while self.size - len(self.chunks[0]) >= self.limit:
            self.size -= len(self.chunks.pop(0))
        if len(self.chunks) > 256:
            joined = b"".join(self.chunks)[-self.limit :]
            self.chunks, self.size = [joined], len(joined)

    def text(self) -> str:
        data = b"".join(self.chunks)[-self.limit :]
        text = data.decode("utf-8", errors="replace")
        if self.total > len(data):
            text = f"[... {self.total - len(data)} earlier bytes not kept ...]\n" + text
        return text


class _Lines:
    """Splits a byte stream into lines; a line longer than any valid trace line is dropped."""

    def __init__(self, on_line: Callable[[bytes], None]) -> None:
        self.on_line = on_line
        self.partial = b""
        self.skipping = False

    def add(self, chunk: bytes) -> None:
        *lines, rest = (self.partial + chunk).split(b"\n")
        for line in lines:
            if self.skipping:
                self.skipping = False
            elif line:
                self.on_line(line)
        self.partial = rest
        if len(self.partial) > MAX_LINE_BYTES:
            self.partial, self.skipping = b"", True


def run_config(spec: RunSpec, event_fd: int | None) -> dict[str, Any]:
    """What the run entry (:mod:`repro_check.child.main`) reads from ``REPRO_CHECK_RUN``."""
    return {
        "event_fd": event_fd,
        "parent": os.getpid(),
        "target": spec.target.to_dict(),
        "args": list(spec.args),
        "seed": spec.seed,
        "components": list(spec.components),
        "threads": spec.threads,
        "max_steps": spec.max_steps,
        "run": spec.index,
        "warn_only": spec.warn_only,
        "probe_step": spec.probe_step,
    }


def run_environment(spec: RunSpec, config: dict[str, Any]) -> dict[str, str]:
    """The environment a run starts with: seeding variables, its configuration, our package."""
    env = seeding.child_environment(os.environ, spec.seed, spec.components, spec.threads)
    env.update(spec.extra_env)
    env["REPRO_CHECK_RUN"] = json.dumps(config)
    env["REPRO_CHECK_RUN_INDEX"] = str(spec.index)
    env["PYTHONUNBUFFERED"] = "1"
    pkg_parent = str(Path(__file__).resolve().parents[2])  # the folder that holds repro_check/
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), pkg_parent) if p)
    return env


def apply_event(res: Any, ev: dict[str, Any]) -> bool:
    """Fold one trace record of a run (or a rank) into its result; True when it is the record
    saying the target returned (its final status)."""
    if "header" in ev and "format" in ev:
        res.header = ev["header"]
    elif "step" in ev:
        res.steps = ev["step"]
    elif "error" in ev:
        res.error = ev["error"]
    elif "warning" in ev:
        res.warnings.append(ev["warning"])
        if isinstance(ev.get("component"), str):
            res.overrides.append({k: ev.get(k) for k in ("component", "key", "value")})
    elif "info" in ev and isinstance(ev["info"], dict) and "status" in ev["info"]:
        res.status = str(ev["info"]["status"])
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
    def __init__(self, spec: RunSpec, events: queue.Queue[tuple[Any, ...]],
                 pacer: _Pacer | None = None) -> None:
        self.spec = spec
        self.events = events
        self.pacer = pacer
        self.result = RunResult(spec.index)
        self.tail = _Tail()
        self.open_streams = 2
        self.started = time.monotonic()
        self.killed_for: str | None = None
        self.stop_deadline: float | None = None
        self.exited_at: float | None = None
        self.done_at: float | None = None
        self.swept = False
        self.killed: set[int] = set()  # processes of the run we sent SIGKILL
        self.abandon = threading.Event()
        self.writer = TraceWriter(spec.trace_path) if spec.trace_path else None
        read_fd, write_fd = os.pipe()
        config = run_config(spec, write_fd)
        env = run_environment(spec, config)
        try:
            self.proc = subprocess.Popen(
                [spec.executable or sys.executable, "-m", "repro_check.child"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                env=env,
                cwd=spec.cwd,
                start_new_session=True,
            )
        except BaseException:
            os.close(read_fd)
            if self.writer is not None:
                self.writer.abort()
            raise
        finally:
            os.close(write_fd)
        _LIVE_GROUPS.add(self.proc.pid)
        assert self.proc.stdout is not None
        out_fd = self.proc.stdout.fileno()
        self.pipes = {procs.pipe_inode(read_fd), procs.pipe_inode(out_fd)}
        lines = _Lines(self._line)
        if pacer is not None:
            pacer.start(spec.index)
        self.readers = [
            threading.Thread(target=self._pump, args=(read_fd, lines.add, True), daemon=True),
            threading.Thread(target=self._pump, args=(out_fd, self.tail.add, False), daemon=True),
        ]
        for t in self.readers:
            t.start()

    # ---- reading (in threads) ------------------------------------------------------------
    def _pump(self, fd: int, sink: Callable[[bytes], None], own_fd: bool) -> None:
        try:
            while not self.abandon.is_set():
                ready, _, _ = select.select([fd], [], [], 0.2)
                if not ready:
                    continue
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                sink(chunk)
        finally:
            if own_fd:
                os.close(fd)
                if self.pacer is not None:
                    self.pacer.finish(self.spec.index)
            else:
                assert self.proc.stdout is not None
                self.proc.stdout.close()
            self.events.put(("eof", self.spec.index))

    def _line(self, raw: bytes) -> None:
        try:
            obj = json.loads(raw)
            ev = obj if isinstance(obj, dict) and "format" in obj else parse_event(obj)
        except Exception:  # noqa: BLE001 - a garbled line is dropped, not fatal
            return
        if self.pacer is not None and "step" in ev:
            self.pacer.advance(self.spec.index, ev["step"], self.abandon)
        self.events.put(("event", self.spec.index, ev, raw))

    # ---- stopping ------------------------------------------------------------------------
    def stop(self, reason: str, graceful: bool = True) -> None:
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
        self.killed.update(procs.kill_run(self.proc.pid))
        self.stop_deadline = time.monotonic()

    def tick(self, now: float) -> None:
        """Timers: the run's timeout, the grace period, and what a finished run left behind."""
        limit = self.spec.timeout
        if limit is not None and self.killed_for is None and now - self.started > limit:
            self.stop("timeout")
        if self.proc.poll() is None:
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
            self.killed.update(procs.kill_run(self.proc.pid))
        elif self.open_streams and not self.swept and now - self.exited_at > LINGER:
            self.swept = True  # something outside its session holds its pipes
            self.killed.update(procs.kill_run(self.proc.pid, self.pipes))
        elif self.open_streams and now - self.exited_at > LINGER + ABANDON:
            self.abandon.set()

    @property
    def ready(self) -> bool:
        return self.open_streams == 0 and self.proc.poll() is not None

    # ---- results -------------------------------------------------------------------------
    def handle(self, ev: dict[str, Any], raw: bytes) -> None:
        if apply_event(self.result, ev):
            self.done_at = time.monotonic()
        if self.writer is not None:
            self.writer.write_raw(raw.decode("utf-8"))

    def finish(self) -> RunResult:
        """Called once both pipes are closed and the process ended: classify, clean up, close
        the trace."""
        returncode = self.proc.poll()
        if returncode is None:  # only after an emergency stop that could not end it
            returncode = -signal.SIGKILL
        self.killed.update(procs.kill_run(self.proc.pid))
        procs.wait_gone(self.killed)
        _LIVE_GROUPS.discard(self.proc.pid)
        for t in self.readers:
            t.join(timeout=1.0)
        res = self.result
        res.returncode = returncode
        res.seconds = time.monotonic() - self.started
        res.output_tail = self.tail.text()
        if self.killed_for is not None:
            res.status = self.killed_for
            if res.status == "timeout":
                res.error = {"kind": "timeout", "limit": self.spec.timeout,
                             "message": f"stopped after --timeout {self.spec.timeout:g} s"}
        elif returncode == EXIT_RESOLVE:
            res.status = "unresolved"
        elif returncode < 0:
            res.status = "crashed"
            try:
                res.signal = signal.Signals(-returncode).name
            except ValueError:
                res.signal = f"signal {-returncode}"
        elif returncode == EXIT_RAISED or (returncode != 0 and res.status == "pending"):
            res.status = "failed"
            if res.error is None:
                res.error = {"kind": "exit", "message": f"exited with status {returncode}"}
        elif res.status == "pending":
            res.status = "exited"  # os._exit(0) or similar before the target returned
        if self.writer is not None:
            end = {
                "status": res.status, "returncode": returncode, "signal": res.signal,
                "seconds": round(res.seconds, 3), "steps": res.steps,
                "output_tail": res.output_tail[-8192:],
            }
            self.writer.write_raw(dumps({"end": end}))
            if res.header is not None:
                res.trace_path = str(self.writer.close())
            else:
                self.writer.abort()
        return res


class _Signals:
    """While runs are going, Ctrl-C, SIGTERM and SIGHUP (a closed terminal) only count here; the
    loop stops the runs and keeps what they recorded. A signal the caller ignores stays ignored;
    outside the main thread nothing is installed."""

    def __init__(self) -> None:
        self.count = 0
        self.previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1

    def __enter__(self) -> _Signals:
        for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is None:
                continue
            try:
                if signal.getsignal(sig) == signal.SIG_IGN:
                    continue  # e.g. a background job: the caller chose to ignore it
                self.previous[sig] = signal.signal(sig, self._handle)
            except (ValueError, OSError):  # not the main thread
                pass
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self.previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


def run_all(
    specs: Sequence[RunSpec],
    listener: Listener,
    jobs: int = 1,
    should_stop: Callable[[], bool] = lambda: False,
    fits: Callable[[RunSpec, list[RunSpec]], bool] | None = None,
) -> list[RunResult]:
    """Run every spec (``jobs`` at a time), feeding events to ``listener`` as they arrive.

    ``fits(spec, running)`` (when given) says whether the next spec may start beside the specs
    running now (cores, a GPU); one always may when nothing runs.

    ``should_stop`` is polled after each event; when it says so (fail-fast), every run still
    going is stopped and reported as cancelled. A run that times out cancels the runs not yet
    started (the verdict is known). On Ctrl-C or SIGTERM every run is stopped, its recorded steps
    are kept, and :class:`Interrupted` is raised with the results so far; a second signal kills
    at once.
    """
    # bounded: when the runs record faster than we compare, the readers wait, the pipes fill and
    # the runs wait too, so memory stays flat however many steps stream in
    events: queue.Queue[tuple[Any, ...]] = queue.Queue(maxsize=EVENT_BACKLOG)
    pacer = _Pacer()
    waiting = list(specs)
    live: dict[int, _LiveRun] = {}
    results: dict[int, RunResult] = {}
    stopping = False
    interrupted = 0

    def cancel_waiting() -> None:
        for spec in waiting:
            results[spec.index] = RunResult(spec.index, status="cancelled")
        waiting.clear()

    with _Signals() as signals:
        try:
            while waiting or live:
                if signals.count > interrupted:
                    interrupted = signals.count
                    cancel_waiting()
                    for run in live.values():
                        run.stop("cancelled", graceful=interrupted == 1)
                while waiting and len(live) < max(1, jobs) and not stopping:
                    if live and fits is not None and not fits(
                            waiting[0], [r.spec for r in live.values()]):
                        break
                    spec = waiting.pop(0)
                    live[spec.index] = _LiveRun(spec, events, pacer) if spec.launcher is None \
                        else spec.launcher.start(spec, events)
                    listener.run_started(spec.index)
                if stopping:
                    cancel_waiting()
                try:
                    item = events.get(timeout=_POLL)
                except queue.Empty:
                    item = None
                if item is not None:
                    kind, idx = item[0], item[1]
                    run = live[idx]
                    if kind == "event":
                        run.handle(item[2], item[3])
                        listener.event(idx, item[2])
                        if not stopping and should_stop():
                            stopping = True
                            for other in live.values():
                                other.stop("cancelled")
                    else:
                        run.open_streams -= 1
                now = time.monotonic()
                for idx, run in list(live.items()):
                    run.tick(now)
                    if run.ready:
                        result = run.finish()
                        results[idx] = result
                        del live[idx]
                        if result.status == "unresolved":
                            stopping = True
                            for other in live.values():
                                other.stop("cancelled")
                        elif result.status == "timeout":
                            cancel_waiting()
                        listener.run_finished(result)
        except BaseException as exc:
            _emergency_stop(live, events)
            for idx, run in live.items():
                results[idx] = run.finish()
            if isinstance(exc, KeyboardInterrupt):
                partial = [results.get(s.index, RunResult(s.index, status="cancelled"))
                           for s in specs]
                raise Interrupted("interrupted", partial) from None
            raise
    ordered = [results[s.index] for s in specs]
    if signals.count:
        raise Interrupted("interrupted", ordered)
    for res in ordered:
        if res.status == "unresolved" and res.error:
            raise TargetNotFound(res.error.get("message", "target not found"), res.error.get("traceback"))
    return ordered


def _emergency_stop(live: dict[int, _LiveRun], events: queue.Queue[tuple[Any, ...]]) -> None:
    """Something went wrong in here: kill every run at once and wait (bounded) for its pipes."""
    for run in live.values():
        run.killed_for = run.killed_for or "cancelled"
        procs.kill_run(run.proc.pid, run.pipes)
    deadline = time.monotonic() + ABANDON
    while any(not run.ready for run in live.values()) and time.monotonic() < deadline:
        try:
            item = events.get(timeout=_POLL)
        except queue.Empty:
            continue
        run = live.get(item[1])
        if run is None:
            continue
        if item[0] == "event":
            run.handle(item[2], item[3])
        else:
            run.open_streams -= 1
    for run in live.values():
        run.abandon.set()
        run.proc.kill()
        try:
            run.proc.wait(timeout=ABANDON)
        except subprocess.TimeoutExpired:
            pass

