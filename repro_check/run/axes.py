"""The environments of ``--across AXIS=A,B``: parsing, the grid of cells, and the checks that
must pass before any run.

An axis is one thing that differs between environments: the intra-op thread count, the device
(the GPU hidden for the CPU side), the interpreter, the deterministic flags, or any environment
variable. Several axes combine as a grid; every cell is one environment, and the first cell
(the first value of every axis) is the one every other cell is compared with.

What can be told without running the target is told here, in one line, before any run: an
unknown axis or a malformed value list, a thread count above the cores, an interpreter that
does not exist, has no torch or cannot import this package, a CUDA side without a GPU.
Interpreters are probed with one short subprocess each; only one that must see a GPU imports
torch for it (seconds), the others find it and read its version.
"""

from __future__ import annotations

import difflib
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro_check.errors import UsageError
from repro_check.run import pathentry
from repro_check.trace import fingerprint

#: the axes, as users write them (``env:NAME`` stands for any environment variable)
AXES = ("threads", "device", "python", "deterministic", "workers", "start", "compile",
        "compile-cache", "rev", "args", "nproc", "env:NAME")
DEVICES = ("cpu", "cuda")
#: multiprocessing start methods (``start=``); those this platform lacks are refused
START_METHODS = ("fork", "spawn", "forkserver")
SWITCH = ("on", "off")
#: ``compile-cache=cold,warm``: runs with empty compile caches, then runs with the caches the
#: first cold run filled (its first value must be cold: a warm cell needs a cold run before it)
CACHE_STATES = ("cold", "warm")
#: where torch.compile keeps what it compiled (inductor's kernels, Triton's binaries); the
#: compile-cache axis sets both, so an ``env:`` axis must not
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def cache_folders(folder: str | os.PathLike[str]) -> dict[str, str]:
    """Each compile cache variable with its folder inside ``folder`` (``torchinductor``,
    ``triton``): one layout for a run's fresh caches and for the shared ones of a warm cell."""
    return {var: os.path.join(folder, var.split("_")[0].lower()) for var in CACHE_VARIABLES}
#: seeding components the ``deterministic`` axis turns on or off together
DETERMINISTIC_COMPONENTS = ("cudnn", "deterministic_algorithms")
#: processes a ``nproc=`` value may start: a torchrun job of that many ranks on this machine
MAX_NPROC = 64
#: seconds an interpreter may take to say what it has
PROBE_TIMEOUT = 120.0

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Axis:
    """One ``--across NAME=A,B`` flag: ``name`` as written (``threads``, ``env:CUBLAS_...``)."""

    name: str
    values: tuple[str, ...]

    @property
    def kind(self) -> str:
        """``threads``, ``device``, ``python``, ``deterministic`` or ``env``."""
        return "env" if self.name.startswith("env:") else self.name

    @property
    def variable(self) -> str | None:
        return self.name[4:] if self.kind == "env" else None

    @property
    def separator(self) -> str:
        """What separates the values as written: ``|`` for ``args=`` (its values hold commas)."""
        return "|" if self.kind == "args" else ","

    def flag(self) -> str:
        return f"{self.name}={self.separator.join(self.values)}"


def split_unquoted(text: str, sep: str) -> list[str]:
    """``text`` cut at every ``sep`` outside shell quotes (``'...'``, ``"..."``, a backslash)."""
    parts, start, quote, i = [], 0, "", 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and quote != "'":
            i += 2
            continue
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == sep:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def argument_list(value: str, text: str) -> tuple[str, ...]:
    """One ``args=`` value as the arguments it gives the script, split as a shell splits them."""
    try:
        return tuple(shlex.split(value))
    except ValueError as e:
        raise UsageError(f"--across {text!r}: cannot split {value!r} into arguments ({e})") \
            from None


