"""Checkpoints inside a run: the optimizer's per-step signals, and (for ``repro-check resume``)
the saves the script makes, what they hold, and the stop right after the first one due.

Per step, in every run (a check's too), three signals are recorded at the optimizer's pre-step
hook, so that a resume that left them out is named, not only seen in the loss:

``lr``
    every param group's learning rate, as exact decimal text (``repr`` of the float):
    a schedule that restarted differs here.
``opt``
    a fingerprint of the optimizer's state going into the step (moments, step counts): an
    optimizer that was not restored starts empty.
``scaler``
    the scale and growth tracker of every enabled ``GradScaler`` (mixed precision).

With :class:`~repro_check.trace.protocol.ResumeSettings` (every run of a resume) the saves are
watched: ``torch.save``, ``safetensors`` (``save_file``, ``save_model``),
``torch.distributed.checkpoint.save``, Lightning's ``Trainer.save_checkpoint`` and the Hugging
Face ``Trainer._save_checkpoint`` (a save inside another counts as part of it). What each save
holds is described here, from the object handed to the save (never by reading a file back).
In the interrupted run (``stop_at``), the first save made once ``stop_at`` steps are recorded
is copied into the trace folder as soon as it returns. A checkpoint is often several saves in a
row (the model to one file, the optimizer to another, a small file of counters): every save that
follows before the next optimizer step, each within :data:`GROUP_QUIET` seconds of the last, is
part of it and copied too. Then the run is reported stopped and the process ends at once, as a
preemption would end it: at the next optimizer step, :data:`GROUP_QUIET` seconds after the last
save returned, or when the target returns, whichever comes first.

Every hook goes through the process's patch registry (:mod:`repro_check.child.patches`):
``checkpoint.signals`` (the optimizer pre-step hook, ``GradScaler.__init__``) and
``checkpoint.saves`` (the save functions, and the import hook that wraps a framework's save once
it is imported); the look at ``--checkpoint``'s files and the end of a checkpoint taken ride on
the recorder's ``step_starting`` callbacks (before each backward call and optimizer step).
:func:`install` returns the object whose :meth:`Checkpoints.uninstall` takes them all out.
"""

from __future__ import annotations

import fnmatch
import functools
import glob
import importlib.util
import os
import shutil
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from repro_check.child.seeding import clock
from repro_check.child.observe import metric_hooks
from repro_check.child import patches
from repro_check.trace import fingerprint
from repro_check.trace.protocol import ResumeSettings

Emit = Callable[[dict[str, Any]], None]

#: the per-step signals this module adds, in the order they are placed (before ``grads``)
SIGNALS = ("lr", "opt", "scaler")
#: the weights going into the resumed run's first step (named as ``params``): compared with the
#: reference's ``params`` after the checkpoint's step, then left out of the step comparison
PARAMS_IN = "params_in"
#: the longest text of a signal (a trace line takes at most 1024 characters a text signal)
MAX_TEXT = 1000
#: keys described per checkpoint, at most
MAX_KEYS = 40
#: seconds the interrupted run waits after a due save returns for another save of the same
#: checkpoint before it stops (saves of one checkpoint follow each other at once)
GROUP_QUIET = 0.5
#: files of one checkpoint copied, at most
MAX_FILES = 64


# ---- the per-step signals ----------------------------------------------------------------------
def learning_rates(optimizer: Any) -> str:
    """Every param group's learning rate, exactly (``repr`` of a float round-trips)."""
    parts = []
    for group in optimizer.param_groups:
        lr = group.get("lr")
        try:
            parts.append(repr(float(lr)))
        except (TypeError, ValueError):
            parts.append(type(lr).__name__)
    text = ",".join(parts)
    if len(text) > MAX_TEXT:
        h = fingerprint.hasher()
        h.update(text.encode())
        text = f"{len(parts)} groups #{h.hexdigest()[:16]}"
    return text


def optimizer_state(optimizer: Any, defer: bool = True) -> Any:
    """A fingerprint of the optimizer's state, parameter by parameter in group order: tensors by
    their bits, numbers by value; an empty state (nothing restored, no step yet) has its own."""
    import torch

    items: list[tuple[str, Any]] = []
    for g, group in enumerate(optimizer.param_groups):
        for i, p in enumerate(group["params"]):
            state = optimizer.state.get(p)
            if not state:
                continue
            for key in sorted(state, key=str):
                value = state[key]
                if isinstance(value, torch.Tensor):
                    items.append((f"{g}.{i}.{key}", value))
                else:
                    items.append((f"{g}.{i}.{key}={value!r}"[:200], None))
    return fingerprint.tensors(items, defer=defer, keep=True)


