"""Settings an ``--across`` environment imposes on the target from inside its process, the script
unmodified: the ``num_workers`` of every DataLoader (``workers=``), the multiprocessing start
method of DataLoader workers and of the processes the target starts (``start=``), and
``torch.compile`` turned off (``compile=off``).

The values come in the run's configuration (:class:`~repro_check.trace.protocol.RunConfig`'s
``num_workers``, ``start_method`` and ``compile``); every hook goes through the patch registry
(:mod:`repro_check.child.patches`) under its own feature, so it is listed, installed once and
undone with the others:

* ``overrides.loaders`` wraps ``DataLoader.__init__`` innermost (nearest the original): every
  loader is made with the environment's values whatever the script or the other features pass (a
  loader made with ``num_workers=0`` loses its worker-only options, which torch refuses without
  workers);
* ``overrides.start_method`` replaces ``set_start_method`` of ``multiprocessing`` and
  ``torch.multiprocessing``: the environment's method is made the default once, and the script's
  own calls are ignored (noted on the trace once), so what it starts uses that method too;
* ``overrides.compile`` sets ``TORCHDYNAMO_DISABLE=1`` in the process's environment, PyTorch's own
  switch (read by every ``torch.compile`` call, and inherited by the processes the target starts):
  ``torch.compile`` then returns the function as it is, and the same script runs eager.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from typing import Any

from repro_check.child import patches
from repro_check.trace.protocol import RunConfig

#: PyTorch's own switch that makes ``torch.compile`` return the function as it is
COMPILE_OFF_ENV = "TORCHDYNAMO_DISABLE"
#: the features of this module, as :data:`repro_check.child.patches.ORDER` names them
FEATURES = ("overrides.loaders", "overrides.start_method", "overrides.compile")
#: options torch accepts only with workers
_WORKER_ONLY = ("prefetch_factor", "persistent_workers")
_LOADER = "torch.utils.data.DataLoader.__init__"

Note = Callable[[str], None]
#: the start method the process had before :func:`install` set one (put back by :func:`remove`)
_before: list[str | None] = []


def imposes(config: RunConfig) -> bool:
    """Whether ``config`` asks for any override."""
    return config.num_workers is not None or config.start_method is not None \
        or config.compile is False


def loading(config: RunConfig) -> bool:
    """Whether ``config`` changes how the data is loaded (workers, start method): then the run
    also notes which global random streams its DataLoader fetches draw from
    (:meth:`repro_check.child.observe.watch.SeedingWatch.watch_draws`)."""
    return config.num_workers is not None or config.start_method is not None


def loader_arguments(given: dict[str, Any], workers: int | None, start: str | None) -> None:
    """A DataLoader's arguments by name (``given``, changed in place) with ``workers`` and
    ``start`` imposed."""
    if workers is not None:
        given["num_workers"] = workers
        if workers == 0:
            for name in _WORKER_ONLY:
                given.pop(name, None)
            given.pop("multiprocessing_context", None)
    if start is not None and (given.get("num_workers") or 0) > 0:
        given["multiprocessing_context"] = start


def _override_loaders(workers: int | None, start: str | None) -> None:
    from torch.utils.data import DataLoader  # torch: only when a loader setting is imposed

    names = ("num_workers", "multiprocessing_context", *_WORKER_ONLY)
    patches.PATCHES.wrap_arguments("overrides.loaders", DataLoader, "__init__", names,
                                   lambda given: loader_arguments(given, workers, start))


def _override_start_method(start: str, note: Note | None) -> None:
    """``start`` as the default method; the script's own choice is ignored (and noted)."""
    modules: list[Any] = [multiprocessing]
    try:
        import torch.multiprocessing as tmp  # torch: only when a start method is imposed

        modules.append(tmp)
    except ImportError:
        pass
    if not _before:
        _before.append(multiprocessing.get_start_method(allow_none=True))
    multiprocessing.set_start_method(start, force=True)
    said: list[str] = []

    def set_start_method(method: str | None, force: bool = False) -> None:
        if method != start and not said and note is not None:
            said.append(str(method))
            note(f"the target asked for start method {method!r}; --across start={start} "
                 "keeps its own")

    for module in modules:
        if hasattr(module, "set_start_method"):
            patches.PATCHES.replace("overrides.start_method", module, "set_start_method",
                                    set_start_method)


def install(config: RunConfig, note: Note | None = None) -> None:
    """Impose what ``config`` asks (``num_workers``, ``start_method``, ``compile`` off; None:
    left alone). Installing again replaces the hooks (the registry's rule)."""
    if config.num_workers is not None or config.start_method is not None:
        _override_loaders(config.num_workers, config.start_method)
    if config.start_method is not None:
        _override_start_method(config.start_method, note)
    if config.compile is False:
        patches.PATCHES.replace("overrides.compile", os.environ, COMPILE_OFF_ENV, "1", item=True,
                                label=f"os.environ[{COMPILE_OFF_ENV}]")


def remove() -> None:
    """Take every override out again, and put back the start method the process had."""
    for feature in FEATURES:
        patches.PATCHES.remove(feature)
    if _before:
        multiprocessing.set_start_method(_before.pop(), force=True)
