"""Pins inside a run, for ``diagnose``'s search for every source of non-determinism.

Once a source is found at step K, the next pair of runs is made identical at that source so
that the runs can go on to the next one. The pair runs one after the other: run 1 records what
the pins need into the pair's replay folder, run 2 loads it at the same point.

* ``rng``: the global stream that differed; run 1 saves its full state at the start of step K,
  run 2 loads it there.
* ``reseed``: a global stream the script reseeds (``torch.seed()``, ``manual_seed`` of the
  clock); run 2 gives it run 1's state right after each reseeding call, so what is drawn between
  the call and the next step (a model built after ``torch.seed()``, a dropout after a mid-step
  reseed) agrees too.
* ``generator``: a private generator (``torch.Generator``, ``np.random.default_rng``,
  ``random.Random``) created by the script; run 2 gives it run 1's state after each seeding.
* ``data``: every batch from step K on is saved by run 1 and substituted in run 2.
* ``compute``: every output of one op from step K on is saved by run 1 and substituted in run 2.

Both runs also note where the script creates and seeds private generators and reseeds the
global streams (``generators-N.jsonl``): a generator seeded from entropy or the clock is a source
no global-stream fingerprint sees. Only calls made directly from the script's own code count.

The generators are tracked in every run, not only diagnose's: each creation, seeding and first
draw is also sent on the trace as ``{"info": {"generator": {...}}}`` (without the state), so a
check can name a private generator as the cause of a divergence (``rng``, with where the script
made it). At most :data:`MAX_TRACKED` generators and :data:`MAX_SENT` records a run. The
DataLoaders the script makes are noted the same way (``{"info": {"loader": {...}}}``: where
each was made, and the step at which each epoch starts), so a ``data`` cause names the loader
whose batches differed.
"""

from __future__ import annotations

import functools
import json
import os
import random
import sys
import threading
import traceback
import zlib
from pathlib import Path
from typing import Any

from repro_check.child.observe import origin
from repro_check.child import patches
from repro_check.child.observe.capture import loader_iterator_class
from repro_check.trace.pins import PLAN_VAR, RECORDS, rank_file
#: generators tracked in a run (a script making one a step would otherwise grow the set, and
#: each one not drawn from yet is looked at after every step)
MAX_TRACKED = 200
#: generator records (and, apart, DataLoader epochs) a run sends on its trace
MAX_SENT = 2000
#: DataLoaders noted in a run
MAX_LOADERS = 50


def user_stack(direct: bool = True) -> list[dict[str, Any]] | None:
    """The frames of the target's own code on the stack (:func:`origin.is_library` tells them),
    innermost last; None when ``direct`` and the direct caller, past the frames that only pass
    the call on (:func:`origin.passes_on`: our wrappers, ``random.py``, torch's), is not the
    target's code (a generator torch or a library makes for itself)."""
    # file, line and function only: no source line is read
    frames = traceback.StackSummary.extract(traceback.walk_stack(sys._getframe(1)),
                                            lookup_lines=False)[::-1]
    while frames and origin.passes_on(frames[-1].filename):
        frames.pop()
    if not frames or (direct and origin.is_library(frames[-1].filename)):
        return None
    return [{"file": f.filename, "line": f.lineno, "function": f.name}
            for f in frames if not origin.is_library(f.filename)][-8:]


def _digest(value: Any) -> str:
    return f"{zlib.crc32(json.dumps(value, default=str).encode()) & 0xFFFFFFFF:08x}"


