"""Runs the target in fresh child processes and streams their trace lines as they happen.

Each run is a new process in its own session (so its DataLoader workers and anything else it
starts share one process group that can be stopped as a whole), with the seeding environment set
before the interpreter starts. Trace lines arrive on a dedicated pipe; stdout and stderr go to a
second pipe of which only a bounded tail is kept. Runs may go in parallel: every run uses the same
fixed thread count, so parallel runs give the same bits as sequential ones.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from . import seeding
from ._child import EXIT_RAISED, EXIT_RESOLVE
from .errors import Interrupted, TargetNotFound
from .targets import Target
from .trace import TraceWriter, dumps, parse_event

#: bytes of a run's combined stdout/stderr that are kept
OUTPUT_TAIL_BYTES = 64 * 1024
_POLL = 0.05

_LIVE_GROUPS: set[int] = set()


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@atexit.register
def _kill_all_live_groups() -> None:
    for pgid in list(_LIVE_GROUPS):
        _kill_group(pgid)


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

    @property
    def failed(self) -> bool:
        return self.status in ("failed", "crashed", "timeout", "unresolved")

    def describe_failure(self) -> str:
        if self.status == "timeout":
            return f"run {self.index} timed out after {self.seconds:.1f} s"
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


class _LiveRun:
    def __init__(self, spec: RunSpec, events: queue.Queue[tuple[Any, ...]]) -> None:
        self.spec = spec
        self.result = RunResult(spec.index)
        self.tail = _Tail()
        self.open_streams = 2
        self.started = time.monotonic()
        self.killed_for: str | None = None
        self.writer = TraceWriter(spec.trace_path) if spec.trace_path else None
        read_fd, write_fd = os.pipe()
        config = {
            "event_fd": write_fd,
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
        env = seeding.child_environment(os.environ, spec.seed, spec.components, spec.threads)
        env.update(spec.extra_env)
        env["REPRO_CHECK_RUN"] = json.dumps(config)
        env["REPRO_CHECK_RUN_INDEX"] = str(spec.index)
        env["PYTHONUNBUFFERED"] = "1"
        pkg_parent = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), pkg_parent) if p)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "repro_check._child"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                env=env,
                cwd=spec.cwd,
                start_new_session=True,
            )
        finally:
            os.close(write_fd)
        _LIVE_GROUPS.add(self.proc.pid)
        self.event_reader = threading.Thread(
            target=self._read_events, args=(read_fd, events), daemon=True
        )
        self.output_reader = threading.Thread(target=self._read_output, args=(events,), daemon=True)
        self.event_reader.start()
        self.output_reader.start()

    def _read_events(self, fd: int, events: queue.Queue[tuple[Any, ...]]) -> None:
        idx = self.spec.index
        with os.fdopen(fd, "rb") as stream:
            for raw in stream:
                try:
                    ev = parse_event(json.loads(raw)) if not raw.startswith(b'{"format"') \
                        else json.loads(raw)
                except (ValueError, Exception):  # noqa: BLE001 - a garbled line is dropped, not fatal
                    continue
                events.put(("event", idx, ev, raw))
        events.put(("eof", idx))

    def _read_output(self, events: queue.Queue[tuple[Any, ...]]) -> None:
        assert self.proc.stdout is not None
        while True:
            chunk = self.proc.stdout.read1(65536)  # type: ignore[attr-defined]
            if not chunk:
                break
            self.tail.add(chunk)
        self.proc.stdout.close()
        events.put(("eof", self.spec.index))

    def kill(self, reason: str) -> None:
        if self.killed_for is None:
            self.killed_for = reason
        _kill_group(self.proc.pid)

    def handle(self, ev: dict[str, Any], raw: bytes) -> None:
        res = self.result
        if "header" in ev and "format" in ev:
            res.header = ev["header"]
        elif "step" in ev:
            res.steps = ev["step"]
        elif "error" in ev:
            res.error = ev["error"]
        elif "warning" in ev:
            res.warnings.append(ev["warning"])
        elif "info" in ev and "status" in ev["info"]:
            res.status = ev["info"]["status"]
        if self.writer is not None:
            self.writer.write_raw(raw.decode("utf-8"))

    def finish(self) -> RunResult:
        """Called once both pipes are closed: reap, classify, clean up the group, close the trace."""
        returncode = self.proc.wait()
        _kill_group(self.proc.pid)  # DataLoader workers or anything else left in its group
        _LIVE_GROUPS.discard(self.proc.pid)
        res = self.result
        res.returncode = returncode
        res.seconds = time.monotonic() - self.started
        res.output_tail = self.tail.text()
        if self.killed_for is not None:
            res.status = self.killed_for
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
            end = {k: v for k, v in {
                "status": res.status, "returncode": returncode, "signal": res.signal,
                "seconds": round(res.seconds, 3), "steps": res.steps,
                "output_tail": res.output_tail[-8192:],
            }.items()}
            self.writer.write_raw(dumps({"end": end}))
            if res.header is not None:
                res.trace_path = str(self.writer.close())
            else:
                self.writer.abort()
        return res


def run_all(
    specs: Sequence[RunSpec],
    listener: Listener,
    jobs: int = 1,
    should_stop: Callable[[], bool] = lambda: False,
) -> list[RunResult]:
    """Run every spec (``jobs`` at a time), feeding events to ``listener`` as they arrive.

    ``should_stop`` is polled after each event; when it says so (fail-fast), every run still
    going is stopped and reported as cancelled. On KeyboardInterrupt every process group is
    killed before the exception propagates.
    """
    events: queue.Queue[tuple[Any, ...]] = queue.Queue()
    waiting = list(specs)
    live: dict[int, _LiveRun] = {}
    results: dict[int, RunResult] = {}
    stopping = False
    try:
        while waiting or live:
            while waiting and len(live) < max(1, jobs) and not stopping:
                spec = waiting.pop(0)
                live[spec.index] = _LiveRun(spec, events)
                listener.run_started(spec.index)
            if stopping and waiting:
                for spec in waiting:
                    results[spec.index] = RunResult(spec.index, status="cancelled")
                waiting.clear()
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
                            other.kill("cancelled")
                elif kind == "eof":
                    run.open_streams -= 1
                    if run.open_streams == 0:
                        result = run.finish()
                        results[idx] = result
                        del live[idx]
                        if result.status == "unresolved":
                            for other in live.values():
                                other.kill("cancelled")
                            waiting.clear()
                        listener.run_finished(result)
            now = time.monotonic()
            for run in live.values():
                limit = run.spec.timeout
                if limit is not None and run.killed_for is None and now - run.started > limit:
                    run.kill("timeout")
                elif run.killed_for is None and run.proc.poll() is not None:
                    # the run is over; a leftover process holding its pipes must not keep us waiting
                    _kill_group(run.proc.pid)
    except BaseException as exc:
        for run in live.values():
            run.kill("cancelled")
        for run in live.values():
            run.event_reader.join(timeout=5)
            run.output_reader.join(timeout=5)
            try:
                while True:
                    item = events.get_nowait()
                    if item[0] == "event" and item[1] in live:
                        live[item[1]].handle(item[2], item[3])
                        listener.event(item[1], item[2])
            except queue.Empty:
                pass
            results[run.spec.index] = run.finish()
        if isinstance(exc, KeyboardInterrupt):
            partial = [results.get(s.index, RunResult(s.index, status="cancelled")) for s in specs]
            raise Interrupted("interrupted", partial) from None
        raise
    ordered = [results[s.index] for s in specs]
    for res in ordered:
        if res.status == "unresolved" and res.error:
            raise TargetNotFound(res.error.get("message", "target not found"), res.error.get("traceback"))
    return ordered
