"""TARGET parsing, checking before any run, and resolution inside a run.

Forms: ``module:function`` (current folder first on ``sys.path``, as ``python -m`` does),
``module`` alone (run as ``python -m module``), ``path/to/file.py:function`` (the file's folder
first on ``sys.path``) and ``path/to/file.py`` alone (run as ``__main__``, like ``python file.py``).
The parent checks what it can without running the target's code (files exist, modules are found,
the function is defined at top level); the child resolves for real.
"""

from __future__ import annotations

import ast
import difflib
import importlib.machinery
import importlib.util
import inspect
import os
import pkgutil
import runpy
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro_check.errors import TargetNotFound, UsageError


@dataclass(frozen=True)
class Target:
    """A parsed TARGET; ``kind`` is "module", "module_function", "file" or "file_function"."""

    text: str
    kind: str
    module: str | None = None
    path: str | None = None
    function: str | None = None

    @property
    def search_dir(self) -> str:
        """The folder that goes first on the run's ``sys.path``."""
        if self.path is not None:
            return str(Path(self.path).resolve().parent)
        return os.getcwd()

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def parse(text: str) -> Target:
    """Split TARGET into its form; syntax errors are usage errors."""
    if not text or text.strip() != text:
        raise UsageError(f"invalid TARGET {text!r}: expected module:function, file.py or file.py:function")
    left, sep, right = text.rpartition(":")
    if sep and left.endswith(".py"):
        _check_attr_path(text, right)
        return Target(text, "file_function", path=left, function=right)
    if text.endswith(".py") or os.sep in text:
        return Target(text, "file", path=text)
    if sep:
        _check_module_name(text, left)
        _check_attr_path(text, right)
        return Target(text, "module_function", module=left, function=right)
    _check_module_name(text, text)
    return Target(text, "module", module=text)


def _check_module_name(text: str, name: str) -> None:
    if not name or not all(part.isidentifier() for part in name.split(".")):
        raise UsageError(f"invalid TARGET {text!r}: {name!r} is not a module name")


def _check_attr_path(text: str, attr: str) -> None:
    if not attr or not all(part.isidentifier() for part in attr.split(".")):
        raise UsageError(f"invalid TARGET {text!r}: {attr!r} is not a function name")


def _suggest(name: str, candidates: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + ", ".join(repr(c) for c in close) + "?)"


def _top_level_names(source_path: str) -> set[str] | None:
    """Names bound at a module's top level, or None when that cannot be known statically."""
    try:
        tree = ast.parse(Path(source_path).read_bytes(), filename=source_path)
    except (OSError, SyntaxError, ValueError):
        return None  # the run reports a syntax error with the target's own traceback
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.ImportFrom)) and any(a.name == "*" for a in node.names):
            return None
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            return None
    for node in tree.body:
        _bound(node, names)
    if "globals" in {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}:
        return None
    return names


def _bound(node: ast.stmt, names: set[str]) -> None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names.add(node.name)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        for a in node.names:
            names.add((a.asname or a.name).split(".")[0])
    elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    names.add(n.id)
    elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
        for field in ("body", "orelse", "finalbody", "handlers"):
            for child in getattr(node, field, []) or []:
                if isinstance(child, ast.ExceptHandler):
                    for c in child.body:
                        _bound(c, names)
                else:
                    _bound(child, names)


def _check_function(target: Target, source: str | None, where: str) -> None:
    if source is None or not source.endswith(".py") or target.function is None:
        return
    names = _top_level_names(source)
    first = target.function.split(".")[0]
    if names is not None and first not in names:
        public = [n for n in names if not n.startswith("_")]
        raise TargetNotFound(f"{where} has no function {first!r}{_suggest(first, public)}")


def search_path(first: str) -> list[str]:
    rest = [p for p in sys.path[1:] if p]
    return [first, *[p for p in rest if p != first]]


def find_module(name: str, path: list[str]) -> importlib.machinery.ModuleSpec:
    """Find a module's spec without executing any package ``__init__``."""
    parts = name.split(".")
    locations: list[str] | None = path
    spec = None
    for i, part in enumerate(parts):
        spec = importlib.machinery.PathFinder.find_spec(part, locations) if locations is not None else None
        if spec is None and i == 0:
            try:  # editable installs and other meta-path finders; a top-level find runs no code
                spec = importlib.util.find_spec(part)
            except (ImportError, ValueError):
                spec = None
        if spec is None:
            here = ".".join(parts[:i])
            # the user's own modules first: a near miss in site-packages is a poor guess
            local = (locations or [])[:1] if i == 0 else (locations or [])
            hint = _suggest(part, [m.name for m in pkgutil.iter_modules(local)]) or \
                _suggest(part, [m.name for m in pkgutil.iter_modules(locations or [])])
            inside = f" in package {here!r}" if here else ""
            raise TargetNotFound(f"no module named {'.'.join(parts[: i + 1])!r}{inside}{hint}")
        locations = list(spec.submodule_search_locations or []) or None
        if locations is None and i < len(parts) - 1:
            raise TargetNotFound(f"{'.'.join(parts[: i + 1])!r} is a module, not a package; "
                                 f"cannot find {name!r}")
    assert spec is not None
    return spec


