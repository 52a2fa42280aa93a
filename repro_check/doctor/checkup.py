"""``repro-check doctor``: the environment, and determinism hazards found by reading the source.

The scan (:mod:`repro_check.doctor.scan`) reads the target's file and the project files it imports with
Python's ``ast``; nothing of the target is imported or run. Each finding has a stable code from
:data:`CODES` (documented in docs/doctor-codes.md) so a team can silence it on its line with
``# repro-check: ignore[RC101]`` or for the whole project in pyproject.toml::

    [tool.repro-check.doctor]
    ignore = ["RC107"]

Only the environment section imports torch, in this process, to read versions and flags.
"""

from __future__ import annotations

import ast
import io
import json
import os
import platform
import re
import sys
import sysconfig
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro_check import targets
from repro_check.errors import ExitCode, UsageError
from repro_check.doctor.scan import Hit, scan_tree


@dataclass(frozen=True)
class Code:
    """One kind of hazard: what it is, why it matters, how to fix it."""

    code: str
    title: str
    why: str
    fix: str


CODES: dict[str, Code] = {c.code: c for c in (
    Code("RC101", "DataLoader workers without a generator or worker_init_fn",
         "Each worker's random streams start from a base seed drawn from torch's global "
         "generator when iteration starts, so they shift with every random number drawn before; "
         "other generators a dataset holds (numpy's default_rng, a library's own RNG) are copied "
         "unchanged into every worker, or rebuilt from OS entropy under the spawn start method.",
         "Pass generator=torch.Generator().manual_seed(SEED) and a worker_init_fn that reseeds "
         "every generator the dataset uses from torch.initial_seed()."),
    Code("RC102", "cudnn.benchmark = True",
         "cuDNN times several convolution kernels on the first batches and keeps the fastest; "
         "the choice depends on timing noise, and different kernels give different bits.",
         "Set torch.backends.cudnn.benchmark = False (repro-check's runs do, unless the script "
         "turns it back on)."),
    Code("RC103", "cudnn.deterministic turned off",
         "cuDNN may then use kernels with atomic adds whose summation order changes from run to "
         "run. torch.backends.cudnn.flags() sets deterministic=False unless told otherwise.",
         "Set torch.backends.cudnn.deterministic = True, and pass deterministic=True to "
         "cudnn.flags()."),
    Code("RC104", "seed taken from the clock or OS entropy",
         "A seed from time.time(), datetime.now(), os.urandom(), uuid4() or the process id is "
         "different in every run (hash() of a string and id() differ between processes too), so "
         "everything it seeds differs, whatever seed repro-check or the user asked for.",
         "Take the seed from a constant or a command-line option, and log it."),
    Code("RC105", "reseeding from a nondeterministic source",
         "torch.seed(), random.seed(), numpy.random.seed() and Generator.seed() without a value "
         "pick a fresh seed from OS entropy or the clock, throwing away the seeding before them.",
         "Pass an explicit seed (torch.manual_seed(SEED), random.seed(SEED)) or remove the call."),
    Code("RC106", "random generator created without a seed",
         "numpy.random.default_rng(), RandomState(), SeedSequence(), the bit generators and "
         "random.Random() without a seed start from OS entropy; seeding the global generators "
         "(what repro-check does) does not reach them.",
         "Pass a seed: numpy.random.default_rng(SEED), random.Random(SEED)."),
    Code("RC107", "iteration over a set decides an order",
         "A set iterates in hash order. Strings hash differently in every process unless "
         "PYTHONHASHSEED is fixed (repro-check's runs fix it, a plain `python train.py` does not), "
         "and objects hash by memory address; data order, vocabulary ids or layer order built "
         "from the loop change with it.",
         "Iterate over sorted(the_set), or keep the items in a list or dict, which keep "
         "insertion order."),
    Code("RC108", "op with no deterministic CUDA implementation",
         "PyTorch lists this op (in the form shown) as nondeterministic on CUDA, usually through "
         "atomic adds in its backward pass; with torch.use_deterministic_algorithms(True), which "
         "repro-check's runs turn on, it raises RuntimeError instead of running.",
         "Use an equivalent with a deterministic implementation (e.g. mode='nearest', "
         "AvgPool2d with a fixed kernel, padding_mode='replicate', a CPU computation for "
         "histc/bincount), or accept run-to-run differences on CUDA."),
    Code("RC109", "op nondeterministic on CUDA unless deterministic algorithms are on",
         "PyTorch lists this op as nondeterministic on CUDA (atomic adds, so the summation order "
         "changes between runs); it switches to a deterministic implementation only under "
         "torch.use_deterministic_algorithms(True).",
         "Call torch.use_deterministic_algorithms(True) (and set "
         "CUBLAS_WORKSPACE_CONFIG=:4096:8) in every run that must reproduce."),
    Code("RC110", "deterministic algorithms turned off or warn-only",
         "The script turns off what makes PyTorch raise on nondeterministic ops, overriding "
         "repro-check's setting; with warn_only=True such ops still run nondeterministically.",
         "Remove the call, or call torch.use_deterministic_algorithms(True) without warn_only."),
    Code("RC111", "OS entropy used directly",
         "os.urandom(), the secrets module and random.SystemRandom read the operating system's "
         "entropy pool, which no seed controls; whatever they feed differs in every run.",
         "Draw from a seeded generator (random.Random(SEED), numpy.random.default_rng(SEED))."),
    Code("RC112", "DataLoader(in_order=False)",
         "With in_order=False the loader yields batches in the order worker processes finish "
         "them, which depends on scheduling.",
         "Leave in_order at its default, True."),
    Code("RC113", "directory listing iterated unsorted",
         "os.listdir(), os.scandir(), glob.glob() and Path.glob()/iterdir() return entries in "
         "file-system order, which differs between machines, file systems and copies of the "
         "data set; data order and label ids built from it change with it.",
         "Iterate over sorted(...) of the listing."),
)}