class Pins:
    """The pins and records of one run (see the module docstring)."""

    def __init__(self, plan: dict[str, Any] | None, run: int, emit: Any = None,
                 rank: int | None = None) -> None:
        plan = plan or {}
        self.dir = Path(plan["dir"]) if plan.get("dir") else None
        self.run = run
        self.rank = rank
        self.pid = os.getpid()  # a forked DataLoader worker notes nothing
        self.emit = emit
        self.sent = 0
        self.records: Path | None = None
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.records = self.path(RECORDS.format(run=run))
            self.records.write_text("")
        # a pin made under torchrun holds on the rank where its difference entered
        self.pins: list[dict[str, Any]] = [p for p in plan.get("pins", [])
                                           if p.get("rank") in (None, rank or 0)]
        self.lock = threading.RLock()
        self.recorder: Any = None
        #: tracked generators: id -> [key, kind, object, state after seeding, drawn]
        self.generators: dict[int, list[Any]] = {}
        self.sites: dict[str, int] = {}
        self.events: dict[str, int] = {}
        self.pinned_keys = {p["key"] for p in self.pins if p["kind"] == "generator"}
        self.source_states = self._source_states() if run != 1 and self.pinned_keys else {}
        self.fetches: dict[int, int] = {}
        #: DataLoaders made by the target: id -> number, and the epochs started so far
        self.loaders: dict[int, int] = {}
        self.epochs = 0
        self.op_calls: dict[int, int] = {}
        #: reseeding calls of each global stream so far
        self.reseeds: dict[str, int] = {}

    def path(self, file: str) -> Path:
        assert self.dir is not None
        return self.dir / rank_file(file, self.rank)

    # ---- records -------------------------------------------------------------------------
    def note(self, record: dict[str, Any]) -> None:
        if os.getpid() != self.pid:
            return
        with self.lock:
            if self.records is not None:
                with self.records.open("a") as f:
                    f.write(json.dumps(record, default=str) + "\n")
            if self.emit is not None and "key" in record and self.sent < MAX_SENT:
                self.sent += 1
                sent = {k: v for k, v in record.items() if k != "state"}
                self.emit({"info": {"generator": sent}})

    def own_work(self) -> bool:
        """Whether repro-check's own tensor work (fingerprints) is running: never replayed."""
        return self.recorder is not None and bool(self.recorder.own_work)

    def step(self) -> int:
        """The step in progress."""
        return (self.recorder.step if self.recorder is not None else 0) + 1

    def _source_states(self) -> dict[tuple[str, int], Any]:
        """Run 1's state of each pinned generator after each of its seedings."""
        out: dict[tuple[str, int], Any] = {}
        if self.dir is None:
            return out
        path = self.path(RECORDS.format(run=1))
        if not path.exists():
            return out
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("key") in self.pinned_keys and "state" in rec:
                out[(rec["key"], rec["event"])] = rec["state"]
        return out

    # ---- private generators --------------------------------------------------------------
    def seeded(self, obj: Any, kind: str, how: str) -> None:
        """A generator the script made was created or seeded: note it (and pin it)."""
        if os.getpid() != self.pid:
            return
        entry = self.generators.get(id(obj))
        location: dict[str, Any] | None
        if entry is None or entry[2] is not obj:
            if len(self.generators) >= MAX_TRACKED:
                return
            stack = user_stack()
            if stack is None:
                return
            site = f"{stack[-1]['file']}:{stack[-1]['line']}"
            n = self.sites.get(site, 0)
            self.sites[site] = n + 1
            entry = [f"{site}#{n}", kind, obj, None, False]
            self.generators[id(obj)] = entry
            location, created = stack[-1], True
        else:
            stack = user_stack() or []
            location, created = (stack[-1] if stack else None), False
        key = entry[0]
        event = self.events.get(key, 0)
        self.events[key] = event + 1
        pinned = self.source_states.get((key, event))
        if pinned is not None:
            _set_state(kind, obj, pinned)
        state = _get_state(kind, obj)
        entry[3], entry[4] = _digest(state), False
        self.note({"key": key, "kind": kind, "event": event, "how": how, "created": created,
                   "step": self.step(), "state": state, "fp": entry[3], "pinned": pinned is not None,
                   "location": location, "stack": stack})

    def check_drawn(self) -> None:
        """After each step: the generators drawn from for the first time since their seeding."""
        for entry in list(self.generators.values()):
            key, kind, obj, fp, drawn = entry
            if drawn:
                continue
            try:
                now = _digest(_get_state(kind, obj))
            except Exception:  # noqa: BLE001 - never break the target
                continue
            if now != fp:
                entry[4] = True
                self.note({"key": key, "drawn": self.step() - 1})

    def loader(self, loader: Any, event: str) -> None:
        """A DataLoader was made (where: the script's innermost frame) or starts an epoch."""
        if os.getpid() != self.pid or self.emit is None:
            return
        with self.lock:
            n = self.loaders.get(id(loader))
            if event == "made":
                if len(self.loaders) >= MAX_LOADERS:
                    return
                stack = user_stack(direct=False)
                n = self.loaders[id(loader)] = len(self.loaders)
                dataset = type(getattr(loader, "dataset", None)).__name__
                self.emit({"info": {"loader": {
                    "loader": n, "made": self.step(), "dataset": dataset,
                    "workers": getattr(loader, "num_workers", 0),
                    "location": stack[-1] if stack else None, "stack": stack or []}}})
            elif n is not None and self.epochs < MAX_SENT:
                self.epochs += 1
                self.emit({"info": {"loader": {"loader": n, "iter": self.step()}}})

    def reseeded(self, stream: str, how: str) -> None:
        """The script reseeded a global stream: note it with a digest of the state it left (run
        2 of a pinned pair first takes run 1's state after the same call)."""
        if self.records is None or os.getpid() != self.pid:  # only diagnose's records hold these
            return
        stack = user_stack()
        if stack is None:
            return
        n = self.reseeds.get(stream, 0)
        self.reseeds[stream] = n + 1
        pinned = any(p["kind"] == "reseed" and p["stream"] == stream for p in self.pins)
        if pinned:
            import torch

            path = self.path(f"reseed-{stream}-{n}.pt")
            if self.run == 1:
                _own_save(_stream_state(stream), path)
            elif path.exists():
                _set_stream_state(stream, torch.load(path, weights_only=False))
        try:
            fp = _state_digest(stream)
        except Exception:  # noqa: BLE001 - never break the target
            fp = None
        self.note({"stream": stream, "how": how, "step": self.step(), "event": n, "fp": fp,
                   "pinned": pinned, "location": stack[-1], "stack": stack})

    # ---- global streams --------------------------------------------------------------------
    def step_start(self, step: int) -> None:
        """The start of ``step``: save (run 1) or load (run 2) the pinned streams' states."""
        streams = [p["stream"] for p in self.pins if p["kind"] == "rng" and p["step"] == step]
        if not streams:
            return
        import torch

        for stream in streams:
            path = self.path(f"rng-{stream}-{step}.pt")
            if self.run == 1:
                _own_save(_stream_state(stream), path)
            elif path.exists():
                _set_stream_state(stream, torch.load(path, weights_only=False))
        if self.run != 1 and self.recorder is not None and self.recorder.signals is not None:
            # only when pins are applied (diagnose)
            from repro_check.child.seeding import rngstate

            signals = self.recorder.signals
            with self.recorder.quiet():
                signals.rng = rngstate.signals(signals.cuda)

    def _from(self, kind: str) -> int | None:
        steps = [p["step"] for p in self.pins if p["kind"] == kind]
        return min(steps) if steps else None

    # ---- batches ---------------------------------------------------------------------------
    def batch(self, item: Any) -> Any:
        """A DataLoader's batch: saved (run 1) or replaced by run 1's (run 2) from the pinned step."""
        first = self._from("data")
        step = self.step()
        if first is None or step < first:
            return item
        import torch

        n = self.fetches.get(step, 0)
        self.fetches[step] = n + 1
        path = self.path(f"batch-{step}-{n}.pt")
        if self.run == 1:
            _own_save(item, path)
            return item
        return torch.load(path, weights_only=False) if path.exists() else item

    # ---- op outputs ------------------------------------------------------------------------
    def op_output(self, func: Any, out: Any) -> Any:
        """An output of the pinned op: saved (run 1) or replaced by run 1's (run 2)."""
        import torch

        step = self.step()
        n = self.op_calls.get(step, 0)
        self.op_calls[step] = n + 1
        path = self.path(f"op-{step}-{n}.pt")
        if self.run == 1:
            _own_save(_detached(out), path)
            if not self.op_calls.get(-1):
                self.op_calls[-1] = 1
                stack = user_stack(direct=False)
                if stack:  # where the script calls the op: the source's location
                    self.note({"op_site": func._schema.name, "step": step,
                               "location": stack[-1], "stack": stack})
            return out
        if not path.exists():
            return out
        saved = torch.load(path, weights_only=False)
        if _aliases(func):  # a view shares its input's memory: run 1's values go into it
            _copy_into(out, saved)
            return out
        return _like(out, saved)

    # ---- installing ------------------------------------------------------------------------
    def install(self) -> Pins:
        """What must come before the step recorder (so that it sees substituted batches)."""
        _track_generators(self)
        _track_reseeding(self)
        _track_loaders(self)
        if self._from("data") is not None:
            cls = loader_iterator_class("pin.data")
            pins = self

            def make(original: Any) -> Any:
                def __next__(it: Any) -> Any:
                    return pins.batch(original(it))

                return __next__

            if cls is not None:
                patches.PATCHES.wrap("pin.data", cls, "__next__", make, token=self)
        return self

    def attach(self, recorder: Any) -> None:
        """Hook the step recorder: step starts, and the generators' draws after each step."""
        self.recorder = recorder
        signals = recorder.signals
        original = signals.step_starts

        def step_starts() -> None:
            if signals.rng is None and recorder.step == 0:
                signals.rng = {}  # not taken again while we set the states
                self.step_start(1)
                signals.rng = None
            original()

        signals.step_starts = step_starts

        def after_step() -> None:
            self.check_drawn()
            self.step_start(recorder.step + 1)

        recorder.watchers.append(after_step)
        ops = [p for p in self.pins if p["kind"] == "compute"]
        if ops:
            _replay_op(self, ops[0]["op"], min(p["step"] for p in ops))


