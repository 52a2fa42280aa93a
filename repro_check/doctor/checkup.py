"""``repro-check doctor``: the environment, and determinism hazards found by reading the source.

The scan (:mod:`repro_check.doctor.scan`) reads the target's file and the project files it imports
with Python's ``ast``; nothing of the target is imported or run. Each finding has a stable code
from :data:`~repro_check.doctor_codes.CODES` (documented in docs/doctor-codes.md) so a team can
silence it on its line with ``# repro-check: ignore[RC101]`` or for the whole project in
pyproject.toml (read by :mod:`repro_check.config`)::

    [tool.repro-check.doctor]
    ignore = ["RC107"]

Only the environment section imports torch, in this process, to read versions and flags.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import sys
import sysconfig
import tokenize
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from repro_check import config, targets
from repro_check.trace.environment import collect
from repro_check.errors import ExitCode, UsageError
from repro_check.doctor_codes import CODES, parse_codes
from repro_check.doctor.scan import FileScan, Hit, program_hits, scan_tree
from repro_check.trace.jsonfields import JsonRecord, json_field


#: the comment that silences findings on its line: ``ignore`` alone silences every code
IGNORE_COMMENT = re.compile(r"\brepro-check:\s*ignore\b(?:\[(?P<codes>[^\]]*)\])?",
                            re.IGNORECASE)
ALL = "*"


@dataclass(frozen=True)
class Finding(JsonRecord):
    """A hazard at a place in a file; ``end_line`` is the last line of the code it points at
    (not in the JSON, which has why and how to fix it instead)."""

    JSON_PROPERTIES = ("why", "fix")

    code: str
    file: str
    line: int
    message: str
    end_line: int = json_field(default=0, skip=True)

    @property
    def why(self) -> str:
        return CODES[self.code].why

    @property
    def fix(self) -> str:
        return CODES[self.code].fix


def _silenced_json(silenced: list[tuple[Finding, str]]) -> list[dict[str, Any]]:
    return [{"code": f.code, "file": f.file, "line": f.line, "by": by} for f, by in silenced]


@dataclass
class DoctorReport(JsonRecord):
    """What ``repro-check doctor`` found; ``findings`` are the ones left after silencing. Its
    JSON (``--json``) is written from its fields, then ``clean``."""

    JSON_PROPERTIES = ("clean",)

    #: the environment table's entries (None with ``--no-env``)
    environment: dict[str, Any] | None = None
    findings: list[Finding] = field(default_factory=list)
    #: the TARGET, or the TARGETs joined with ", " when several were scanned
    target: str | None = None
    files: list[str] = field(default_factory=list)
    #: each silenced finding and what silenced it (comment, option, config)
    silenced: list[tuple[Finding, str]] = json_field(default_factory=list, convert=_silenced_json)
    skipped: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    config: str | None = None
    #: every TARGET scanned, each as a program of its own (a pre-commit hook passes the
    #: changed files)
    targets: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.findings

    @property
    def exit_code(self) -> ExitCode:
        """0 when nothing is left to fix, 1 when a finding remains (the codes ``check`` uses)."""
        return ExitCode.REPRODUCIBLE if self.clean else ExitCode.NOT_REPRODUCIBLE

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str) + "\n"


# ---- comments that silence findings ----------------------------------------------------------

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
    facts = collect()
    env: dict[str, Any] = {
        "python": facts.python,
        "implementation": facts.implementation,
        "executable": facts.executable,
        "platform": facts.platform,
        "hash_randomization": facts.hash_randomization,
        "numpy": facts.numpy,
        "cpus": {"count": facts.cpu_count, "usable": facts.usable_cpus},
        "variables": dict(facts.variables),
        #: the set variables that decide GPU numerics (NCCL_*, NVTE_*, CUBLAS_*, ...)
        "numerics_variables": dict(facts.numerics),
    }
    if facts.torch is None:  # the scan still works
        env.update(torch=None, cuda=None, cudnn=None, devices=[], threads=None, flags=None)
        return env
    env["torch"] = facts.torch
    env["cuda"] = facts.cuda
    env["cudnn"] = facts.cudnn
    env["nccl"] = facts.nccl
    env["cublas"] = facts.cublas
    env["cuda_available"] = facts.cuda_available
    devices: list[dict[str, Any]] = [
        {"index": i, "type": "cuda", "name": name, "capability": capability}
        for i, (name, capability) in enumerate(facts.cuda_devices)]
    if facts.mps_available:
        devices.append({"index": 0, "type": "mps", "name": "Apple MPS"})
    devices.append({"type": "cpu", "name": facts.processor})
    env["devices"] = devices
    env["threads"] = {"intra_op": facts.threads, "inter_op": facts.interop_threads}
    env["flags"] = dict(facts.flags)
    return env


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


def scan_file(path: Path) -> tuple[FileScan, bytes]:
    """The scan of one file and its source; raises SyntaxError, ValueError or OSError when the
    file cannot be read."""
    source = path.read_bytes()
    return scan_tree(ast.parse(source, filename=str(path))), source


def scan_source(source: str, filename: str = "<source>") -> list[Finding]:
    """The findings in a piece of source taken as the whole program, comments applied (for
    tests and editors)."""
    data = source.encode()
    hits = program_hits([scan_tree(ast.parse(data, filename=filename))])[0]
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
    read: list[tuple[str, FileScan, dict[int, set[str]]]] = []
    while queue:
        path = queue.pop(0)
        shown = display_path(path)
        try:
            scanned, source = scan_file(path)
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
        read.append((shown, scanned, comments))
        for dep in _imported_files(path, scanned.imports, roots):
            dep = dep.resolve()
            if dep not in seen and is_project_file(dep):
                seen.add(dep)
                queue.append(dep)
    # what holds depends on every file read: is torch seeded anywhere, does anything train
    for (shown, _, comments), hits in zip(read, program_hits([r[1] for r in read])):
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


class ProjectSettings(Protocol):
    """What ``doctor`` takes from the project's pyproject.toml (a :class:`repro_check.config.Config`:
    the front end reads it, so that this package never imports the configuration's)."""

    @property
    def path(self) -> Path | None: ...

    @property
    def doctor_ignore(self) -> frozenset[str]: ...