#: the comment that silences findings on its line: ``ignore`` alone silences every code
IGNORE_COMMENT = re.compile(r"\brepro-check:\s*ignore\b(?:\[(?P<codes>[^\]]*)\])?",
                            re.IGNORECASE)
ALL = "*"

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "OMP_DYNAMIC", "MKL_DYNAMIC")
DETERMINISM_VARIABLES = ("PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "CUDA_VISIBLE_DEVICES",
                         "CUDA_LAUNCH_BLOCKING")


@dataclass(frozen=True)
class Finding:
    """A hazard at a place in a file; ``end_line`` is the last line of the code it points at."""

    code: str
    file: str
    line: int
    message: str
    end_line: int = 0

    @property
    def why(self) -> str:
        return CODES[self.code].why

    @property
    def fix(self) -> str:
        return CODES[self.code].fix

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "file": self.file, "line": self.line, "message": self.message,
                "why": self.why, "fix": self.fix}


@dataclass
class DoctorReport:
    """What ``repro-check doctor`` found; ``findings`` are the ones left after silencing."""

    target: str | None
    environment: dict[str, Any] | None
    findings: list[Finding] = field(default_factory=list)
    silenced: list[tuple[Finding, str]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    config: str | None = None

    @property
    def clean(self) -> bool:
        return not self.findings

    @property
    def exit_code(self) -> ExitCode:
        """0 when nothing is left to fix, 1 when a finding remains (the codes ``check`` uses)."""
        return ExitCode.REPRODUCIBLE if self.clean else ExitCode.NOT_REPRODUCIBLE

    def to_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "findings": [f.to_dict() for f in self.findings],
            "clean": self.clean,
            "target": self.target,
            "files": self.files,
            "silenced": [{"code": f.code, "file": f.file, "line": f.line, "by": by}
                         for f, by in self.silenced],
            "skipped": self.skipped,
            "warnings": self.warnings,
            "config": self.config,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str) + "\n"


# ---- codes and configuration ----------------------------------------------------------------

def parse_codes(values: Iterable[Any], where: str) -> frozenset[str]:
    """Validate codes given by a user; an unknown one is a usage error naming where it came from."""
    out: set[str] = set()
    for v in values:
        if not isinstance(v, str):
            raise UsageError(f"{where}: expected codes like \"RC101\", got {v!r}")
        code = v.strip().upper()
        if code not in CODES:
            hint = f" (did you mean 'RC{code}'?)" if f"RC{code}" in CODES else ""
            raise UsageError(f"{where}: unknown code {v!r}{hint}; codes: "
                             f"{', '.join(CODES)}")
        out.add(code)
    return frozenset(out)