def from_environment(emit: Any = None, rank: int | None = None) -> Pins:
    """The run's generator tracking, with the pins ``diagnose`` asked for (installed)."""
    path = os.environ.pop(PLAN_VAR, None)
    plan = json.loads(Path(path).read_text()) if path else None
    run = int(os.environ.get("REPRO_CHECK_RUN_INDEX", "1"))
    return Pins(plan, run, emit, rank).install()


# ---- generator states ------------------------------------------------------------------------
def _get_state(kind: str, obj: Any) -> Any:
    if kind == "torch":
        return int(obj.initial_seed()) if _fresh(obj) else obj.get_state().tolist()
    if kind == "numpy":
        return obj.bit_generator.state
    return list(obj.getstate())


#: torch's own Generator class, before tracking replaced it
_BASE: list[Any] = []


def _fresh(obj: Any) -> bool:
    """A torch generator not drawn from since its seeding is known by its seed alone."""
    import torch

    probe = _BASE[0](device=obj.device)
    probe.manual_seed(obj.initial_seed())
    return bool(torch.equal(probe.get_state(), obj.get_state()))


def _set_state(kind: str, obj: Any, state: Any) -> None:
    if kind == "torch":
        if isinstance(state, int):
            _BASE[0].manual_seed(obj, state)  # the untracked method
        else:
            import torch

            obj.set_state(torch.tensor(state, dtype=torch.uint8))
    elif kind == "numpy":
        obj.bit_generator.state = state
    else:
        version, words, gauss = state
        obj.setstate((version, tuple(words), gauss))