def parse_args_axis(text: str, listed: str) -> Axis:
    """``args=A|B[|C]``: each value an argument list appended to the script's arguments (one
    may be empty: the script's arguments alone); values that split into the same list are one."""
    try:
        shlex.split(listed)
    except ValueError as e:
        raise UsageError(f"--across {text!r}: cannot split it into arguments ({e})") from None
    values = tuple(v.strip() for v in split_unquoted(listed, "|"))
    if len(values) < 2:
        raise UsageError(f"--across {text!r}: give at least two argument lists to compare, "
                         "separated by | (args='|--flag' compares without and with --flag)")
    seen: dict[tuple[str, ...], str] = {}
    for value in values:
        args = argument_list(value, text)
        if args in seen:
            raise UsageError(f"--across {text!r}: {seen[args]!r} and {value!r} are the same "
                             "arguments")
        seen[args] = value
    return Axis("args", values)


def parse_axis(text: str) -> Axis:
    """``NAME=A,B[,C]`` as an :class:`Axis`; anything else is a one-line usage error."""
    if not isinstance(text, str) or "=" not in text:
        raise UsageError(f"--across {text!r}: expected AXIS=A,B (axes: {', '.join(AXES)})")
    name, _, listed = text.partition("=")
    name = name.strip()
    if name.startswith("env:"):
        var = name[4:]
        if not _ENV_NAME.fullmatch(var):
            raise UsageError(f"--across {text!r}: {var!r} is not an environment variable name")
        if var.startswith("REPRO_CHECK_") or var == "PYTHONPATH":
            raise UsageError(f"--across {text!r}: {var} is set by repro-check itself")
    elif name not in AXES:
        close = difflib.get_close_matches(name, [a for a in AXES if a != "env:NAME"], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(f"--across: unknown axis {name!r}{hint}; axes: {', '.join(AXES)}")
    if name == "args":
        return parse_args_axis(text, listed)
    values = tuple(v.strip() for v in listed.split(","))
    if any(not v for v in values):
        raise UsageError(f"--across {text!r}: an empty value in the list (write {name}=A,B)")
    if len(values) < 2:
        raise UsageError(f"--across {text!r}: give at least two values to compare ({name}=A,B)")
    axis = Axis(name, values)
    _check_values(axis, text)
    return axis


def _check_values(axis: Axis, text: str) -> None:
    if axis.kind == "compile-cache" and axis.values != CACHE_STATES:
        raise UsageError(f"--across {text!r}: the compile-cache axis is compile-cache=cold,warm "
                         "(the warm runs use the caches the first cold run filled)")
    allowed = {"device": DEVICES, "deterministic": SWITCH, "compile": SWITCH,
               "start": START_METHODS}.get(axis.kind)
    if allowed is not None:
        bad = [v for v in axis.values if v not in allowed]
        if bad:
            raise UsageError(f"--across {text!r}: {bad[0]!r} is not one of {', '.join(allowed)}")
    if axis.kind == "threads":
        for v in axis.values:
            if not v.isdigit() or int(v) < 1:
                raise UsageError(f"--across {text!r}: thread counts are whole numbers from 1, "
                                 f"got {v!r}")
    if axis.kind == "nproc":
        for v in axis.values:
            if not (v.isascii() and v.isdigit()) or not 1 <= int(v) <= MAX_NPROC:
                raise UsageError(f"--across {text!r}: process counts are whole numbers from 1 "
                                 f"to {MAX_NPROC}, got {v!r}")
    if axis.kind == "workers":
        for v in axis.values:
            if not (v.isascii() and v.isdigit()) or len(v) > 4:
                raise UsageError(f"--across {text!r}: worker counts are whole numbers from 0, "
                                 f"got {v!r}")
    if axis.kind == "start":
        import multiprocessing  # only a start= axis asks what this platform has

        have = multiprocessing.get_all_start_methods()
        for v in axis.values:
            if v not in have:
                raise UsageError(f"--across {text!r}: start method {v!r} does not exist on this "
                                 f"platform (it has {', '.join(have)})")


def parse_axes(texts: Iterable[str]) -> tuple[Axis, ...]:
    """Every ``--across`` flag; an axis given twice is an error (a grid has one of each)."""
    axes = tuple(parse_axis(t) for t in texts)
    seen: set[str] = set()
    for axis in axes:
        if axis.name in seen:
            raise UsageError(f"--across {axis.name} is given twice: list all its values in one "
                             f"flag ({axis.name}=A,B,C)")
        seen.add(axis.name)
    if "compile-cache" in seen:
        clash = [v for v in CACHE_VARIABLES if f"env:{v}" in seen]
        if clash:
            raise UsageError(f"--across env:{clash[0]} and compile-cache= both set where the "
                             "compile caches are: give one of them")
    return axes


@dataclass(frozen=True)
class Cell:
    """One environment of the grid: a value of every axis."""

    index: int
    settings: tuple[tuple[Axis, str], ...]

    @property
    def label(self) -> str:
        return ", ".join(f"{axis.name}={shown(axis, value)}" for axis, value in self.settings)

    @property
    def args(self) -> tuple[str, ...]:
        """The arguments an ``args=`` axis appends to the script's own (none without one)."""
        v = self.value("args")
        return tuple(shlex.split(v)) if v else ()

    def value(self, kind: str) -> str | None:
        return next((v for a, v in self.settings if a.kind == kind), None)

    @property
    def warm(self) -> bool:
        """Its runs start from the compile caches its cold twin's first run filled."""
        return self.value("compile-cache") == "warm"

    @property
    def threads(self) -> int | None:
        v = self.value("threads")
        return int(v) if v is not None else None

    @property
    def nproc(self) -> int | None:
        """With an ``nproc=`` axis: the ranks of its torchrun jobs (each run is one job)."""
        v = self.value("nproc")
        return int(v) if v is not None else None

    @property
    def uses_gpu(self) -> bool:
        return self.value("device") == "cuda"

    @property
    def executable(self) -> str | None:
        v = self.value("python")
        return interpreter_path(v) if v is not None else None

    @property
    def deterministic(self) -> bool | None:
        v = self.value("deterministic")
        return None if v is None else v == "on"

    def environment(self) -> dict[str, str]:
        """Variables this cell sets in its runs' environment."""
        env = {a.variable: v for a, v in self.settings if a.variable is not None}
        if self.value("device") == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""  # a script that picks cuda when available runs on CPU
        return env

    def overrides(self) -> dict[str, object]:
        """What this cell imposes inside its runs, as the fields of the run's configuration
        (:class:`~repro_check.trace.protocol.RunConfig`) that carry it to the run
        (:mod:`repro_check.child.seeding.overrides`)."""
        out: dict[str, object] = {}
        if self.value("workers") is not None:
            out["num_workers"] = int(self.value("workers") or 0)
        if self.value("start") is not None:
            out["start_method"] = self.value("start")
        if self.value("compile") is not None:
            out["compile"] = self.value("compile") == "on"
        return out

    def components(self, base: Sequence[str]) -> list[str]:
        """The seeding components of its runs: ``base``, less the deterministic flags when off."""
        if self.deterministic is False:
            return [c for c in base if c not in DETERMINISTIC_COMPONENTS]
        return list(base)

    def settings_dict(self) -> dict[str, str]:
        return {axis.name: value for axis, value in self.settings}


def golden_of_cell(golden: str, cell: Cell) -> str:
    """The golden file of one cell of ``record``/``verify --across``: ``golden`` with the
    cell's values between its stem and suffix (``g.json`` -> ``g.checkpointing.json``; an
    empty argument list ``g.none.json``)."""
    words = [re.sub(r"[^A-Za-z0-9.]+", "_", v).strip("_.") or "none" for _, v in cell.settings]
    path = Path(golden)
    return str(path.with_name(f"{path.stem}.{'.'.join(words)}{path.suffix}"))


def golden_cells(golden: str, texts: Sequence[str]) -> list[tuple[Cell, str]]:
    """The cells of ``record``/``verify --across`` (argument lists only: every other axis
    changes the environment, which a golden does not hold) and each one's golden file; two
    cells whose files would be one are a usage error."""
    axes = parse_axes(texts)
    other = [a.name for a in axes if a.kind != "args"]
    if other:
        raise UsageError(f"record and verify take --across args=A|B only (a golden for each "
                         f"argument list), not {other[0]}=: compare environments with "
                         f"repro-check TARGET --across {other[0]}=...")
    out: list[tuple[Cell, str]] = []
    for cell in grid(axes):
        path = golden_of_cell(golden, cell)
        clash = next((c for c, p in out if p == path), None)
        if clash is not None:
            raise UsageError(f"--across: {clash.label} and {cell.label} would share the golden "
                             f"{path}: give argument lists that differ in letters or digits")
        out.append((cell, path))
    return out


def shown(axis: Axis, value: str) -> str:
    """A value as a cell's label shows it: an empty argument list as ``(none)``."""
    return "(none)" if axis.kind == "args" and not value else value


def grid(axes: Sequence[Axis]) -> list[Cell]:
    """Every combination of the axes' values, the first values first."""
    combos = itertools.product(*[[(a, v) for v in a.values] for a in axes])
    return [Cell(i, tuple(combo)) for i, combo in enumerate(combos, 1)]


def cold_twin(cell: Cell, cells: Sequence[Cell]) -> Cell | None:
    """The cell whose first run fills the compile caches a warm ``cell`` starts from: the same
    settings but ``compile-cache=cold`` (earlier in the grid, cold being the axis's first
    value). None for a cell that is not warm."""
    if not cell.warm:
        return None
    want = tuple((a, "cold" if a.kind == "compile-cache" else v) for a, v in cell.settings)
    return next((c for c in cells if c.settings == want), None)


# ---- what the machine can honour -------------------------------------------------------------
def usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def check_cores(axes: Sequence[Axis], cores: int | None = None) -> None:
    """A thread count above the cores measures the scheduler, not the arithmetic: refused."""
    cores = cores or usable_cores()
    for axis in axes:
        if axis.kind == "threads":
            over = [v for v in axis.values if int(v) > cores]
            if over:
                raise UsageError(f"--across {axis.flag()}: {over[0]} threads, but this machine "
                                 f"has {cores} usable core(s)")


def interpreter_path(value: str) -> str:
    """The interpreter a ``python=`` value names: a file, a virtual environment's folder, or a
    command on PATH (absolute, links kept: a venv's python is a link to its base)."""
    path = Path(value).expanduser()
    if path.is_dir():
        for name in ("bin/python", "Scripts/python.exe"):
            if (path / name).exists():
                return os.path.abspath(path / name)
        return os.path.abspath(path)
    if os.sep not in value and not path.exists():
        found = shutil.which(value)
        if found:
            return found
    return os.path.abspath(path)


#: what an interpreter is asked; with ``gpu`` it imports torch (seconds) to see the GPU, else
#: it only finds torch and reads its version (a fraction of a second)
PROBE = r"""
import importlib.metadata, importlib.util, json, sys
out = {"python": sys.version.split()[0], "executable": sys.executable}
try:
    if sys.argv[1:] == ["gpu"]:
        import torch
        out["torch"] = torch.__version__
        out["cuda"] = torch.version.cuda
        out["cuda_available"] = bool(torch.cuda.is_available())
        out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
    elif importlib.util.find_spec("torch") is None:
        out["torch_error"] = "No module named 'torch'"
    else:
        out["torch"] = importlib.metadata.version("torch")
except Exception as e:
    out["torch_error"] = f"{type(e).__name__}: {e}"
try:
    out["numpy"] = importlib.metadata.version("numpy")
except Exception:
    out["numpy"] = None
try:
    import repro_check
    out["package"] = repro_check.__file__
    import repro_check.child.main, repro_check.child.observe.capture
    from repro_check.trace import fingerprint
    out["fingerprints"] = fingerprint.ALGORITHM
except Exception as e:
    out["package_error"] = f"{type(e).__name__}: {e}"
print("REPRO_CHECK_PROBE " + json.dumps(out))
"""


@dataclass
class Probe:
    """What an interpreter has, as it said itself."""

    executable: str
    facts: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def _probe_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = pathentry.with_package(env.get("PYTHONPATH"))
    return env


def start_probe(executable: str, gpu: bool = False) -> subprocess.Popen[str] | Probe:
    """Start the probe of one interpreter, or the :class:`Probe` of one that cannot start."""
    if not os.path.exists(executable):
        return Probe(executable, error="no such file")
    if os.path.isdir(executable) or not os.access(executable, os.X_OK):
        return Probe(executable, error="not an executable interpreter")
    try:
        return subprocess.Popen([executable, "-c", PROBE, *(["gpu"] if gpu else [])],
                                stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=_probe_env(), start_new_session=True)
    except OSError as e:
        return Probe(executable, error=f"cannot start it ({e.strerror})")


def finish_probe(executable: str, started: subprocess.Popen[str] | Probe) -> Probe:
    if isinstance(started, Probe):
        return started
    try:
        out, _ = started.communicate(timeout=PROBE_TIMEOUT)
    except subprocess.TimeoutExpired:
        started.kill()
        started.communicate()
        return Probe(executable, error=f"it did not answer within {PROBE_TIMEOUT:g} s")
    line = next((ln for ln in out.splitlines() if ln.startswith("REPRO_CHECK_PROBE ")), None)
    if line is None:
        last = out.strip().splitlines()[-1:] or [f"exit status {started.returncode}"]
        return Probe(executable, error=f"it is not a Python that runs ({last[0][:200]})")
    return Probe(executable, json.loads(line.split(" ", 1)[1]))


def probe_all(executables: dict[str, bool]) -> dict[str, Probe]:
    """Probe every interpreter at once (``True``: it must see a GPU, which imports torch)."""
    started = {exe: start_probe(exe, gpu) for exe, gpu in executables.items()}
    return {exe: finish_probe(exe, s) for exe, s in started.items()}


def probe_problem(probe: Probe, needs_gpu: bool, name: str) -> str | None:
    """Why runs cannot start with this interpreter, in one line, or None."""
    what = name if name.endswith(f"={probe.executable}") else f"{name} ({probe.executable})"
    if probe.error is not None:
        return f"{what}: {probe.error}"
    facts = probe.facts
    if "torch_error" in facts:
        return f"{what} cannot import torch: {facts['torch_error']}"
    ours = os.path.join(pathentry.PACKAGE_PARENT, "repro_check")
    found = facts.get("package")
    if found and os.path.dirname(os.path.realpath(found)) != os.path.realpath(ours):
        return f"{what} imports another repro-check ({found}), not this one ({ours})"
    if "package_error" in facts:
        return (f"{what} cannot import repro-check from {pathentry.PACKAGE_PARENT}: "
                f"{facts['package_error']} (install its dependencies there: numpy, xxhash)")
    if facts.get("fingerprints") != fingerprint.ALGORITHM:
        return (f"{what} fingerprints with {facts.get('fingerprints')}, this interpreter with "
                f"{fingerprint.ALGORITHM}: install xxhash there")
    if needs_gpu and not facts.get("cuda_available"):
        why = "a torch built without CUDA" if not facts.get("cuda") else "no GPU visible"
        return (f"device=cuda needs a GPU, but {what} has {why} "
                f"(torch {facts.get('torch')})")
    return None


def check_interpreters(cells: Sequence[Cell]) -> dict[str, Probe]:
    """Probe the interpreters of the cells that need it (a python or device axis): any that
    cannot run its cells is a usage error, before any run."""
    needed: dict[str, tuple[str, bool]] = {}
    for cell in cells:
        if cell.value("python") is None and cell.value("device") is None:
            continue
        exe = cell.executable or sys.executable
        name = f"python={cell.value('python')}" if cell.value("python") else "this interpreter"
        _, gpu = needed.get(exe, (name, False))
        needed[exe] = (name, gpu or cell.uses_gpu)
    if not needed:
        return {}
    probes = probe_all({exe: gpu for exe, (_, gpu) in needed.items()})
    for exe, (name, gpu) in needed.items():
        problem = probe_problem(probes[exe], gpu, name)
        if problem is not None:
            raise UsageError(f"--across {problem}")
    return probes