def _check_syntax(source: str | None, where: str) -> None:
    """A syntax error is found by parsing (which runs nothing), before any run starts."""
    if source is None or not source.endswith(".py"):
        return
    try:
        data = Path(source).read_bytes()
    except OSError as e:
        raise TargetNotFound(f"cannot read {where}: {e.strerror}") from None
    try:
        ast.parse(data, filename=source)
    except SyntaxError as e:
        detail = "".join(traceback.format_exception_only(type(e), e))
        raise TargetNotFound(f"{where} has a syntax error: {e.msg} (line {e.lineno})",
                             detail=detail) from None
    except ValueError as e:  # e.g. null bytes
        raise TargetNotFound(f"{where} is not Python source: {e}") from None
    except (RecursionError, MemoryError):
        return  # too deep to check here; the run reports it


def check(target: Target) -> None:
    """Everything that can be checked without running the target's code."""
    if target.path is not None:
        p = Path(target.path)
        if not p.exists():
            folder = p.parent if str(p.parent) else Path(".")
            options = [f.name for f in folder.glob("*.py")] if folder.is_dir() else []
            raise TargetNotFound(f"no such file: {target.path}{_suggest(p.name, options)}")
        if not p.is_file():
            raise TargetNotFound(f"not a file: {target.path}")
        _check_syntax(str(p), target.path)
        if target.kind == "file_function":
            _check_function(target, str(p), target.path)
        return
    assert target.module is not None
    spec = find_module(target.module, search_path(os.getcwd()))
    if target.kind == "module" and spec.submodule_search_locations is not None:
        main = importlib.machinery.PathFinder.find_spec(
            "__main__", list(spec.submodule_search_locations))
        if main is None:
            raise TargetNotFound(f"{target.module!r} is a package without __main__.py, so it "
                                 "cannot be run as a whole (give MODULE:FUNCTION, or one of "
                                 "its modules)")
        spec = main
    _check_syntax(spec.origin, f"module {target.module!r} ({spec.origin})")
    if target.kind == "module_function":
        _check_function(target, spec.origin, f"module {target.module!r}")


# ---- inside the run --------------------------------------------------------------------------

#: frames from these files are hidden from the target's traceback
_OWN_FILES = (os.path.dirname(os.path.abspath(__file__)) + os.sep, runpy.__file__, pkgutil.__file__)


def target_traceback(exc: BaseException) -> str:
    """The traceback the user needs: only the frames from the target (and what it calls)."""
    tb = exc.__traceback__
    while tb is not None:
        fname = tb.tb_frame.f_code.co_filename
        if not (fname.startswith(_OWN_FILES) or fname.startswith("<frozen importlib")):
            break
        tb = tb.tb_next
    te = traceback.TracebackException(type(exc), exc, tb)
    return "".join(te.format())


def _import_target_module(target: Target, name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            raise TargetNotFound(f"no module named {e.name!r}") from None
        raise TargetNotFound(
            f"importing {name!r} failed: {type(e).__name__}: {e}", detail=target_traceback(e)
        ) from None
    except Exception as e:  # noqa: BLE001 - the function never ran: its module cannot be imported
        raise TargetNotFound(
            f"importing {name!r} failed: {type(e).__name__}: {e}", detail=target_traceback(e)
        ) from None


def _load_file_module(path: str) -> Any:
    name = Path(path).stem
    if not name.isidentifier():
        name = "_repro_check_target"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TargetNotFound(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - the function never ran: its file cannot be imported
        raise TargetNotFound(
            f"importing {path} failed: {type(e).__name__}: {e}", detail=target_traceback(e)
        ) from None
    return module


def _attribute(module: Any, attr: str, where: str) -> Any:
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            options = [n for n in dir(obj) if not n.startswith("_")]
            raise TargetNotFound(f"{where} has no attribute {part!r}{_suggest(part, options)}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise TargetNotFound(f"{where}:{attr} is not callable (it is a {type(obj).__name__})")
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return obj
    required = [
        p.name for p in sig.parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    if required:
        raise TargetNotFound(
            f"{where}:{attr} needs arguments ({', '.join(required)}); repro-check calls it with none. "
            "Pass options after -- and read them from sys.argv"
        )
    return obj


def resolve(target: Target, args: Sequence[str]) -> Callable[[], Any]:
    """Set up ``sys.path``/``sys.argv`` and return a callable that runs the target once."""
    sys.path[0:1] = [target.search_dir]
    if target.kind == "file":
        path = str(Path(target.path or "").resolve())
        sys.argv = [target.path or path, *args]
        return lambda: (runpy.run_path(path, run_name="__main__"), None)[1]
    if target.kind == "module":
        sys.argv = [target.module or "", *args]
        spec = importlib.util.find_spec(target.module or "")
        if spec is None:
            raise TargetNotFound(f"no module named {target.module!r}")
        return lambda: (runpy.run_module(target.module or "", run_name="__main__", alter_sys=True), None)[1]
    assert target.function is not None
    if target.kind == "file_function":
        sys.argv = [target.path or "", *args]
        module = _load_file_module(str(Path(target.path or "").resolve()))
        return _attribute(module, target.function, target.path or "")
    sys.argv = [target.module or "", *args]
    module = _import_target_module(target, target.module or "")
    return _attribute(module, target.function, f"module {target.module!r}")