def _own_save(obj: Any, path: Any) -> None:
    """Save a pin's file with torch's own ``torch.save``, not the one the run's hooks wrap: a
    file repro-check writes is none of the script's saves (:mod:`repro_check.child.observe.saved`)."""
    # torch on use: only when pins are recorded (diagnose)
    import torch

    save = patches.PATCHES.original(torch, "save")
    (torch.save if save is patches.MISSING else save)(obj, path)


def _how(seed: Any, call: str) -> str:
    """How a seeding call seeds: ``clock`` for a value within a day of the wall clock."""
    # only when pins are applied (diagnose)
    from repro_check.child.seeding import clock

    try:
        return "clock" if clock.clock_unit(seed) else call
    except Exception:  # noqa: BLE001 - a seed of any type must not break the target
        return call


def _track_generators(pins: Pins) -> None:
    import torch

    base = patches.PATCHES.original(torch, "Generator")
    _BASE.append(base)

    class Checked(type(base)):  # type: ignore[misc]
        """Generators made before tracking (``torch.default_generator``) are still Generators."""

        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, base)

        def __subclasscheck__(cls, sub: Any) -> bool:
            return issubclass(sub, base)

    class Generator(base, metaclass=Checked):  # type: ignore[misc, valid-type]
        """``torch.Generator``, noting where the script makes and seeds one."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pins.seeded(self, "torch", "default")

        def manual_seed(self, seed: Any) -> Any:
            out = super().manual_seed(seed)
            pins.seeded(self, "torch", _how(seed, "manual_seed"))
            return out

        def seed(self) -> int:
            out = super().seed()
            pins.seeded(self, "torch", "entropy")
            return out

    Generator.__name__ = Generator.__qualname__ = "Generator"
    Generator.__module__ = "torch"
    patches.PATCHES.replace("pin.generators", torch, "Generator", Generator, token=pins)

    class Random(random.Random):
        """``random.Random``, noting where the script makes and seeds one."""

        def seed(self, a: Any = None, version: int = 2) -> None:
            super().seed(a, version)
            pins.seeded(self, "python", "entropy" if a is None else _how(a, "seed"))

    Random.__module__ = "random"
    patches.PATCHES.replace("pin.generators", random, "Random", Random, token=pins)
    np = sys.modules.get("numpy")
    if np is None:
        return

    def make(original: Any) -> Any:
        def default_rng(seed: Any = None) -> Any:
            rng = original(seed)
            if not isinstance(seed, np.random.Generator):
                pins.seeded(rng, "numpy", "entropy" if seed is None else _how(seed, "seed"))
            return rng

        return default_rng

    patches.PATCHES.wrap("pin.generators", np.random, "default_rng", make, token=pins)


def _track_loaders(pins: Pins) -> None:
    """Where the script makes each DataLoader and when each starts an epoch: a ``data`` cause
    names the loader whose batches differed."""
    from torch.utils.data import DataLoader

    def made(original: Any) -> Any:
        @functools.wraps(original)  # frameworks read its signature to rebuild loaders (Lightning)
        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            original(loader, *args, **kwargs)
            try:
                pins.loader(loader, "made")
            except Exception:  # noqa: BLE001 - never break the target
                pass

        return __init__

    def iterate(original: Any) -> Any:
        @functools.wraps(original)
        def __iter__(loader: Any) -> Any:
            try:
                pins.loader(loader, "iter")
            except Exception:  # noqa: BLE001 - never break the target
                pass
            return original(loader)

        return __iter__

    patches.PATCHES.wrap("pin.loaders", DataLoader, "__init__", made, token=pins)
    patches.PATCHES.wrap("pin.loaders", DataLoader, "__iter__", iterate, token=pins)


def _track_reseeding(pins: Pins) -> None:
    import torch

    import torch.random

    def wrap(owner: Any, name: str, stream: str) -> None:
        def make(original: Any) -> Any:
            def reseed(*args: Any, **kwargs: Any) -> Any:
                out = original(*args, **kwargs)
                entropy = name == "seed" and not args and not kwargs
                pins.reseeded(stream,
                              "entropy" if entropy else _how(args[0], name) if args else name)
                return out

            return reseed

        patches.PATCHES.wrap("pin.reseeding", owner, name, make, token=pins)

    wrap(random, "seed", "python")
    for owner in (torch, torch.random):  # the same functions under two names
        wrap(owner, "seed", "torch")
        wrap(owner, "manual_seed", "torch")
    np = sys.modules.get("numpy")
    if np is not None:
        wrap(np.random, "seed", "numpy")


def _stream_state(stream: str) -> Any:
    import torch

    if stream == "python":
        return random.getstate()
    if stream == "numpy":
        return sys.modules["numpy"].random.get_state()
    if stream == "cuda":
        return torch.cuda.get_rng_state_all()
    return torch.get_rng_state()


def _state_digest(stream: str) -> str:
    """A digest of a global stream's whole state (its bytes, not a printed summary)."""
    state = _stream_state(stream)
    if stream == "numpy":
        kind, keys, pos, has_gauss, gauss = state
        data = repr((kind, pos, has_gauss, gauss)).encode() + keys.tobytes()
    elif stream == "python":
        data = repr(state).encode()
    elif stream == "cuda":
        data = b"".join(bytes(s.numpy().tobytes()) for s in state)
    else:
        data = bytes(state.numpy().tobytes())
    return f"{zlib.crc32(data) & 0xFFFFFFFF:08x}"


