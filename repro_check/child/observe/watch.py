"""Notices, inside a run, when the target seeds or reseeds a generator itself, or undoes a setting.

A script that sets ``torch.backends.cudnn.benchmark = True``, reseeds torch (from the clock, or
with ``torch.seed()``), changes the thread count or turns deterministic algorithms off undoes what
repro-check set up, and the runs may differ for a reason the user does not see. The settings are
compared with what seeding applied after every recorded step and when the target returns; calls
that seed a global generator (``torch.manual_seed``, ``torch.seed``, ``random.seed``,
``numpy.random.seed``) are observed as they happen, whether or not repro-check seeded that stream
(``--no-seed``, ``--without``): a script that seeds itself is reported too. Each is reported once
a run as ``{"warning": text, "component": name, "key": what, "value": seen, "where": file:line,
"source": ..., "order": n}``, so the report can also tell a constant seed from one that differs
between runs. ``source`` says where a seed came from when that can be seen: ``"clock"`` (the
value is the current time, see :mod:`repro_check.child.seeding.clock`), ``"entropy"`` (no value: OS
entropy), ``"unseeded python"``/``"unseeded numpy"`` (that stream had been drawn from without a
seed before the call, as ``seed = random.randint(...)`` does). ``order`` places the call among
model constructions (:mod:`repro_check.child.observe.origin`), ``at_step`` is the step in progress when
it was made. A seed that equals a coarse field of the time (the hour, the date) carries
``"clock_fields"``: only the runs together can tell it from a constant
(:func:`repro_check.compare.seeds.shared_field`, in the parent, where
:func:`~repro_check.compare.seeds.cross_run_notes` names such seeds). Seeding calls are reported
once per call site.

DataLoader workers: a forked worker inherits the watch, and a seeding call made directly from
the target's code in a worker (``np.random.seed()`` in a ``worker_init_fn`` or a Dataset's
``__getitem__``) is reported too, with ``"worker": id`` (the first worker's; the text does not
name it, so runs whose workers came first in another order agree), on the run's own trace (a
line written at once to the inherited pipe or events file, which a write of under 4 kB keeps
whole), once a run for all workers and epochs (a page shared with the workers, in an unlinked
file, holds what was reported). torch's own seeding of each worker is not the target's and is
not reported. A ``spawn`` (or ``forkserver``) worker is a fresh interpreter: every DataLoader's
``worker_init_fn`` is wrapped (:class:`WorkerWatch`, also under ``--no-seed``), and the wrapper,
pickled into the worker with its arguments, installs the watch there as it is unpickled (before
torch seeds the worker): it carries the run's trace descriptor and the shared page's file, which
multiprocessing passes to the new interpreter (``reduction.DupFd``, as it passes its own pipes),
so the records take the same way, in the same shape, once a run as from forked workers.

Draws of DataLoader fetches (:meth:`SeedingWatch.watch_draws`, ``--across workers=`` and
``start=`` runs only): which global random stream (Python's ``random``, numpy's, torch's) a
fetch advances, the Dataset's ``__getitem__`` and the collate function drawing from it, in the
run's process or in a DataLoader worker (forked, or spawned: :func:`arrive` installs it there
too). Each stream is noted once a run for the process and once for all its workers, as
``{"info": {"draw": {"stream": "python", "worker": true}}}`` (read by ``--across``'s report:
an augmentation whose numbers depend on the worker count).
"""

from __future__ import annotations

import functools
import math
import mmap
import os
import random
import sys
import tempfile
import zlib
from collections.abc import Callable
from typing import Any, Literal

from repro_check.child.seeding import clock, rngstate
from repro_check.child.observe import origin
from repro_check.child import patches
from repro_check.trace.seeding import STREAM_NAMES

Emit = Callable[[dict[str, Any]], None]

#: the streams whose unseeded draws can be seen (their state before any seeding is entropy)
_DRAWN = {"python": rngstate.python_state, "numpy": rngstate.numpy_state}
#: the global streams a DataLoader fetch is watched drawing from (:meth:`SeedingWatch.watch_draws`)
_FETCH_STREAMS = {"python": rngstate.python_state, "numpy": rngstate.numpy_state,
                  "torch": rngstate.torch_state}
