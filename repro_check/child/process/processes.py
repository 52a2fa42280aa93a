"""Steps recorded in the processes the target starts (``multiprocessing``,
``torch.multiprocessing``, ``mp.spawn``), with any start method: Hogwild training, one model a
process.

Each process the run's main process starts through ``multiprocessing`` gets a trace stream of its
own: its steps are numbered from 1, and its lines go to a file of its own in the run's events
folder (``proc-K.events``), which the runner tails. K, the process index, is the order in which
the main process called ``Process.start`` (1, 2, ...; numbered under a lock), so a deterministic
script gives every process the same index in every run. DataLoader workers and multiprocessing's
manager servers never train and get no index; processes started by a child are not recorded. A
pool's workers (``multiprocessing.Pool``, ``ProcessPoolExecutor``) are recorded like any process,
but each runs whichever task comes next: their streams agree across runs only if the tasks reach
the same workers in the same order.

How a child is reached, whatever the start method:

* In the main process, ``BaseProcess.start`` numbers the process and hangs a small token on the
  process object (:class:`Stream`) before it starts.
* Every start method enters the new process through ``BaseProcess._bootstrap``: fork right after
  ``os.fork``, spawn and forkserver once the process object has been unpickled in the new
  interpreter. It runs before any of the target's code in the child and ends after it, so it is
  where a child's stream begins and ends (an ``os.register_at_fork`` handler would only see
  forks). Under fork the wrapper is inherited. Under spawn and forkserver the token installs it as
  it is unpickled (its ``__reduce__`` names :func:`arrive`), so no ``sitecustomize``, changed
  command line or patched spawn module is needed, and a child started any other way is unaffected.
* A forked child inherits the recorder with its hooks installed and the main's event pipe open
  (whose emitter writes only from the main process): the recorder is replaced by a fresh one with
  its own count and RNG baseline, writing to the child's file. Seeding came along with the fork,
  but for Python's ``random``, which Python itself reseeds from the OS in a forked child: with the
  ``python`` component it is seeded again there. A spawned child is a fresh interpreter: the
  run's seeding (same seed, same components) is applied there first, before multiprocessing
  re-imports the main module (:class:`SpawnSeeding`). Either way a child that draws from
  ``random`` or numpy draws the same numbers in every run (every child the same ones, as every
  rank of a torchrun job).

A child's recording is put in through the same interface as the run's
(:mod:`repro_check.child.features`), with a :class:`~repro_check.child.features.RunContext` of its
own (the run's configuration as a child takes it: not a rank, no step probe, no ``--across``
loading to watch) and the features it needs: its seeding (:class:`ProcessSeeding`: what came
along with the fork, or what was applied as it was spawned), its trace header, the seeding watch,
a step recorder, and its end of stream before ``os._exit`` (:class:`ProcessEnd`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import threading
import time
from typing import Any

from repro_check import targets
from repro_check.child.observe import capture
from repro_check.child import features, patches
from repro_check.child.seeding import components as seeding
from repro_check.child.process.emit import Emitter
from repro_check.trace.format import header_line
from repro_check.trace.protocol import RunConfig

#: the process object's attribute that carries its stream (set in the main process)
TOKEN = "_repro_check_stream"
#: the events file of process K in the run's events folder
EVENTS_NAME = "proc-{index}.events"
#: modules whose process targets never train: they get no index
NOT_TRAINING = ("torch.utils.data._utils.worker", "multiprocessing.managers")


class Stream:
    """Which child a process is (``index``) and what it needs to record: the events folder, the
    run's configuration as a child takes it (its seeding, ``--max-steps``) and the main's trace
    header (``settings``)."""

    def __init__(self, index: int, settings: dict[str, Any], origin: int) -> None:
        self.index = index
        self.settings = settings
        self.origin = origin  # the main process of the run

    def __reduce__(self) -> tuple[Any, ...]:
        return (arrive, (self.index, self.settings, self.origin))


def arrive(index: int, settings: dict[str, Any], origin: int) -> Stream:
    """The token unpickled in a spawned (or forkserver) child: wrap ``_bootstrap`` here too, so the
    child's stream begins before the target's code runs."""
    _wrap_bootstrap()
    return Stream(index, settings, origin)


class SpawnSeeding:
    """Rides in multiprocessing's preparation data, which a spawned child unpickles first, before
    it re-imports the main module and unpickles the process (importing the target's module): the
    run's seeding is applied then, so what those imports draw is seeded too."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings

    def __reduce__(self) -> tuple[Any, ...]:
        return (seed_spawned, (self.settings,))


#: in a spawned child: what the run's seeding did there (None until applied)
_SPAWN_SEEDING: dict[str, Any] | None = None


def seed_spawned(settings: dict[str, Any]) -> None:
    """Apply the run's seeding in a spawned child (the preparation data's entry stays None)."""
    global _SPAWN_SEEDING
    if _SPAWN_SEEDING is None and capture.active() is None:
        _SPAWN_SEEDING = _apply_seeding(settings["config"])


def _importable_at_start() -> bool:
    """Whether a new interpreter finds this package before multiprocessing gives it our
    ``sys.path``: the preparation data is unpickled first, and a failure there would be the
    child's end. Without it the child is seeded when its process object arrives."""
    # this package (repro_check/, from child/process/)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    paths = (os.environ.get("PYTHONPATH") or "").split(os.pathsep)
    return here in {os.path.realpath(os.path.join(p, "repro_check")) for p in paths if p}


def _apply_seeding(config: RunConfig) -> dict[str, Any]:
    if config.seed is None:
        return {}
    # a resume's runs: no DataLoader gets a generator the script could not save
    return seeding.apply(config.seed, list(config.components), config.threads,
                         config.warn_only, config.resume is None)


class _Starts:
    """The main process's count of the processes it started, and what each child inherits."""

    def __init__(self, settings: dict[str, Any], done: dict[str, Any]) -> None:
        self.settings = settings
        self.done = done
        self.pid = os.getpid()
        self.count = 0
        self.lock = threading.Lock()
        #: per thread, the process being started (for its preparation data)
        self.starting = threading.local()

    def number(self, process: Any) -> None:
        if os.getpid() != self.pid or TOKEN in vars(process) or not _may_train(process):
            return
        with self.lock:
            self.count += 1
            setattr(process, TOKEN, Stream(self.count, self.settings, self.pid))


#: set in the run's main process by :func:`install` (inherited, with it, by forked children)
_STARTS: _Starts | None = None


def _may_train(process: Any) -> bool:
    target = getattr(process, "_target", None)
    return getattr(target, "__module__", None) not in NOT_TRAINING


def install(config: RunConfig, header: dict[str, Any], done: dict[str, Any]) -> None:
    """In the run's main process: number the processes it starts and give each a stream."""
    global _STARTS
    # only when the target starts processes: the run entry starts without multiprocessing
    from multiprocessing.process import BaseProcess

    settings = {
        "events_dir": config.processes,
        "config": process_config(config),
        "header": header,
    }
    _STARTS = starts = _Starts(settings, done)

    def make(original_start: Any) -> Any:
        @functools.wraps(original_start)
        def start(process: Any) -> None:
            starts.number(process)
            starts.starting.token = vars(process).get(TOKEN)
            try:
                original_start(process)
            finally:
                starts.starting.token = None

        return start

    patches.PATCHES.wrap("processes.start", BaseProcess, "start", make)
    _wrap_bootstrap()
    _seed_in_preparation(starts)


def process_config(config: RunConfig) -> RunConfig:
    """The run's configuration as a process the target starts takes it: seeded and recorded as
    the run is, but not a rank (its own recorder), no step probed, no ``--across`` override to
    apply or loading to watch (the main process's, inherited or not, are the run's), no trace
    channel (it writes to its events file)."""
    return dataclasses.replace(config, event_fd=None, distributed=None, processes=None,
                               probe_step=None, num_workers=None, start_method=None,
                               compile=None)


class Processes(features.Registered):
    """When asked, the processes the target starts record streams of their own."""

    name = "processes"
    patches = ("processes.end", "processes.start", "processes.bootstrap",
               "processes.preparation")

    def install(self, context: features.RunContext) -> None:
        if context.config.processes:
            install(context.config, context.header, context.done)


class ProcessSeeding(features.Seeding):
    """A child's seeding: a forked child's came along with the fork (but Python's ``random``,
    which Python reseeds at fork: seeded again), a spawned child's was applied from its
    preparation data (or is applied now, if it came without)."""

    def __init__(self, forked: bool) -> None:
        self.forked = forked

    def install(self, context: features.RunContext) -> None:
        config = context.config
        if self.forked:
            done = dict(_STARTS.done) if _STARTS is not None else {}
            if config.seed is not None and "python" in config.components:
                done["python"] = seeding.seed_python(config.seed)  # Python reseeds it at fork
        else:
            done = _SPAWN_SEEDING if _SPAWN_SEEDING is not None else _apply_seeding(config)
        context.done = done


class ProcessEnd(features.Registered):
    """``os._exit`` in the child's code skips everything: its stream is ended first."""

    name = "end"
    patches = ("processes.end",)

    def __init__(self, child: Child) -> None:
        self.child = child

    def install(self, context: features.RunContext) -> None:
        child = self.child
        owner = os.getpid()

        def make(previous: Any) -> Any:
            def _exit(code: int) -> None:
                if os.getpid() == owner:
                    try:
                        child.end(code, "exited")
                    except BaseException:  # noqa: BLE001 - exiting anyway
                        pass
                previous(code)

            return _exit

        patches.PATCHES.wrap("processes.end", os, "_exit", make, token=child)


def _seed_in_preparation(starts: _Starts) -> None:
    """Add :class:`SpawnSeeding` to the preparation data of every recorded process spawned (or
    started by the forkserver): multiprocessing's ``prepare`` ignores keys it does not know."""
    # only when the target starts processes: the run entry starts without multiprocessing
    from multiprocessing import spawn

    def make(original: Any) -> Any:
        @functools.wraps(original)
        def get_preparation_data(name: str) -> dict[str, Any]:
            data = original(name)
            token = getattr(starts.starting, "token", None)
            if isinstance(token, Stream) and os.getpid() == starts.pid \
                    and _importable_at_start():
                data["repro_check_seeding"] = SpawnSeeding(token.settings)
            return data

        return get_preparation_data

    patches.PATCHES.wrap("processes.preparation", spawn, "get_preparation_data", make)


def _wrap_bootstrap() -> None:
    """Run every process that carries a stream token as a recorded child (once a process).

    ``BaseProcess._bootstrap`` is multiprocessing's private entry of every new process: where
    it is missing, processes are not recorded (the listing says why) and run as they would."""
    # only when the target starts processes: the run entry starts without multiprocessing
    from multiprocessing.process import BaseProcess

    if patches.PATCHES.has("processes.bootstrap", BaseProcess, "_bootstrap"):
        return
    if not callable(getattr(BaseProcess, "_bootstrap", None)):
        patches.PATCHES.skip("processes.bootstrap", "multiprocessing.process.BaseProcess._bootstrap",
                             "this Python's multiprocessing has no BaseProcess._bootstrap: the "
                             "processes the target starts are not recorded")
        return

    def make(original: Any) -> Any:
        @functools.wraps(original)
        def bootstrap(process: Any, *args: Any, **kwargs: Any) -> int:
            token = vars(process).get(TOKEN)
            if not isinstance(token, Stream) or os.getpid() == token.origin:
                return original(process, *args, **kwargs)
            try:
                child = Child(token, process)
            except Exception as e:  # noqa: BLE001 - recording must never stop the target's process
                sys.stderr.write(f"repro-check: process {token.index} is not recorded: "
                                 f"{type(e).__name__}: {e}\n")
                return original(process, *args, **kwargs)
            return child.run(original, args, kwargs)

        return bootstrap

    patches.PATCHES.wrap("processes.bootstrap", BaseProcess, "_bootstrap", make)


class Child:
    """The stream of one child process, from its start to its end: its features (the seeding,
    then the header, the seeding watch, a recorder of its own, its end before ``os._exit``),
    and a last record saying how it ended."""

    def __init__(self, token: Stream, process: Any) -> None:
        self.token = token
        self.process = process
        self.started = time.time()
        self.status: str | None = None
        self.ended = False
        s = token.settings
        path = os.path.join(s["events_dir"], EVENTS_NAME.format(index=token.index))
        self.emit = Emitter(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                                    0o600))
        inherited = capture.active()
        if inherited is not None:  # forked: the main's recorder and its seeding came along
            inherited.uninstall()
        forked = inherited is not None

        def header(context: features.RunContext) -> None:
            context.header = dict(s["header"], seeding=context.done, started=self.started,
                                  process={
                "index": token.index, "pid": os.getpid(), "parent_pid": token.origin,
                "name": getattr(process, "name", None),
                "start_method": getattr(process, "_start_method", None)
                or ("fork" if forked else "spawn"),
            })
            self.emit(header_line(context.header))

        context = features.RunContext(s["config"], self.emit)
        features.install(context, [ProcessSeeding(forked), features.SeedingWatch(),
                                   features.Capture(), ProcessEnd(self)], header=header)
        self.recorder = context.recorder
        self.watch = context.watch

    def run(self, bootstrap: Any, args: Any, kwargs: Any) -> int:
        """multiprocessing's ``_bootstrap`` with the process's ``run`` recorded; its exit code."""
        target_run = self.process.run

        def run() -> None:
            try:
                target_run()
            except capture.StopTraining:
                self.status = "stopped"  # --max-steps: the process ends normally
                return
            except SystemExit as e:
                self.status = "exited" if e.code in (None, 0) else "failed"
                raise
            except BaseException as e:  # noqa: BLE001 - reported, then raised as it would be
                self.status = "failed"
                self._error(e)
                raise
            self.status = "completed"

        self.process.run = run
        code = 1
        try:
            code = bootstrap(self.process, *args, **kwargs)
        finally:
            try:
                self.end(code)
            except Exception:  # noqa: BLE001 - the process ends with its own exit code anyway
                pass
        return code

    def _error(self, e: BaseException) -> None:
        self.recorder.flush()
        tb = targets.target_traceback(e)
        self.emit({"error": {"kind": "raised", "type": type(e).__name__,
                             "message": str(e)[:2000], "traceback": tb[-20000:],
                             "time": time.time()}})

    def end(self, code: int | None, status: str | None = None) -> None:
        """Hand over what is still held, then say how the process ended (once)."""
        if self.ended:
            return
        self.ended = True
        rec = self.recorder
        rec.flush()
        self.watch.check()
        if rec.metrics:
            self.emit({"metrics": rec.final_metrics()})
        status = status or self.status or ("failed" if code else "completed")
        self.emit({"info": {"status": status, "steps": rec.step,
                            "backward_calls": rec.backward_calls, "exitcode": code,
                            "seconds": time.time() - self.started}})
