"""Final metrics from what the script already logs: TensorBoard, Lightning, the HF Trainer,
wandb and mlflow, each hooked only if the script imports it.

Nothing here imports any of them (none is a dependency): a finder first on ``sys.meta_path``
waits for the module that defines the logging call and patches it as soon as that module has
run, before the script can touch it; a module already imported is patched at once. Every number
logged goes through the recorder's metric path under a prefixed name, the last value of a name
winning:

==============================================  =============================================
``SummaryWriter.add_scalar(tag, v)``             ``tb:TAG`` (``add_scalars``: ``tb:MAIN/TAG``)
Lightning ``self.log``                           ``lightning:NAME``: ``trainer.callback_metrics``
                                                 when ``fit``, ``validate`` or ``test`` return
HF ``Trainer.log(logs)``, ``evaluate()``         ``hf:NAME``
``wandb.log(data)`` / ``Run.log``                ``wandb:NAME`` (nested dicts joined with ``.``)
``mlflow.log_metric(k, v)``, ``log_metrics``     ``mlflow:NAME``
==============================================  =============================================

Every number is recorded, timing values too (``train_runtime``, ``charts/SPS``): the comparison
lists them as not compared (:mod:`repro_check.compare.timing`). Values that are not numbers
(images, histograms, text) are skipped. A hook that fails to install is a warning, never an error of the
run; a hook never changes what the logging call does or returns.
"""

from __future__ import annotations

import functools
import os
import importlib.abc
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from repro_check.child.observe import metricset, origin
from repro_check.child import patches
from repro_check.trace import values

#: record(prefix, name, value): what every hook calls
Record = Callable[[str, str, Any], None]


class Sink:
    """Turns logged values into recorder metrics (numbers only), each under its library's
    prefix: the prefix is the source (:mod:`repro_check.child.observe.metricset`)."""

    def __init__(self, recorder: Any, token: Any = None) -> None:
        self.recorder = recorder
        #: what the wraps are installed under (the hooks that undo them)
        self.token = token if token is not None else self

    def record(self, prefix: str, name: Any, value: Any) -> None:
        try:
            number = values.encode(value) is not None
        except Exception:  # noqa: BLE001 - a value we cannot read is not a metric
            return
        if number:
            self.recorder.metric(f"{prefix}{name}", value, prefix.rstrip(":"))

    def record_all(self, prefix: str, logged: Any, nested: str = "") -> None:
        if not isinstance(logged, Mapping):
            return
        warn = getattr(self.recorder, "warn", None) or (lambda text: None)
        for name, value in metricset.flatten(logged, warn, f"a dict logged through {prefix[:-1]}"):
            self.record(prefix, f"{nested}{name}", value)