class OptimizerSignals:
    """The optimizer's signals of a step (the recorder's own are ``capture.StepSignals``): takes
    ``lr``, ``opt`` and ``scaler`` at each optimizer pre-step (per thread) and hands them to the
    recorder's step record."""

    def __init__(self, recorder: Any, params_in: bool = False) -> None:
        self.rec = recorder
        self.local = threading.local()
        self.scalers: weakref.WeakSet[Any] = weakref.WeakSet()
        #: the resumed run of a resume: the weights going into step 1, named as ``params``
        self.params_in = params_in

    def pre_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        with self.rec.quiet():
            taken: dict[str, Any] = {"lr": learning_rates(optimizer),
                                     "opt": optimizer_state(optimizer)}
            scale = self.scaler_text()
            if scale is not None:
                taken["scaler"] = scale
            if self.params_in and self.rec.step == 0:
                taken[PARAMS_IN] = self.rec.params_fingerprint(optimizer)
        self.local.taken = taken

    def scaler_text(self) -> str | None:
        if not self.scalers:  # the common case, every step: no GradScaler made
            return None
        parts = []
        for s in list(self.scalers):
            if not getattr(s, "_enabled", False) or getattr(s, "_scale", None) is None:
                continue
            try:
                parts.append(f"{float(s._scale.item())!r}/{int(s._growth_tracker.item())}")
            except Exception:  # noqa: BLE001 - a scaler in an unusual state: left out
                continue
        return ",".join(parts)[:MAX_TEXT] if parts else None

    def take(self) -> dict[str, Any]:
        taken = getattr(self.local, "taken", None)
        self.local.taken = None
        return taken or {}


# ---- what a checkpoint holds -------------------------------------------------------------------
def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def kind_of(value: Any, key: str = "") -> str:
    """What one value of a checkpoint is: model, optimizer, scheduler, rng, grad_scaler, a
    list of them, or other."""
    import torch

    name = key.lower()
    if isinstance(value, torch.nn.Module):
        return "model"
    if isinstance(value, torch.optim.Optimizer):
        return "optimizer"
    if _is_rng(value, name):
        return "rng"
    if isinstance(value, dict):
        keys = {str(k) for k in value}
        if {"state", "param_groups"} <= keys:
            return "optimizer"
        if "last_epoch" in keys and ("base_lrs" in keys or "_step_count" in keys):
            return "scheduler"
        if {"scale", "growth_factor"} <= keys:
            return "grad_scaler"
        if value and all(_is_tensor(v) for v in value.values()):
            return "model"
        if value and all(_is_rng(v, str(k).lower()) for k, v in value.items()):
            return "rng"
        if "state_dict" in keys:
            return "model"
    if isinstance(value, (list, tuple)) and value and not _is_rng(value, name):
        kinds = {kind_of(v) for v in value}
        if len(kinds) == 1 and kinds != {"other"}:
            return kinds.pop()
    return "other"