#: torch's DataLoader fetchers (private: skipped with the reason where this torch lacks one)
_FETCHERS = ("_MapDatasetFetcher", "_IterableDatasetFetcher")


def _plain(value: Any) -> Any:
    """A JSON-safe form of an observed value."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value if not isinstance(value, str) else value[:200]
    if isinstance(value, int):
        return value if abs(value) < 2**63 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return repr(value)[:200]


def _worker_id() -> int | None:
    """This process's DataLoader worker id, once torch made it a worker (None elsewhere)."""
    data = sys.modules.get("torch.utils.data")
    if data is None:
        return None
    try:
        info = data.get_worker_info()
    except Exception:  # noqa: BLE001
        return None
    return getattr(info, "id", None) if info is not None else None


def _step() -> int:
    """The step in progress (1 before the first optimizer step)."""
    # loaded when a seeding call or a worker needs it: the run entry imports this module before torch
    from repro_check.child.observe import capture

    recorder = capture.active()
    return (getattr(recorder, "step", 0) or 0) + 1


class SeedingWatch:
    """Reports the seeding components (of those ``applied``) that the target overrides, and the
    global generators it seeds itself."""

    def __init__(self, emit: Emit, applied: dict[str, Any], seed: int | None) -> None:
        self.emit = emit
        self.applied = applied if seed is not None else {}
        self.seed = seed
        self.reported: set[str] = set()
        self.pid = os.getpid()
        #: the torch seed the default generator is expected to have (changes with torch.seed())
        self.torch_seed = seed
        #: streams whose state follows from a seed (repro-check's, or a constant of the script's)
        self.determined = {c for c in STREAM_NAMES if c in self.applied}
        self.at_install = {name: state() for name, state in _DRAWN.items()}
        #: unseeded streams seen drawn from, in the order seen (a seed may have come from them)
        self.drawn: list[str] = []
        #: what forked DataLoader workers reported, shared with them (one bit a warning)
        self.worker_reported: Any = None
        #: in a forked DataLoader worker: this worker's emitter, made on its first report
        self.worker_emit: tuple[int, Emit] | None = None
        #: the shared page's file descriptor (kept open), passed to spawned workers
        self.page_fd: int | None = None
        self.numpy_wrapped = False
        #: which global streams DataLoader fetches draw from is noted (:meth:`watch_draws`)
        self.draws = False

    def warn(self, component: str, key: str, value: Any, text: str, *, where: str | None = None,
             source: str | None = None, once: str | None = None, override: bool = True,
             extra: dict[str, Any] | None = None) -> None:
        once = once or key
        worker = None
        if os.getpid() != self.pid:
            worker = _worker_id()
            if worker is None or not self._worker_first(once):
                return  # a process of the target's own records in a stream of its own
            # which worker is first differs between runs: the id is in the record, not the text
            text = f"{text} in a DataLoader worker"
        elif once in self.reported:
            return  # once a run
        else:
            self.reported.add(once)
        if override:
            text = f"{text} (overrides seeding component {component!r})"
        record = {"warning": text, "component": component, "key": key, "value": _plain(value),
                  "order": origin.tick(), "at_step": _step()}
        if where:
            record["where"] = where
        if source:
            record["source"] = source
        if worker is not None:
            record["worker"] = worker
        record.update(extra or {})
        emit = self.emit if worker is None else self._emitter()
        if emit is not None:
            emit(record)

    # ---- DataLoader workers --------------------------------------------------------------
    def _worker_first(self, once: str) -> bool:
        """In a forked worker: whether no worker of this run reported ``once`` yet (marks it)."""
        shared = self.worker_reported
        if shared is None:
            return False
        bit = zlib.crc32(once.encode()) % (len(shared) * 8)
        byte, mask = bit // 8, 1 << (bit % 8)
        if shared[byte] & mask:
            return False
        shared[byte] = shared[byte] | mask
        return True

    def _emitter(self) -> Emit | None:
        """A forked worker's writer to the run's trace (the inherited descriptor)."""
        pid = os.getpid()
        if self.worker_emit is None or self.worker_emit[0] != pid:
            fd = getattr(self.emit, "fd", None)
            if not isinstance(fd, int):
                return None
            # loaded when a seeding call or a worker needs it: the run entry imports this module before torch
            from repro_check.child.process.emit import Emitter

            self.worker_emit = (pid, Emitter(fd))
        return self.worker_emit[1]

    def _watching(self) -> bool:
        """Whether a seeding call in this process is reported: the run's process, or a forked
        DataLoader worker once torch seeded it (from then on the calls are the target's)."""
        return os.getpid() == self.pid or _worker_id() is not None

    def _share_page(self, fd: int | None) -> None:
        """The page of what workers reported: ``fd``'s (in a spawned worker), else a new one in
        an unlinked file, which forked workers share as mapped and spawned ones map from its
        descriptor (anonymous memory, shared with forked workers only, where no file can be
        made)."""
        try:
            if fd is None:
                # loaded when a seeding call or a worker needs it: the run entry imports this module
                # before torch
                from repro_check.child.process.emit import move_high

                with tempfile.TemporaryFile() as file:  # out of the target's way, as the trace's
                    fd = move_high(os.dup(file.fileno()))
                os.ftruncate(fd, mmap.PAGESIZE)
            self.page_fd = fd
            self.worker_reported = mmap.mmap(fd, mmap.PAGESIZE)
        except (OSError, ValueError):
            self.page_fd = None
            try:
                self.worker_reported = mmap.mmap(-1, 4096)
            except (OSError, ValueError):
                self.worker_reported = None

    def spawn_carry(self) -> dict[str, Any] | None:
        """What a spawned (or forkserver) DataLoader worker needs to watch its seeding calls,
        while multiprocessing pickles the worker's arguments in the run's process (None
        otherwise: a pickle made for anything else carries no descriptor)."""
        # loaded when a seeding call or a worker needs it: the run entry imports this module before torch
        from multiprocessing import context, reduction

        fd = getattr(self.emit, "fd", None)
        if (os.getpid() != self.pid or context.get_spawning_popen() is None
                or not isinstance(fd, int)):
            return None
        page = reduction.DupFd(self.page_fd) if self.page_fd is not None else None
        return {"emit": reduction.DupFd(fd), "page": page, "applied": dict(self.applied),
                "seed": self.seed, "pid": self.pid, "draws": self.draws}

    # ---- seeding calls -------------------------------------------------------------------
    def install(self, page_fd: int | None = None) -> SeedingWatch:
        """Watch the seeding calls and DataLoaders (through the patch registry: a watch installed
        later in this process, as in a forked child, takes this one's place)."""
        import torch
        import torch.random

        self._share_page(page_fd)
        for owner in (torch, torch.random):
            self._wrap(owner, "seed", self._torch_seed)
            self._wrap(owner, "manual_seed", self._torch_manual_seed)
        self._wrap(random, "seed", lambda original: self._seed_call(original, "python",
                                                                    "random.seed"))
        self.numpy_wrapped = False
        self.wrap_numpy()
        self._wrap_loaders()
        return self

    def uninstall(self) -> None:
        """Take this watch's wrappers out again."""
        patches.PATCHES.release(self)

    # ---- draws of DataLoader fetches ----------------------------------------------------------
    def watch_draws(self) -> None:
        """Note which global random streams DataLoader fetches draw from, here and in the
        workers (forked ones inherit the wrapped fetchers, spawned ones get them as the watch
        arrives, before their fetcher is made)."""
        self.draws = True
        fetchers: Any = None
        try:
            # only for --across workers=/start= runs; torch is loaded by then
            from torch.utils.data._utils import fetch as fetchers
        except ImportError:
            pass
        for name in _FETCHERS:
            cls = getattr(fetchers, name, None)
            if cls is None or not callable(vars(cls).get("fetch")):
                patches.PATCHES.skip("watch.draws", f"torch.utils.data._utils.fetch.{name}.fetch",
                                     f"this torch has no {name} with its own fetch")
                continue
            self._wrap(cls, "fetch", self._drawing, feature="watch.draws")

    def _drawing(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def fetch(fetcher: Any, *args: Any, **kwargs: Any) -> Any:
            before = {name: read() for name, read in _FETCH_STREAMS.items()}
            result = original(fetcher, *args, **kwargs)
            for name, read in _FETCH_STREAMS.items():
                if read() != before[name]:
                    self._drew(name)
            return result

        return fetch

    def _drew(self, stream: str) -> None:
        """A fetch advanced ``stream``: noted once a run here, and once for all workers."""
        once = f"draw:{stream}"
        emit: Emit | None
        if os.getpid() != self.pid:
            worker = _worker_id()
            if worker is None or not self._worker_first(once):
                return
            emit = self._emitter()
        elif once in self.reported:
            return
        else:
            self.reported.add(once)
            worker, emit = None, self.emit
        if emit is not None:
            emit({"info": {"draw": {"stream": stream, "worker": worker is not None}}})

    def _wrap(self, owner: Any, name: str, make: Callable[[Any], Any],
              feature: str = "watch.seeding") -> None:
        patches.PATCHES.wrap(feature, owner, name, make, token=self)

    def wrap_numpy(self) -> None:
        """Watch ``numpy.random.seed`` once numpy is imported (once a watch)."""
        np = sys.modules.get("numpy")
        if np is None or not hasattr(np, "random") or self.numpy_wrapped:
            return
        self._wrap(np.random, "seed", lambda original: self._seed_call(original, "numpy",
                                                                      "numpy.random.seed"))
        self.numpy_wrapped = True

    def _wrap_loaders(self) -> None:
        """Every DataLoader's ``worker_init_fn`` (its own or none) becomes a :class:`WorkerWatch`,
        which watches a spawned worker (a forked one inherits the watch)."""
        from torch.utils.data import DataLoader

        def watched(given: dict[str, Any]) -> None:
            given["worker_init_fn"] = WorkerWatch.of(given.get("worker_init_fn"), self)

        patches.PATCHES.wrap_arguments("watch.loaders", DataLoader, "__init__",
                                       ("worker_init_fn",), watched, token=self)

    def _torch_seed(self, original: Callable[[], int]) -> Callable[[], int]:
        @functools.wraps(original)
        def seed() -> int:
            value = original()
            where = self._site()
            if where is not False:
                if os.getpid() == self.pid:
                    self.torch_seed = value
                self.determined.discard("torch")
                at = f" at {where}" if where else ""
                applied = "torch" in self.applied
                self.warn("torch", "torch.seed", value,
                          f"the target {'re' if applied else ''}seeded torch from OS entropy with "
                          f"torch.seed() (seed {value}{at})",
                          where=where, source="entropy", override=applied,
                          once=f"torch.seed@{where}")
            return value

        return seed

    def _torch_manual_seed(self, original: Callable[..., Any]) -> Callable[..., Any]:
        import torch

        @functools.wraps(original)
        def manual_seed(seed: Any) -> Any:
            where = self._site()
            if where is False:
                return original(seed)
            hint = self._unseeded_draws()
            result = original(seed)
            if os.getpid() == self.pid:
                self.torch_seed = torch.initial_seed()
            self.seen("torch", "torch.manual_seed", seed, where, hint)
            return result

        return manual_seed

    def _seed_call(self, original: Callable[..., Any], component: str,
                   key: str) -> Callable[..., Any]:
        @functools.wraps(original)
        def seed(*args: Any, **kwargs: Any) -> Any:
            where = self._site()
            if where is False:
                return original(*args, **kwargs)
            value = args[0] if args else kwargs.get("a", kwargs.get("seed"))
            hint = self._unseeded_draws()
            result = original(*args, **kwargs)
            self._reseeded(component)
            self.seen(component, key, value, where, hint)
            return result

        return seed

    def _site(self) -> str | None | Literal[False]:
        """Where the seeding call being watched was made (``file:line``, None when unknown), or
        False when it is not reported: in a DataLoader worker, only a call made directly from the
        target's code counts (torch's seeding of the worker, and a forked worker's stack, which
        still holds the frames of the loop that started it, would name the wrong line)."""
        if os.getpid() == self.pid:
            return origin.caller(2)
        if not self._watching():
            return False
        try:
            frame = origin.direct_caller(sys._getframe(2))
        except ValueError:
            return False
        if frame is None:
            return False
        path = frame.f_code.co_filename
        if origin.is_library(path):
            return False
        return f"{path}:{frame.f_lineno}"

    def _unseeded_draws(self) -> list[str]:
        """The streams seen drawn from without any seed, so far (a seed taken from one differs
        in every run)."""
        for name, state in _DRAWN.items():
            before = self.at_install.get(name)
            if name in self.determined or name in self.drawn or before is None:
                continue
            try:
                if state() != before:
                    self.drawn.append(name)
            except Exception:  # noqa: BLE001 - a stream that cannot be read says nothing
                continue
        return list(self.drawn)

    def _reseeded(self, component: str) -> None:
        """Draws from a stream count from its last seeding on."""
        state = _DRAWN.get(component)
        if state is not None and self.at_install.get(component) is not None:
            try:
                self.at_install[component] = state()
            except Exception:  # noqa: BLE001
                pass

    def seen(self, component: str, key: str, value: Any, where: str | None,
             drawn: list[str]) -> None:
        """A call seeding ``component``'s stream with ``value`` (None: OS entropy)."""
        applied = component in self.applied
        what = STREAM_NAMES[component]
        shown = f"{key}({_plain(value)!r})" if value is not None else f"{key}()"
        at = f" at {where}" if where else ""
        site = f"{key}@{where}"
        unit = clock.clock_unit(value) if value is not None else None
        if unit is not None:
            self.determined.discard(component)
            self.warn(component, key, value,
                      f"the target seeded {what} from the clock ({key}{at}: the seed is the current "
                      f"time in {unit}), so every run gets another seed (each run's clock is moved "
                      "by a year, a month, a day, hours, minutes and seconds, so that runs started "
                      "in the same second differ too)",
                      where=where, source="clock", once=f"{site}:clock", override=applied)
            return
        if value is None:
            self.determined.discard(component)
            self.warn(component, key, None, f"the target {'re' if applied else ''}seeded {what} "
                                            f"from OS entropy ({key}() without a seed{at})",
                      where=where, source="entropy", once=f"{site}:entropy", override=applied)
            return
        try:
            fields = clock.clock_fields(value)
        except Exception:  # noqa: BLE001 - a seed of any type must not break the target
            fields = []
        try:
            same = applied and bool(value == self.seed)
        except Exception:  # noqa: BLE001 - e.g. an array as the seed
            same = False
        if same:
            return
        source = f"unseeded {drawn[0]}" if drawn else None
        if drawn:
            self.determined.discard(component)
            shown = key  # its value differs in every run: one line for all runs
            names = " and ".join(STREAM_NAMES[d] for d in drawn)
            hint = (f"; {names} had been drawn from without a seed before this call: a seed "
                    "taken from it (random.randint, np.random.randint) differs in every run")
        else:
            hint = ""
            self.determined.add(component)
        verb = "reseeded" if applied else "seeds"
        instead = f", not --seed {self.seed}" if applied else ""
        self.warn(component, key, value,
                  f"the target {verb} {what} itself ({shown}{at}{instead}){hint}",
                  where=where, source=source, override=applied, once=site,
                  extra={"clock_fields": fields} if fields else None)

    # ---- settings ------------------------------------------------------------------------
    def check(self) -> None:
        """Compare the current settings with what seeding applied (cheap: a few flag reads)."""
        if self.seed is None or os.getpid() != self.pid:
            return
        import torch

        on = self.applied
        if "torch" in on:
            current = torch.initial_seed()
            if current != self.torch_seed:
                self.warn("torch", "torch.manual_seed", current,
                          f"the target reseeded torch itself (its seed is {current}, not --seed "
                          f"{self.seed})")
        if "cudnn" in on:
            if torch.backends.cudnn.benchmark:
                self.warn("cudnn", "cudnn.benchmark", True,
                          "the target set torch.backends.cudnn.benchmark = True: cuDNN autotuning can "
                          "pick different kernels in each run")
            if not torch.backends.cudnn.deterministic:
                self.warn("cudnn", "cudnn.deterministic", False,
                          "the target set torch.backends.cudnn.deterministic = False")
        if "deterministic_algorithms" in on and not torch.are_deterministic_algorithms_enabled():
            self.warn("deterministic_algorithms", "use_deterministic_algorithms", False,
                      "the target turned deterministic algorithms off "
                      "(torch.use_deterministic_algorithms(False))")
        threads = on.get("threads")
        if isinstance(threads, int) and torch.get_num_threads() != threads:
            n = torch.get_num_threads()
            self.warn("threads", "set_num_threads", n,
                      f"the target changed torch's thread count to {n} (repro-check set {threads}; "
                      "the thread count changes result bits)")


class WorkerWatch:
    """A DataLoader's ``worker_init_fn`` (``user_fn``, or None), wrapped: it calls it, and when
    multiprocessing pickles it into a spawned (or forkserver) worker it brings the watch along
    (:func:`arrive`), installed before the worker runs any of the target's code."""

    def __init__(self, user_fn: Any, watch: SeedingWatch | None) -> None:
        self.user_fn = user_fn
        self.watch = watch

    @classmethod
    def of(cls, user_fn: Any, watch: SeedingWatch) -> Any:
        """``user_fn`` wrapped (once: a loader rebuilt from another's attributes keeps it)."""
        return user_fn if isinstance(user_fn, WorkerWatch) else cls(user_fn, watch)

    def __call__(self, worker_id: int) -> Any:
        if _SPAWNED is not None:
            _SPAWNED.wrap_numpy()  # numpy imported by the worker's code since it arrived
        if self.user_fn is not None:
            return self.user_fn(worker_id)
        return None

    def __reduce__(self) -> tuple[Any, ...]:
        carry = None
        if self.watch is not None:
            try:
                carry = self.watch.spawn_carry()
            except Exception:  # noqa: BLE001 - the worker then starts unwatched, never fails
                carry = None
        return (arrive, (self.user_fn, carry))


#: in a spawned DataLoader worker: the watch :func:`arrive` installed (None elsewhere)
_SPAWNED: SeedingWatch | None = None


def arrive(user_fn: Any, carry: dict[str, Any] | None) -> WorkerWatch:
    """A :class:`WorkerWatch` unpickled (in a spawned worker): install the watch of the run's
    process ``carry`` describes here (once a process), writing to its trace."""
    global _SPAWNED
    if carry is not None and _SPAWNED is None:
        try:
            # loaded when a seeding call or a worker needs it: the run entry imports this module before torch
            from repro_check.child.process.emit import Emitter

            emit = Emitter(carry["emit"].detach())
            page = carry["page"].detach() if carry.get("page") is not None else None
            spawned = SeedingWatch(emit, carry["applied"], carry["seed"])
            spawned.pid = carry["pid"]  # the run's process: this one is its worker
            _SPAWNED = spawned.install(page)
            if carry.get("draws"):
                _SPAWNED.watch_draws()
        except Exception as e:  # noqa: BLE001 - the worker runs unwatched, never fails
            try:
                sys.stderr.write(f"repro-check: a DataLoader worker's seeding is not watched: "
                                 f"{type(e).__name__}: {e}\n")
            except Exception:  # noqa: BLE001
                pass
    return WorkerWatch(user_fn, _SPAWNED)
