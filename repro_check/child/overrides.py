"""Settings an ``--across`` environment imposes on the target from inside its process, the script
unmodified: the ``num_workers`` of every DataLoader (``workers=``) and the multiprocessing start
method of DataLoader workers and of the processes the target starts (``start=``).

Every DataLoader is made with the environment's values whatever the script passes (a loader
made with ``num_workers=0`` loses its worker-only options, which torch refuses without workers).
The start method becomes the default one, and the script's own ``set_start_method`` calls are
ignored (noted on the trace once), so what it starts uses the environment's method too.

:func:`install` returns an undo, so the hooks can move onto a shared patch registry.
(``compile=off`` needs no hook: it sets ``TORCHDYNAMO_DISABLE=1``, PyTorch's own switch.)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

#: the run configuration's key holding this module's settings
CONFIG_KEY = "overrides"
#: ``DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, ...)``:
#: positions of the arguments set here, counting ``dataset`` as 0
_NUM_WORKERS_AT = 5
_CONTEXT_AT = 11
#: options torch accepts only with workers
_WORKER_ONLY = ("prefetch_factor", "persistent_workers")

Undo = Callable[[], None]


def _set(args: list[Any], kwargs: dict[str, Any], at: int, name: str, value: Any) -> None:
    if len(args) > at:
        args[at] = value
    else:
        kwargs[name] = value


def _get(args: list[Any], kwargs: dict[str, Any], at: int, name: str, default: Any) -> Any:
    return args[at] if len(args) > at else kwargs.get(name, default)


def loader_arguments(args: tuple[Any, ...], kwargs: dict[str, Any], workers: int | None,
                     start: str | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A DataLoader's constructor arguments with ``workers`` and ``start`` imposed."""
    a, kw = list(args), dict(kwargs)
    if workers is not None:
        _set(a, kw, _NUM_WORKERS_AT, "num_workers", workers)
        if workers == 0:
            for name in _WORKER_ONLY:
                kw.pop(name, None)
            if len(a) > _CONTEXT_AT:
                a[_CONTEXT_AT] = None
            else:
                kw.pop("multiprocessing_context", None)
    if start is not None and (_get(a, kw, _NUM_WORKERS_AT, "num_workers", 0) or 0) > 0:
        _set(a, kw, _CONTEXT_AT, "multiprocessing_context", start)
    return tuple(a), kw


def _override_loaders(workers: int | None, start: str | None) -> Undo:
    from torch.utils.data import DataLoader

    original = DataLoader.__init__

    @functools.wraps(original)  # frameworks read its signature to rebuild loaders
    def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
        args, kwargs = loader_arguments(args, kwargs, workers, start)
        original(loader, *args, **kwargs)

    DataLoader.__init__ = __init__  # type: ignore[method-assign, assignment]

    def undo() -> None:
        DataLoader.__init__ = original  # type: ignore[method-assign]

    return undo


def _override_start_method(start: str, note: Callable[[str], None] | None) -> Undo:
    """``start`` as the default method; the script's own choice is ignored (and noted)."""
    import multiprocessing

    multiprocessing.set_start_method(start, force=True)
    modules: list[Any] = [multiprocessing]
    try:
        import torch.multiprocessing as tmp

        modules.append(tmp)
    except ImportError:
        pass
    saved = [(m, m.set_start_method) for m in modules if hasattr(m, "set_start_method")]
    said: list[str] = []

    def set_start_method(method: str | None, force: bool = False) -> None:
        if method != start and not said and note is not None:
            said.append(str(method))
            note(f"the target asked for start method {method!r}; --across start={start} "
                 "keeps its own")

    for module, _ in saved:
        module.set_start_method = set_start_method

    def undo() -> None:
        for module, fn in saved:
            module.set_start_method = fn

    return undo


def install(settings: dict[str, Any] | None, note: Callable[[str], None] | None = None) -> Undo:
    """Impose ``settings`` (``num_workers``, ``start_method``; absent: left alone); the undo
    restores what was replaced."""
    settings = settings or {}
    workers = settings.get("num_workers")
    start = settings.get("start_method")
    undos: list[Undo] = []
    if workers is not None or start is not None:
        undos.append(_override_loaders(None if workers is None else int(workers), start))
    if start is not None:
        undos.append(_override_start_method(str(start), note))

    def undo() -> None:
        for u in reversed(undos):
            u()

    return undo