@dataclass(frozen=True)
class Config:
    """``[tool.repro-check.doctor]`` of the nearest pyproject.toml that has a repro-check table."""

    ignore: frozenset[str] = frozenset()
    source: str | None = None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            raise UsageError(f"reading {path} needs Python 3.11 or the tomli package") from None
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: not valid TOML: {' '.join(str(e).split())}") from None
    except (ValueError, RecursionError, MemoryError) as e:  # too deep, or a too-long integer
        why = "nested too deeply" if not isinstance(e, ValueError) else " ".join(str(e).split())
        raise UsageError(f"{path}: not valid TOML: {why[:120]}") from None


def load_config(start: str | os.PathLike[str] | None = None) -> Config:
    """The doctor settings from the nearest pyproject.toml (from ``start``, default cwd, upward)."""
    here = Path(start or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        path = folder / "pyproject.toml"
        if not path.is_file():
            continue
        data = _read_toml(path)
        tool = data.get("tool", {})
        if not isinstance(tool, dict) or "repro-check" not in tool:
            continue
        section = tool["repro-check"]
        if not isinstance(section, dict):
            raise UsageError(f"{path}: [tool.repro-check] must be a table")
        doctor = section.get("doctor", {})
        if not isinstance(doctor, dict):
            raise UsageError(f"{path}: tool.repro-check.doctor must be a table")
        unknown = sorted(set(doctor) - {"ignore"})
        if unknown:
            raise UsageError(f"{path}: unknown key {unknown[0]!r} in [tool.repro-check.doctor] "
                             "(known: ignore)")
        ignore = doctor.get("ignore", [])
        if not isinstance(ignore, list):
            raise UsageError(f"{path}: tool.repro-check.doctor.ignore must be a list of codes, "
                             f"got {ignore!r}")
        return Config(parse_codes(ignore, f"{path}: tool.repro-check.doctor.ignore"), str(path))
    return Config()


def ignore_comments(source: bytes) -> tuple[dict[int, set[str]], list[tuple[int, str]]]:
    """Line -> codes silenced there (ALL for a bare ``ignore``), and unknown codes with their line."""
    lines: dict[int, set[str]] = {}
    unknown: list[tuple[int, str]] = []
    try:
        tokens = list(tokenize.tokenize(io.BytesIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return lines, unknown
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        m = IGNORE_COMMENT.search(tok.string)
        if not m:
            continue
        codes = m.group("codes")
        line = tok.start[0]
        if codes is None:
            lines.setdefault(line, set()).add(ALL)
            continue
        for c in (c.strip().upper() for c in codes.split(",")):
            if c in CODES:
                lines.setdefault(line, set()).add(c)
            elif c:
                unknown.append((line, c))
    return lines, unknown


# ---- which files ------------------------------------------------------------------------------

def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    return tuple(sorted({str(Path(paths[k]).resolve()) + os.sep for k in names if paths.get(k)}))


def is_project_file(path: Path) -> bool:
    """A Python file of the user's, not of the standard library or an installed package."""
    resolved = str(path.resolve())
    parts = set(Path(resolved).parts)
    if "site-packages" in parts or "dist-packages" in parts:
        return False
    return path.suffix == ".py" and not resolved.startswith(_library_dirs())


def _resolve(parts: Sequence[str], bases: Sequence[Path]) -> list[Path]:
    """The files importing ``a.b.c`` from these folders runs: each package ``__init__``, the module."""
    if not parts or not all(p.isidentifier() for p in parts):
        return []
    for base in bases:
        out: list[Path] = []
        here = base
        for i, part in enumerate(parts):
            package, module = here / part, here / f"{part}.py"
            if (package / "__init__.py").is_file():
                out.append(package / "__init__.py")
                here = package
            elif module.is_file():
                out.append(module)
                break  # the rest are attributes of a module
            elif package.is_dir():
                here = package  # namespace package
            else:
                break
        else:
            i = len(parts)
        if out or (i > 0):
            return out
    return []


def _imported_files(path: Path, imports: Iterable[tuple[int, str, tuple[str, ...]]],
                    roots: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    for level, module, names in imports:
        parts = module.split(".") if module else []
        if level:
            base = path.parent
            for _ in range(level - 1):
                base = base.parent
            bases = [base]
        else:
            bases = list(roots)
        if parts:
            out += _resolve(parts, bases)
        elif level and (bases[0] / "__init__.py").is_file():
            out.append(bases[0] / "__init__.py")
        for name in names:  # from a.b import c: c may be a submodule
            found = _resolve([*parts, name], bases)
            if found and (found[-1].stem == name or found[-1].parent.name == name):
                out.append(found[-1])
    return out


def target_files(target: targets.Target) -> tuple[list[Path], list[dict[str, str]]]:
    """The files the TARGET itself runs first (a module, a package's ``__main__``)."""
    if target.path is not None:
        return [Path(target.path)], []
    assert target.module is not None
    spec = targets.find_module(target.module, targets.search_path(os.getcwd()))
    origin = spec.origin
    files: list[Path] = []
    if origin and origin.endswith(".py"):
        files.append(Path(origin))
    if target.kind == "module" and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            main = Path(loc) / "__main__.py"
            if main.is_file():
                files.append(main)
                break
    if not files:
        return [], [{"file": str(origin or target.module),
                     "reason": "not Python source (nothing to read)"}]
    return files, []


# ---- the environment --------------------------------------------------------------------------

def environment() -> dict[str, Any]:
    """Versions, devices, threads, the variables that set them and the determinism flags."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "hash_randomization": bool(sys.flags.hash_randomization),
    }
    try:
        import numpy

        env["numpy"] = numpy.__version__
    except Exception:  # noqa: BLE001 - a broken install is reported as missing
        env["numpy"] = None
    cpus = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    env["cpus"] = {"count": cpus, "usable": usable}
    env["variables"] = {name: os.environ.get(name)
                        for name in (*THREAD_VARIABLES, *DETERMINISM_VARIABLES)}
    try:
        import torch
    except Exception:  # noqa: BLE001 - torch missing or broken: the scan still works
        env.update(torch=None, cuda=None, cudnn=None, devices=[], threads=None, flags=None)
        return env
    env["torch"] = torch.__version__
    env["cuda"] = torch.version.cuda
    env["cudnn"] = _quiet(lambda: torch.backends.cudnn.version())
    env["cuda_available"] = bool(_quiet(torch.cuda.is_available))
    devices: list[dict[str, Any]] = []
    if env["cuda_available"]:
        for i in range(_quiet(torch.cuda.device_count) or 0):
            capability = _quiet(lambda: torch.cuda.get_device_capability(i))
            devices.append({"index": i, "type": "cuda",
                            "name": _quiet(lambda: torch.cuda.get_device_name(i)),
                            "capability": "{}.{}".format(*capability) if capability else None})
    if bool(_quiet(lambda: torch.backends.mps.is_available())):
        devices.append({"index": 0, "type": "mps", "name": "Apple MPS"})
    devices.append({"type": "cpu", "name": platform.processor() or platform.machine()})
    env["devices"] = devices
    env["threads"] = {"intra_op": torch.get_num_threads(),
                      "inter_op": torch.get_num_interop_threads()}
    env["flags"] = {
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_enabled": bool(torch.backends.cudnn.enabled),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cuda_matmul_allow_tf32": _quiet(lambda: bool(torch.backends.cuda.matmul.allow_tf32)),
        "cudnn_allow_tf32": _quiet(lambda: bool(torch.backends.cudnn.allow_tf32)),
        "float32_matmul_precision": _quiet(torch.get_float32_matmul_precision),
    }
    return env


def _quiet(fn: Any) -> Any:
    """A value that some builds cannot give (no CUDA libraries): None instead of an error."""
    try:
        return fn()
    except Exception:  # noqa: BLE001
        return None


def notes(env: dict[str, Any]) -> dict[str, str]:
    """Short remarks on environment values that matter when running outside repro-check."""
    out: dict[str, str] = {}
    variables = env.get("variables") or {}
    if variables.get("PYTHONHASHSEED") in (None, "random"):
        out["PYTHONHASHSEED"] = "string hashing differs in every process (repro-check's runs fix it)"
    if env.get("cuda_available") and not variables.get("CUBLAS_WORKSPACE_CONFIG"):
        out["CUBLAS_WORKSPACE_CONFIG"] = ("unset: cuBLAS is nondeterministic on CUDA >= 10.2 "
                                          "(repro-check's runs set :4096:8)")
    if not any(variables.get(v) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")):
        out["threads"] = "thread count follows the machine; a different count changes CPU bits"
    flags = env.get("flags") or {}
    if flags and not flags.get("deterministic_algorithms"):
        out["flags"] = "deterministic algorithms are off here (repro-check's runs turn them on)"
    return out


# ---- the scan ---------------------------------------------------------------------------------

def display_path(path: Path) -> str:
    """Relative to the current folder when inside it, so reports read like the user's paths."""
    resolved = path.resolve()
    try:
        return str(resolved.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(resolved)


def scan_file(path: Path) -> tuple[list[Hit], list[tuple[int, str, tuple[str, ...]]], bytes]:
    """Hazards and imports of one file; raises SyntaxError/ValueError/OSError when unreadable."""
    source = path.read_bytes()
    tree = ast.parse(source, filename=str(path))
    hits, imports = scan_tree(tree)
    return hits, imports, source


def scan_source(source: str, filename: str = "<source>") -> list[Finding]:
    """The findings in a piece of source, comments applied (for tests and editors)."""
    data = source.encode()
    hits, _ = scan_tree(ast.parse(data, filename=filename))
    silenced, _ = ignore_comments(data)
    return [Finding(h.code, filename, h.line, h.message, h.end_line) for h in hits
            if not _comment_silences(silenced, h)]


def _comment_silences(lines: dict[int, set[str]], hit: Hit) -> bool:
    for line in range(hit.line, hit.end_line + 1):
        codes = lines.get(line, ())
        if ALL in codes or hit.code in codes:
            return True
    return False


def scan(target: targets.Target, report: DoctorReport, ignore: frozenset[str],
         option_ignore: frozenset[str] = frozenset()) -> None:
    """Scan the target's files and every project file they import, into ``report``."""
    first, skipped = target_files(target)
    report.skipped += skipped
    roots: list[Path] = []
    for root in (Path(target.search_dir), Path.cwd()):
        if root.resolve() not in roots:
            roots.append(root.resolve())
    queue = [p.resolve() for p in first]
    seen: set[Path] = set(queue)
    while queue:
        path = queue.pop(0)
        shown = display_path(path)
        try:
            hits, imports, source = scan_file(path)
        except (SyntaxError, ValueError, OSError, UnicodeDecodeError, RecursionError,
                MemoryError) as e:
            # RecursionError, MemoryError: nested too deeply for the parser (or for the scan)
            deep = "nested too deeply to parse" if isinstance(e, (RecursionError, MemoryError)) \
                else None
            if path in (p.resolve() for p in first):
                where = f" (line {e.lineno})" if isinstance(e, SyntaxError) and e.lineno else ""
                why = deep or getattr(e, "msg", None) or getattr(e, "strerror", None) or e
                raise UsageError(f"cannot read {shown}{where}: {why}") from None
            report.skipped.append({"file": shown, "reason": deep or f"{type(e).__name__}: {e}"})
            continue
        report.files.append(shown)
        comments, unknown = ignore_comments(source)
        for line, code in unknown:
            report.warnings.append(f"{shown}:{line}: unknown code {code!r} in an ignore comment")
        for h in hits:
            f = Finding(h.code, shown, h.line, h.message, h.end_line)
            if _comment_silences(comments, h):
                report.silenced.append((f, "comment"))
            elif h.code in option_ignore:
                report.silenced.append((f, "option"))
            elif h.code in ignore:
                report.silenced.append((f, "config"))
            else:
                report.findings.append(f)
        for dep in _imported_files(path, imports, roots):
            dep = dep.resolve()
            if dep not in seen and is_project_file(dep):
                seen.add(dep)
                queue.append(dep)


def doctor(target: str | None = None, *, ignore: Iterable[str] = (),
           env: bool = True) -> DoctorReport:
    """The environment (when ``env``) and, with a TARGET, the static scan of its source.

    Raises :class:`~repro_check.errors.UsageError` (exit 2) for an unresolvable TARGET, a
    target file that is not Python, a bad ``--ignore`` code or a bad pyproject.toml setting.
    """
    option_ignore = parse_codes(ignore, "--ignore")
    tgt = None
    if target is not None:
        tgt = targets.parse(target)
        targets.check(tgt)
    config = load_config()
    report = DoctorReport(target=target, environment=None, config=config.source)
    if tgt is not None:
        scan(tgt, report, config.ignore, option_ignore)
    if env:
        report.environment = environment()
    return report


# ---- output -----------------------------------------------------------------------------------

def _show(v: Any) -> str:
    return "(unset)" if v is None else str(v)


def environment_table(env: dict[str, Any]) -> Any:
    """The environment as a two-column rich table, with remarks below it."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    t = Table(title="Environment", title_justify="left", box=box.SIMPLE, show_edge=False,
              show_header=False, pad_edge=False)
    t.add_column("setting", style="bold", no_wrap=True)
    t.add_column("value", overflow="fold")
    t.add_row("python", f"{env['python']} ({env['implementation']})")
    t.add_row("executable", env["executable"])
    t.add_row("platform", env["platform"])
    t.add_row("torch", _show(env.get("torch")))
    if env.get("torch"):
        t.add_row("CUDA", f"{_show(env.get('cuda'))} (available: "
                          f"{'yes' if env.get('cuda_available') else 'no'})")
        t.add_row("cuDNN", _show(env.get("cudnn")))
    t.add_row("numpy", _show(env.get("numpy")))
    for d in env.get("devices") or []:
        name = f"{d['type']}:{d['index']}" if "index" in d else d["type"]
        cap = f" (compute capability {d['capability']})" if d.get("capability") else ""
        t.add_row("device", f"{name} {d['name']}{cap}")
    cpus = env.get("cpus") or {}
    t.add_row("CPUs", f"{cpus.get('usable')} usable of {cpus.get('count')}")
    threads = env.get("threads")
    if threads:
        t.add_row("torch threads", f"intra-op {threads['intra_op']}, inter-op {threads['inter_op']}")
    for name, value in (env.get("variables") or {}).items():
        t.add_row(name, _show(value))
    t.add_row("hash randomization", "on" if env.get("hash_randomization") else "off")
    for name, value in (env.get("flags") or {}).items():
        t.add_row(name, _show(value))
    remarks = [Text(f"note: {k}: {v}", style="dim") for k, v in notes(env).items()]
    return Group(t, *remarks)


def summary(report: DoctorReport) -> Any:
    """The report as rich renderables: environment, findings, one verdict line."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.text import Text

    parts: list[Any] = []
    if report.environment is not None:
        parts += [environment_table(report.environment), Text("")]
    if report.target is None:
        return Group(*parts)
    for f in report.findings:
        parts.append(Text.assemble((f"{f.file}:{f.line}", "bold"), "  ", (f.code, "bold red"),
                                   "  ", f.message))
        parts.append(Padding(Text.assemble(("why: ", "bold"), f.why), (0, 0, 0, 4)))
        parts.append(Padding(Text.assemble(("fix: ", "bold"), f.fix), (0, 0, 0, 4)))
    for s in report.skipped:
        parts.append(Text(f"skipped {s['file']}: {s['reason']}", style="yellow"))
    for w in report.warnings:
        parts.append(Text(f"warning: {w}", style="yellow"))
    n = len(report.files)
    scanned = f"{n} file{'s' if n != 1 else ''} scanned"
    quiet = f", {len(report.silenced)} silenced" if report.silenced else ""
    if report.findings:
        k = len(report.findings)
        parts.append(Text.assemble(
            (f"{k} hazard{'s' if k != 1 else ''} found", "bold red"),
            f" in {report.target} ({scanned}{quiet}). Silence one with "
            "`# repro-check: ignore[CODE]` on its line, or for the project with "
            "[tool.repro-check.doctor] ignore = [\"CODE\"] in pyproject.toml."))
    else:
        parts.append(Text.assemble(("No hazards found", "bold green"),
                                   f" in {report.target} ({scanned}{quiet})."))
    return Group(*parts)


def print_summary(report: DoctorReport, console: Any = None) -> None:
    from repro_check.report.terminal import make_console

    (console or make_console(file=sys.stdout)).print(summary(report))