def _is_rng(value: Any, name: str) -> bool:
    """An RNG state: torch's (a uint8 tensor), Python's ``random.getstate()``, numpy's
    ``get_state()`` (tuple or dict), a list of CUDA states, or anything under a key naming one."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.dtype == torch.uint8 and value.dim() == 1 and (
            "rng" in name or "random" in name or "generator" in name or value.numel() in (5056, 16))
    if isinstance(value, tuple) and len(value) == 3 and isinstance(value[0], int) \
            and isinstance(value[1], tuple) and len(value[1]) == 625:
        return True  # random.getstate()
    if isinstance(value, tuple) and value and value[0] == "MT19937":
        return True  # np.random.get_state()
    if isinstance(value, dict) and value.get("bit_generator") is not None:
        return True
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(v, torch.Tensor) and v.dtype == torch.uint8 for v in value):
        return True  # torch.cuda.get_rng_state_all()
    return ("rng" in name or "random_state" in name) and not isinstance(value, (int, float, str))


def rng_streams(value: Any, key: str = "") -> list[str]:
    """Which RNG streams an RNG entry holds, as far as can be told (python, numpy, torch, cuda)."""
    import torch

    name = key.lower()
    found: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            found += [s for s in rng_streams(v, str(k)) if s not in found]
        return found
    if isinstance(value, tuple) and len(value) == 3 and isinstance(value[1], tuple):
        return ["python"]
    if (isinstance(value, tuple) and value and value[0] == "MT19937") or \
            (isinstance(value, dict) and "bit_generator" in value):
        return ["numpy"]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor)
                                                          for v in value):
        # torch.cuda.get_rng_state_all() (Philox states of 16 bytes), or CPU states of several
        # processes (the ranks' torch.get_rng_state(), gathered)
        return ["cuda"] if "cuda" in name or all(v.numel() == 16 for v in value) else ["torch"]
    if isinstance(value, torch.Tensor):
        return ["cuda" if "cuda" in name else "torch"]
    for stream in ("python", "numpy", "cuda", "torch"):
        if stream in name:
            return [stream]
    return []


def describe(obj: Any) -> dict[str, Any]:
    """The top-level keys of a saved object and what each holds (``{"keys": [...], "kinds":
    {key: kind}, "rng": [streams]}``); a whole module or a tensor dict is one ``model``."""
    out: dict[str, Any] = {"keys": [], "kinds": {}, "rng": []}
    try:
        if isinstance(obj, dict):
            whole = kind_of(obj)
            if whole in ("optimizer", "scheduler", "grad_scaler") or (
                    whole == "model" and obj and all(_is_tensor(v) for v in obj.values())):
                out["kinds"]["(whole)"] = whole
                return out
            for k, v in list(obj.items())[:MAX_KEYS]:
                key = str(k)[:80]
                out["keys"].append(key)
                kind = kind_of(v, key)
                out["kinds"][key] = kind
                if kind == "rng":
                    out["rng"] += [s for s in rng_streams(v, key) if s not in out["rng"]]
        else:
            kind = kind_of(obj)
            out["kinds"]["(whole)"] = kind
            if kind == "rng":
                out["rng"] = rng_streams(obj)
    except Exception as e:  # noqa: BLE001 - a description is a nicety; never break the save
        out["error"] = f"{type(e).__name__}: {e}"[:200]
    return out


def merge_descriptions(parts: Sequence[tuple[str | None, dict[str, Any]]]) -> dict[str, Any]:
    """One description of a save made of several (a Hugging Face checkpoint folder: a file each;
    Lightning: the dict it hands to ``torch.save``): keys named by file where there is no key."""
    if len(parts) == 1:
        return parts[0][1]
    out: dict[str, Any] = {"keys": [], "kinds": {}, "rng": []}
    for path, d in parts:
        label = os.path.basename(path) if path else "(object)"
        kinds = d.get("kinds", {})
        if kinds and path and "(whole)" not in kinds and set(kinds.values()) == {"rng"}:
            kinds = {"(whole)": "rng"}  # a file of RNG states (the HF Trainer's rng_state.pth)
            d = {**d, "kinds": kinds}
        if "(whole)" in d.get("kinds", {}):
            out["keys"].append(label)
            out["kinds"][label] = d["kinds"]["(whole)"]
        else:
            for k in d.get("keys", []):
                key = k if k not in out["kinds"] else f"{label}:{k}"
                out["keys"].append(key)
                out["kinds"][key] = d["kinds"].get(k, "other")
        out["rng"] += [s for s in d.get("rng", []) if s not in out["rng"]]
    return out


# ---- watching the saves ------------------------------------------------------------------------
def path_of(f: Any) -> str | None:
    """The file a save wrote: a path, or an open file's name; None for a buffer."""
    if isinstance(f, (str, os.PathLike)):
        return os.path.abspath(os.fspath(f))
    name = getattr(f, "name", None)
    if isinstance(name, str) and os.path.isabs(name) or isinstance(name, str) and os.path.exists(name):
        try:
            f.flush()
        except Exception:  # noqa: BLE001 - a file we could not flush is copied as it is
            pass
        return os.path.abspath(name)
    return None