def _set_stream_state(stream: str, state: Any) -> None:
    import torch

    if stream == "python":
        random.setstate(state)
    elif stream == "numpy":
        sys.modules["numpy"].random.set_state(state)
    elif stream == "cuda":
        torch.cuda.set_rng_state_all(state)
    else:
        torch.set_rng_state(state)


# ---- op outputs ------------------------------------------------------------------------------
def _detached(out: Any) -> Any:
    import torch

    if isinstance(out, torch.Tensor):
        return out.detach().cpu().clone()
    if isinstance(out, (tuple, list)):
        return type(out)(_detached(o) for o in out)
    return out


def _aliases(func: Any) -> bool:
    """Whether an op returns a view of an argument (``view``, ``reshape``'s alias, ...)."""
    try:
        return any(r.alias_info is not None for r in func._schema.returns)
    except AttributeError:
        return False


def _copy_into(out: Any, saved: Any) -> None:
    """Run 1's values written into this run's output tensors, where shape and dtype agree."""
    import torch

    if isinstance(out, torch.Tensor) and isinstance(saved, torch.Tensor):
        if out.shape == saved.shape and out.dtype == saved.dtype:
            out.copy_(saved.to(out.device))
    elif isinstance(out, (tuple, list)) and isinstance(saved, (tuple, list)):
        for o, s in zip(out, saved):
            _copy_into(o, s)


def _like(out: Any, saved: Any) -> Any:
    """Run 1's output in the place of this run's, where shape and dtype agree."""
    import torch

    if isinstance(out, torch.Tensor) and isinstance(saved, torch.Tensor):
        if out.shape == saved.shape and out.dtype == saved.dtype:
            return saved.to(out.device)
        return out
    if isinstance(out, (tuple, list)) and isinstance(saved, (tuple, list)) \
            and len(out) == len(saved):
        return type(out)(_like(o, s) for o, s in zip(out, saved))
    return out


def _replay_op(pins: Pins, op: str, first: int) -> None:
    """A dispatch mode, on from the start, that hands every output of ``op`` from step ``first``
    on to :meth:`Pins.op_output`."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Replay(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if pins.step() >= first and func._schema.name == op and not pins.own_work():
                out = pins.op_output(func, out)
            return out

    Replay().__enter__()