def doctor(target: str | Sequence[str] | None = None, *, ignore: Iterable[str] = (),
           env: bool = True, project: Callable[[], ProjectSettings] | None = None) -> DoctorReport:
    """The environment (when ``env``) and, with a TARGET (or several), the static scan of its
    source; each TARGET is a program of its own, and a finding in a file that two of them read
    is listed once. ``project`` reads the project's settings (after the TARGETs are checked:
    their errors first; by default the nearest pyproject.toml with a ``[tool.repro-check]``
    table).

    Raises :class:`~repro_check.errors.UsageError` (exit 2) for an unresolvable TARGET, a
    target file that is not Python, a bad ``--ignore`` code or a bad pyproject.toml setting.
    """
    option_ignore = parse_codes(ignore, "--ignore")
    names = [target] if isinstance(target, str) else list(target or [])
    parsed = []
    for name in names:
        tgt = targets.parse(name)
        targets.check(tgt)
        parsed.append(tgt)
    settings = project() if project is not None else config.load(with_table=True)
    source = str(settings.path) if settings is not None and settings.path is not None else None
    report = DoctorReport(target=", ".join(names) if names else None, environment=None,
                          config=source, targets=names)
    silence = settings.doctor_ignore if settings is not None else frozenset()
    for tgt in parsed:
        scan(tgt, report, silence, option_ignore)
    if len(parsed) > 1:
        merge_programs(report)
    if env:
        report.environment = environment()
    return report


def merge_programs(report: DoctorReport) -> None:
    """Several programs scanned into one report: each file, finding and note once."""
    report.files = list(dict.fromkeys(report.files))
    report.findings = list({(f.code, f.file, f.line): f for f in report.findings}.values())
    report.silenced = list({(f.code, f.file, f.line): (f, by)
                            for f, by in report.silenced}.values())
    report.skipped = list({s["file"]: s for s in report.skipped}.values())
    report.warnings = list(dict.fromkeys(report.warnings))


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
        if env.get("nccl") or env.get("cublas"):
            t.add_row("NCCL, cuBLAS", f"{_show(env.get('nccl'))}, {_show(env.get('cublas'))}")
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
    for name, value in (env.get("numerics_variables") or {}).items():
        if name not in (env.get("variables") or {}):
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
    # findings of one code share their why and fix: each place is listed, then the two once
    # (ten identical findings are not ten copies of the same paragraph)
    by_code: dict[str, list[Finding]] = {}
    for f in report.findings:
        by_code.setdefault(f.code, []).append(f)
    for group in by_code.values():
        for f in group:
            parts.append(Text.assemble((f"{f.file}:{f.line}", "bold"), "  ",
                                       (f.code, "bold red"), "  ", f.message))
        f = group[0]
        also = f" (all {len(group)} above)" if len(group) > 1 else ""
        parts.append(Padding(Text.assemble(("why: ", "bold"), f.why, also), (0, 0, 0, 4)))
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

    # rich and the renderers: loaded only to print
    from repro_check.report.text import Visible

    (console or make_console(file=sys.stdout)).print(Visible(summary(report)))