class Saves:
    """Watches the script's saves; in the interrupted run, copies the first one due and stops."""

    def __init__(self, recorder: Any, emit: Emit, settings: ResumeSettings) -> None:
        self.rec = recorder
        self.emit = emit
        self.stop_at: int | None = settings.stop_at
        self.copy_dir: str | None = settings.copy_dir
        self.pattern: str | None = settings.checkpoint
        self.lock_path: str | None = settings.lock
        self.owner = os.getpid()
        self.local = threading.local()
        self.done = False
        self.lock = threading.Lock()
        self.seen: dict[str, tuple[int, int]] = {}
        #: how the run ends once its checkpoint is taken (a preemption: at once)
        self.exit: Callable[[int], Any] = os._exit
        #: the saves of the checkpoint being taken (the interrupted run, once one was due)
        self.group: list[dict[str, Any]] = []
        self.group_step = 0
        self.last_return = 0.0
        self.timer: threading.Timer | None = None
        if self.pattern:
            self.seen = self._glob_state()

    # -- the outermost save, and the saves inside it ----------------------------------------
    def wrap(self, kind: str, original: Callable[..., Any],
             where: Callable[[tuple[Any, ...], dict[str, Any]], tuple[Any, Any]]) -> Any:
        """``original`` wrapped: ``where(args, kwargs)`` gives (object saved, path)."""
        saves = self

        @functools.wraps(original)
        def save(*args: Any, **kwargs: Any) -> Any:
            if os.getpid() != saves.owner:
                return original(*args, **kwargs)
            stack = getattr(saves.local, "stack", None)
            if stack is None:
                stack = saves.local.stack = []
            outermost = not stack
            lock = saves.lock_saves() if outermost else None
            if outermost:
                saves.hold()  # another save of the checkpoint being taken: wait for its return
            try:
                stack.append([])
                try:
                    result = original(*args, **kwargs)
                except BaseException:
                    stack.pop()
                    raise
                parts = stack.pop()
                try:
                    obj, path = where(args, kwargs)
                    if obj is not None:
                        # what was handed to it describes it: the saves inside are its own
                        # workings (safetensors' save_model calls save_file on the same file,
                        # torch.distributed.checkpoint torch.saves its pieces to buffers)
                        parts = []
                    parts.insert(0, (path, describe(obj) if obj is not None else None))
                except Exception:  # noqa: BLE001 - where it went cannot be told
                    path = None
                if stack:  # inside another save: part of it
                    stack[-1].extend(parts)
                else:
                    saves.saved(kind, path, parts)
            finally:
                if lock is not None:
                    os.close(lock)  # releases it
                if outermost:
                    saves.release()
            return result

        return save

    def saved(self, kind: str, path: str | None, parts: list[tuple[str | None, Any]]) -> None:
        """A save returned (the outermost one)."""
        described = [(p, d) for p, d in parts if d is not None]
        if path is None:
            paths = [p for p, _ in parts if p]
            if paths:
                path = os.path.commonpath(paths) if len(paths) > 1 else paths[0]
        if path is None:
            return  # to a buffer only: not a checkpoint on disk
        if self.pattern and not self._matches(path):
            return
        self.taken(kind, path, merge_descriptions(described) if described else None)

    def taken(self, kind: str, path: str, contents: dict[str, Any] | None,
              written_ns: int | None = None) -> None:
        """A save of ``path`` returned (``written_ns``: when, on the real wall clock, for a
        file noticed later; else now)."""
        with self.lock:
            if self.done:
                return
            step = self.rec.step
            # a step recorded since the checkpoint's saves: it ended before this one
            ended = bool(self.group) and step != self.group_step
            if not ended:
                due = self.stop_at is not None and step >= self.stop_at
                record: dict[str, Any] = {"step": step, "path": path, "kind": kind,
                                          "contents": contents or {}, "due": due}
                if not due:
                    self.emit({"info": {"save": record}})
                    return
                if len(self.group) < MAX_FILES:
                    record["copy"] = self._copy(path, record)
                    self.group.append(record)
                self.group_step = step
                self.last_return = time.monotonic()
                if written_ns is not None:  # the file was noticed at the step after its save
                    self.last_return -= max(0.0, clock.real_time() - written_ns / 1e9)
                self._arm()
                return
        self.finish()

    # -- the end of the checkpoint: the interrupted run stops ---------------------------------
    def _arm(self) -> None:
        """(Re)start the wait for another save of the checkpoint (called under the lock)."""
        if self.timer is not None:
            self.timer.cancel()
        self.timer = threading.Timer(GROUP_QUIET, self.finish)
        self.timer.daemon = True
        self.timer.start()

    def renaming(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``os.replace``/``os.rename`` wrapped: a file of the checkpoint being taken that the
        script moves into place (saved to ``ckpt.pt.tmp``, then renamed to ``ckpt.pt``: an atomic
        save) is put back, before the resumed run, where it was moved to."""
        saves = self

        @functools.wraps(original)
        def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(src, dst, *args, **kwargs)
            if saves.group and not saves.done and not args and not kwargs:
                saves.moved(src, dst)
            return result

        return rename

    def moved(self, src: Any, dst: Any) -> None:
        try:
            old, new = (os.path.abspath(os.fsdecode(p)) for p in (src, dst))
        except TypeError:
            return  # a descriptor, not a path
        with self.lock:
            for record in self.group:
                if record["path"].rstrip(os.sep) == old.rstrip(os.sep):
                    record["path"] = new

    def hold(self) -> None:
        """A save starts: while the checkpoint is being taken, no stop until it returns."""
        with self.lock:
            if self.group and not self.done and self.timer is not None:
                self.timer.cancel()
                self.timer = None

    def release(self) -> None:
        """A save returned or raised: the wait for the checkpoint's end goes on."""
        with self.lock:
            if self.group and not self.done and self.timer is None:
                self._arm()

    def finish(self) -> None:
        """The checkpoint is complete (the next optimizer step starts, no save for
        :data:`GROUP_QUIET` seconds, or the target returned): report it and end the process."""
        if not self.group:
            return  # no checkpoint taken (the common case: every backward call asks)
        with self.lock:
            if self.done or not self.group:
                return
            self.done = True
            if self.timer is not None and self.timer is not threading.current_thread():
                self.timer.cancel()
            group = list(self.group)
        first = group[0]
        record = {k: v for k, v in first.items() if k != "error"}
        errors = [r["error"] for r in group if r.get("error")]
        if errors:
            record["error"] = errors[0]
        if len(group) > 1:
            record["files"] = [{"path": r["path"], "copy": r.get("copy")} for r in group]
            described = [(r["path"], r["contents"]) for r in group if r.get("contents")]
            record["contents"] = merge_descriptions(described) if described else {}
        record["stopped_after"] = round(time.monotonic() - self.last_return, 3)
        self.rec.flush()
        self.emit({"info": {"checkpoint": record}})
        self.emit({"info": {"status": "stopped", "steps": record["step"], "checkpointed": True}})
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass
        self.exit(0)

    def _copy(self, path: str, record: dict[str, Any]) -> str | None:
        """The save copied into the trace folder, where nothing the other runs write reaches."""
        if not self.copy_dir:
            return None
        try:
            os.makedirs(self.copy_dir, exist_ok=True)
            dest = os.path.join(self.copy_dir, self._copy_name(path))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if os.path.isdir(path):
                shutil.copytree(path, dest, symlinks=True)
            else:
                shutil.copy2(path, dest)
            return dest
        except OSError as e:
            record["error"] = f"the checkpoint {path} could not be copied: {e.strerror or e}"
            return None

    def _copy_name(self, path: str) -> str:
        """Where a file of the checkpoint goes in the copy folder: the first by its own name,
        the others by their path from the first one's folder (so a script that finds them beside
        the first finds the copies there too), or numbered when outside it."""
        name = os.path.basename(path.rstrip(os.sep)) or "ckpt"
        if not self.group:
            return name
        base = os.path.dirname(self.group[0]["path"].rstrip(os.sep))
        rel = os.path.relpath(path, base)
        if rel.startswith(os.pardir) or os.path.isabs(rel):
            rel = os.path.join(f"elsewhere-{len(self.group)}", name)
        taken = {os.path.relpath(r["copy"], self.copy_dir) for r in self.group if r.get("copy")}
        if rel in taken:  # the same file saved twice in one checkpoint: the last one counts
            shutil.rmtree(os.path.join(self.copy_dir or "", rel), ignore_errors=True)
        return rel

    def lock_saves(self) -> int | None:
        """The runs of a resume save one at a time (an exclusive lock on a file of the trace
        folder, held by the interrupted run through its copy, released by the kernel when it
        ends): the reference, going in step with it, writes the same paths, and must not
        truncate a file while the interrupted run copies it."""
        if not self.lock_path:
            return None
        try:
            import fcntl  # POSIX only: without it the runs save without a lock

            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except (ImportError, OSError):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            os.close(fd)
            return None
        return fd

    # -- a named path (--checkpoint) that no watched save writes ------------------------------
    def _matches(self, path: str) -> bool:
        assert self.pattern is not None
        pattern = os.path.abspath(self.pattern)
        return fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path.rstrip(os.sep), pattern)

    def _glob_state(self) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for p in glob.glob(os.path.abspath(self.pattern or "")):
            try:
                st = os.stat(p)
            except OSError:
                continue
            out[p] = (st.st_mtime_ns, st.st_size)
        return out

    def poll(self) -> None:
        """Before each backward call and optimizer step: a file of ``--checkpoint`` that changed
        since the last look was written after the previous step (by a save repro-check does not
        see); a checkpoint taken is complete, and the run ends."""
        if self.done or os.getpid() != self.owner:
            return
        if self.pattern:
            now = self._glob_state()
            changed = sorted(p for p, st in now.items() if self.seen.get(p) != st)
            self.seen = now
            for path in changed[:MAX_FILES]:
                self.taken("file", path, None, written_ns=now[path][0])
        self.finish()  # a checkpoint taken ends as the next step starts