def _after(sink: Sink, owner: Any, attr: str, then: Callable[..., None]) -> None:
    """Wrap ``owner.attr`` (through the patch registry, under the sink's hooks) so that
    ``then(result, *args, **kwargs)`` runs after each call that returns; nothing when there is
    nothing to wrap or it is wrapped already (a subclass's inherited method)."""
    original = getattr(owner, attr, None)
    if not callable(original) or getattr(original, "__repro_check_hook__", False):
        return

    def make(original: Any) -> Any:
        @functools.wraps(original)
        def hooked(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            try:
                then(result, *args, **kwargs)
            except Exception:  # noqa: BLE001 - recording never breaks the logging call
                pass
            return result

        hooked.__repro_check_hook__ = True  # type: ignore[attr-defined]
        return hooked

    patches.PATCHES.wrap("metric_hooks", owner, attr, make, token=sink.token)


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    """Argument ``name`` of a call, given by position ``index`` or by keyword."""
    return kwargs.get(name, args[index] if len(args) > index else None)


# ---- the hooks: each takes the imported module and the sink -------------------------------------
def _tensorboard(module: Any, sink: Sink) -> None:
    writer = module.SummaryWriter

    def scalar(result: Any, *args: Any, **kwargs: Any) -> None:  # (self, tag, scalar_value)
        sink.record("tb:", _arg(args, kwargs, 1, "tag"), _arg(args, kwargs, 2, "scalar_value"))

    def scalars(result: Any, *args: Any, **kwargs: Any) -> None:  # (self, main_tag, dict)
        main = _arg(args, kwargs, 1, "main_tag")
        sink.record_all("tb:", _arg(args, kwargs, 2, "tag_scalar_dict"), f"{main}/")

    _after(sink, writer, "add_scalar", scalar)
    _after(sink, writer, "add_scalars", scalars)


def _lightning(module: Any, sink: Sink) -> None:
    def logged(result: Any, trainer: Any, *args: Any, **kwargs: Any) -> None:
        sink.record_all("lightning:", dict(trainer.callback_metrics))

    for name in ("fit", "validate", "test"):
        _after(sink, module.Trainer, name, logged)


def _hf_trainer(module: Any, sink: Sink) -> None:
    def logged(result: Any, *args: Any, **kwargs: Any) -> None:  # (self, logs, start_time)
        sink.record_all("hf:", _arg(args, kwargs, 1, "logs"))

    def evaluated(result: Any, *args: Any, **kwargs: Any) -> None:
        sink.record_all("hf:", result)

    _after(sink, module.Trainer, "log", logged)
    _after(sink, module.Trainer, "evaluate", evaluated)


def _wandb(module: Any, sink: Sink) -> None:
    def logged(result: Any, *args: Any, **kwargs: Any) -> None:  # (data, step, commit)
        sink.record_all("wandb:", _arg(args, kwargs, 0, "data"))

    def run_logged(result: Any, run: Any, *args: Any, **kwargs: Any) -> None:
        logged(result, *args, **kwargs)

    _after(sink, module, "log", logged)  # wandb.init() then binds wandb.log to a Run's log
    run_class = getattr(module, "Run", None) or getattr(
        sys.modules.get("wandb.sdk.wandb_run"), "Run", None)
    if run_class is not None:
        _after(sink, run_class, "log", run_logged)


def _mlflow(module: Any, sink: Sink) -> None:
    def one(result: Any, *args: Any, **kwargs: Any) -> None:  # (key, value, step)
        sink.record("mlflow:", _arg(args, kwargs, 0, "key"), _arg(args, kwargs, 1, "value"))

    def many(result: Any, *args: Any, **kwargs: Any) -> None:  # (metrics, step)
        sink.record_all("mlflow:", _arg(args, kwargs, 0, "metrics"))

    _after(sink, module, "log_metric", one)
    _after(sink, module, "log_metrics", many)


def _json_files(module: Any, sink: Sink) -> None:
    """Numbers the script's own code writes to a file with ``json.dump`` (``results.json``'s
    ``eval_accuracy``: a final evaluation kept nowhere else), as ``json:FILE/KEY``; timing
    figures among them are set aside as other metrics' are. Libraries' own JSON files
    (configurations, a trainer's state) are not the script's results and are left out."""
    def dumped(result: Any, *args: Any, **kwargs: Any) -> None:  # (obj, fp, ...)
        frame = sys._getframe(2)  # the caller of the hooked json.dump
        if frame is None or origin.is_library(frame.f_code.co_filename):
            return
        name = getattr(_arg(args, kwargs, 1, "fp"), "name", None)
        if not isinstance(name, str):
            return
        obj = _arg(args, kwargs, 0, "obj")
        base = os.path.basename(name)
        if isinstance(obj, Mapping):
            sink.record_all("json:", obj, f"{base}/")
        else:
            sink.record("json:", base, obj)

    _after(sink, module, "dump", dumped)


#: module -> the hook applied once it is imported (the module that defines what is patched)
HOOKS: dict[str, Callable[[Any, Sink], None]] = {
    "json": _json_files,
    "torch.utils.tensorboard.writer": _tensorboard,
    "lightning.pytorch": _lightning,
    "pytorch_lightning": _lightning,
    "transformers.trainer": _hf_trainer,
    "wandb": _wandb,
    "mlflow": _mlflow,
}


# ---- patching on first import ------------------------------------------------------------------
class _ThenLoader(importlib.abc.Loader):
    """The module's own loader, with ``then(module)`` once the module has run; it gives the module
    its own loader back, and answers everything else as that loader does."""

    def __init__(self, loader: Any, then: Callable[[Any], None]) -> None:
        self._loader = loader
        self._then = then

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        try:
            self._loader.exec_module(module)
        finally:
            module.__loader__ = self._loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._loader
        self._then(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _MetaPathEntry:
    """A finder put first on ``sys.meta_path``; :meth:`remove` takes it off again."""

    def __init__(self, finder: Any) -> None:
        self.finder = finder
        sys.meta_path.insert(0, finder)

    def remove(self) -> None:
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Calls ``patches[name](module)`` when module ``name`` has been imported (at once if it
    already is); imports nothing itself."""

    def __init__(self, patches: Mapping[str, Callable[[Any], None]],
                 feature: str = "metric_hooks") -> None:
        self.patches = dict(patches)
        self.feature = feature
        self.done: set[str] = set()
        #: per thread, the modules this finder is looking up (two finders of this kind for one
        #: module ask each other: the second answers nothing while the first asks)
        self._busy = threading.local()

    def install(self) -> PatchOnImport:
        """First on ``sys.meta_path`` (through the patch registry, as ``feature``)."""
        patches.PATCHES.hook(self.feature, "sys.meta_path", _MetaPathEntry, self, token=self)
        for name in list(self.patches):
            module = sys.modules.get(name)
            if module is not None:
                self._apply(name, module)
        return self

    def uninstall(self) -> None:
        patches.PATCHES.release(self)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.patches or fullname in self.done:
            return None
        busy = self._busy.__dict__.setdefault("names", set())
        if fullname in busy:  # another finder like this one asking the finders after it
            return None
        busy.add(fullname)
        try:
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            busy.discard(fullname)
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _ThenLoader(spec.loader, lambda module: self._apply(fullname, module))
        return spec

    def _apply(self, name: str, module: Any) -> None:
        if name in self.done:
            return
        self.done.add(name)
        self.patches[name](module)


class ImportHooks:
    """Hooks put in when the module that defines what they wrap is imported (:class:`PatchOnImport`),
    each through the patch registry under this object's token: :meth:`uninstall` takes them all
    out. A hook that fails (a version we do not know) is a warning naming ``failure``, never an
    error of the run. Subclasses say what each module gets (:meth:`hook_module`)."""

    #: the warning's text when a module's hook fails (``{name}``: the module)
    failure = "{name} is not hooked"

    #: the feature (:data:`repro_check.child.patches.ORDER`) its wraps are installed as
    feature = "metric_hooks"

    def __init__(self, recorder: Any, modules: Mapping[str, Any]) -> None:
        self.recorder = recorder
        self.finder = PatchOnImport({name: functools.partial(self._hook, name, what)
                                     for name, what in modules.items()}, self.feature)

    def hook_module(self, name: str, what: Any, module: Any) -> None:
        raise NotImplementedError

    def _hook(self, name: str, what: Any, module: Any) -> None:
        try:
            self.hook_module(name, what, module)
        except Exception as e:  # noqa: BLE001 - a version we do not know: say so, run on
            self.recorder.emit({"warning": f"{self.failure.format(name=name)}: "
                                           f"{type(e).__name__}: {e}"})

    def install(self) -> ImportHooks:
        self.finder.install()
        return self

    def uninstall(self) -> None:
        self.finder.uninstall()
        patches.PATCHES.release(self)


class MetricHooks(ImportHooks):
    """The hooks of one run: installed with the recorder, undone with :meth:`uninstall`."""

    failure = "metrics logged through {name} are not recorded"

    def __init__(self, recorder: Any) -> None:
        super().__init__(recorder, HOOKS)
        self.sink = Sink(recorder, token=self)

    def hook_module(self, name: str, what: Any, module: Any) -> None:
        what(module, self.sink)

    def install(self) -> MetricHooks:
        super().install()
        return self


def install(recorder: Any) -> MetricHooks:
    """Hook, for ``recorder``, every logging library the run imports from now on (or already has)."""
    return MetricHooks(recorder).install()