# ---- installing --------------------------------------------------------------------------------
def first_arg(i: int, name: str) -> Callable[[tuple[Any, ...], dict[str, Any]], Any]:
    def get(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return args[i] if len(args) > i else kwargs.get(name)
    return get


Where = Callable[[tuple[Any, ...], dict[str, Any]], tuple[Any, Any]]


class FrameworkSaves(metric_hooks.ImportHooks):
    """The saves of modules the target may import (``torch.distributed.checkpoint``, Lightning's
    and the HF Trainer's): each wrapped once its module has run (or at once when it already
    has), as ``checkpoint.saves``."""

    failure = "the checkpoints saved through {name} are not seen"
    feature = "checkpoint.saves"

    def __init__(self, recorder: Any, saves: Any) -> None:
        """``saves``: whose ``wrap(kind, original, where)`` wraps each save (:class:`Saves`, or
        :class:`repro_check.child.observe.saved.SavedFiles` for every run)."""
        super().__init__(recorder, {
            "torch.distributed.checkpoint": self.dcp,
            "lightning.pytorch.trainer.trainer": self.lightning,
            "pytorch_lightning.trainer.trainer": self.lightning,
            "transformers.trainer": self.hf,
        })
        self.saves = saves

    def hook_module(self, name: str, what: Any, module: Any) -> None:
        what(module)

    def install(self) -> FrameworkSaves:
        super().install()
        return self

    def wrap(self, kind: str, owner: Any, name: str, where: Where) -> None:
        patches.PATCHES.wrap(self.feature, owner, name,
                             lambda inner: self.saves.wrap(kind, inner, where), token=self)

    def dcp(self, module: Any) -> None:
        def where(a: tuple[Any, ...], k: dict[str, Any]) -> tuple[Any, Any]:
            state = a[0] if a else k.get("state_dict")
            cid = k.get("checkpoint_id")
            # save_state_dict (the older name) takes its storage writer by position too
            writer = k.get("storage_writer", a[1] if len(a) > 1 else None)
            path = cid if cid is not None else getattr(writer, "path", None)
            return state, os.path.abspath(os.fspath(path)) if path is not None else None

        for name in ("save", "save_state_dict"):
            if hasattr(module, name):
                self.wrap("torch.distributed.checkpoint", module, name, where)

    def lightning(self, module: Any) -> None:
        trainer = getattr(module, "Trainer", None)
        if trainer is not None and hasattr(trainer, "save_checkpoint"):
            path = first_arg(1, "filepath")
            self.wrap("lightning", trainer, "save_checkpoint",
                      lambda a, k: (None, path_of(path(a, k))))

    def hf(self, module: Any) -> None:
        trainer = getattr(module, "Trainer", None)
        if trainer is None or not hasattr(trainer, "_save_checkpoint"):
            return

        def where(a: tuple[Any, ...], k: dict[str, Any]) -> tuple[Any, Any]:
            self = a[0]
            trial = a[2] if len(a) > 2 else k.get("trial")
            folder = os.path.join(self._get_output_dir(trial=trial),
                                  f"checkpoint-{self.state.global_step}")
            return None, os.path.abspath(folder) if os.path.isdir(folder) else None

        self.wrap("transformers.Trainer", trainer, "_save_checkpoint", where)


class Checkpoints:
    """This module's hooks in one run: the per-step signals (every run) and, in a resume's runs,
    the watch on saves. :meth:`uninstall` takes every one out again."""

    def __init__(self, recorder: Any, emit: Emit, settings: ResumeSettings | None) -> None:
        self.recorder = recorder
        self.settings = settings
        self.signals = OptimizerSignals(recorder, settings is not None and settings.role == "resumed")
        self.saves = Saves(recorder, emit, settings) if settings is not None else None
        self.frameworks: FrameworkSaves | None = None

    def install(self) -> Checkpoints:
        import torch
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        registry = patches.PATCHES
        registry.hook("checkpoint.signals", "torch.optim.optimizer.register_optimizer_step_pre_hook",
                      register_optimizer_step_pre_hook, self.signals.pre_step, token=self)
        self.recorder.extra_signals.append(self.signals.take)
        cls = getattr(torch.amp, "GradScaler", None)  # torch.cuda.amp's is a subclass
        if cls is not None:
            scalers = self.signals.scalers

            def make(original_init: Any) -> Any:
                @functools.wraps(original_init)
                def __init__(scaler: Any, *a: Any, **k: Any) -> None:
                    original_init(scaler, *a, **k)
                    scalers.add(scaler)

                return __init__

            registry.wrap("checkpoint.signals", cls, "__init__", make, token=self)
        if self.saves is not None:
            if self.recorder.signals is not None:
                self.recorder.signals.lazy = True
            self._torch_saves(self.saves)
            self.frameworks = FrameworkSaves(self.recorder, self.saves).install()
            # before each backward call and optimizer step: --checkpoint's files are looked at,
            # and a checkpoint taken is complete
            self.recorder.step_starting.append(self.saves.poll)
            for name in ("replace", "rename"):  # a checkpoint file moved into place
                registry.wrap("checkpoint.saves", os, name, self.saves.renaming, token=self)
        return self

    def _torch_saves(self, saves: Saves) -> None:
        import torch

        registry = patches.PATCHES
        obj, to = first_arg(0, "obj"), first_arg(1, "f")
        registry.wrap("checkpoint.saves", torch, "save", lambda inner: saves.wrap(
            "torch.save", inner, lambda a, k: (obj(a, k), path_of(to(a, k)))), token=self)
        if importlib.util.find_spec("safetensors") is None:
            return
        try:
            import safetensors.torch as st  # optional: only when installed
        except Exception as e:  # noqa: BLE001 - an unusual safetensors: its saves go unseen
            registry.skip("checkpoint.saves", "safetensors.torch", f"{type(e).__name__}: {e}")
            return
        tensors, model = first_arg(0, "tensors"), first_arg(0, "model")
        filename = first_arg(1, "filename")
        def saving(what: Callable[[tuple[Any, ...], dict[str, Any]], Any]
                   ) -> Callable[[Any], Any]:
            return lambda inner: saves.wrap(
                "safetensors", inner, lambda a, k: (what(a, k), path_of(filename(a, k))))

        for name, what in (("save_file", tensors), ("save_model", model)):
            if hasattr(st, name):
                registry.wrap("checkpoint.saves", st, name, saving(what), token=self)

    def target_returned(self) -> None:
        """The target returned or raised: a checkpoint being taken is complete, and the
        interrupted run stops as it would have at its next step."""
        if self.saves is not None:
            self.saves.finish()

    def uninstall(self) -> None:
        if self.saves is not None and self.saves.poll in self.recorder.step_starting:
            self.recorder.step_starting.remove(self.saves.poll)
        if self.frameworks is not None:
            self.frameworks.uninstall()
        patches.PATCHES.release(self)
        if self.signals.take in self.recorder.extra_signals:
            self.recorder.extra_signals.remove(self.signals.take)


def install(recorder: Any, emit: Emit, settings: ResumeSettings | None) -> Checkpoints:
    """Install the per-step signals (every run) and, with ``settings`` (a resume's runs), the
    watch on saves."""
    return Checkpoints(recorder, emit, settings).install()


def iter_signals(signals: dict[str, Any]) -> Iterator[str]:
    """The names of this module's signals a step recorded."""
    return (name for name in SIGNALS if name in signals)
