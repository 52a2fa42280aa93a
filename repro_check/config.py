"""``[tool.repro-check]`` in pyproject.toml: the project's targets, seed, runs, tolerances and
golden paths, so CI runs ``repro-check verify`` with no arguments.

The file is the first pyproject.toml found from the current folder upward (or ``--config``);
``doctor`` reads the nearest one that has the table, for its ``[tool.repro-check.doctor]``
sub-table. Paths in it are relative to its folder. Command-line flags override it; every bad value
is a :class:`UsageError` of one line (exit 2). The keys are documented in docs/configuration.md
and docs/doctor-codes.md.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro_check.compare.tolerances import ToleranceOptions
from repro_check.doctor_codes import parse_codes
from repro_check.errors import UsageError
from repro_check.run import options

SECTION = "repro-check"
FILENAME = "pyproject.toml"


#: key -> validator of the run settings (:data:`repro_check.run.options.OPTIONS`, where each is
#: listed once); ``record-runs`` is record's ``runs``. Run settings may also be set per target.
RUN_KEYS: dict[str, Any] = {
    **{key: options.CONFIG_KEYS[key].from_config for key in options.TARGET_KEYS},
    "record-runs": options.whole_at_least(1),
}
PATH_KEYS = ("golden", "golden-dir", "trace-dir", "junit", "json")
#: the settings of the whole table that are not run settings of their own
TOLERANCE_KEYS = {spec.key: spec.name for spec in options.OPTIONS
                  if spec.part_of == "tolerances" and spec.key is not None}
KEYS: dict[str, Any] = {
    **RUN_KEYS,
    **{key: spec.from_config for key, spec in options.CONFIG_KEYS.items()},
    "golden": options.text,
    "golden-dir": options.text,
    "junit": options.text,
    "json": options.text,
    "targets": None,
    "doctor": None,
}
TARGET_KEYS = ("target", "golden", *RUN_KEYS)


@dataclass
class TargetEntry:
    """One entry of ``targets``: a TARGET and its own settings (``golden`` made absolute)."""

    target: str
    settings: dict[str, Any] = field(default_factory=dict)
    golden: Path | None = None


@dataclass
class Config:
    """The validated ``[tool.repro-check]`` table (empty when there is none)."""

    path: Path | None = None
    values: dict[str, Any] = field(default_factory=dict)
    targets: list[TargetEntry] = field(default_factory=list)
    tolerances: ToleranceOptions = field(default_factory=ToleranceOptions)
    #: ``[tool.repro-check.doctor] ignore``: the codes ``doctor`` silences for the project
    doctor_ignore: frozenset[str] = frozenset()

    @property
    def root(self) -> Path | None:
        return self.path.parent if self.path is not None else None

    def get(self, key: str, entry: TargetEntry | None = None, default: Any = None) -> Any:
        """A setting: the target entry's own, else the table's, else ``default``."""
        if entry is not None and key in entry.settings:
            return entry.settings[key]
        return self.values.get(key, default)

    def path_of(self, key: str) -> Path | None:
        value = self.values.get(key)
        return value if isinstance(value, Path) else None

    def entry(self, target: str) -> TargetEntry | None:
        return next((e for e in self.targets if e.target == target), None)

    def golden_for(self, target: str, entry: TargetEntry | None = None) -> Path | None:
        """Where the golden trace of ``target`` lives: its entry's ``golden``, else ``golden``
        (when there is at most one target), else ``<golden-dir>/<target as a file name>.json``."""
        entry = entry or self.entry(target)
        if entry is not None and entry.golden is not None:
            return entry.golden
        single = self.path_of("golden")
        if single is not None and len(self.targets) <= 1:
            return single
        folder = self.path_of("golden-dir")
        if folder is not None:
            return folder / f"{slug(target)}.json"
        return None


def slug(target: str) -> str:
    """A file name for a target: ``fixtures/tiny.py:main`` -> ``fixtures-tiny.py-main``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", target).strip("-.") or "target"


def candidates(start: Path | None = None) -> Iterator[Path]:
    """Every pyproject.toml from ``start`` (the current folder) upward, nearest first."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / FILENAME
        if candidate.is_file():
            yield candidate


def find(start: Path | None = None) -> Path | None:
    """The nearest pyproject.toml from ``start`` (the current folder) upward."""
    return next(candidates(start), None)


def _toml_loads(text: str, path: Path) -> dict[str, Any]:
    try:
        import tomllib  # Python 3.11+
    except ImportError:  # pragma: no cover - Python 3.10
        try:
            # tomli: the optional TOML reader of Python 3.10, asked for only here
            import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]
        except ImportError:
            raise UsageError(f"{path}: reading [tool.{SECTION}] needs Python 3.11 or the tomli "
                             "package") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: invalid TOML: {' '.join(str(e).split())}") from None
    except (RecursionError, MemoryError):
        raise UsageError(f"{path}: invalid TOML: nested too deeply to read") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise UsageError(f"{path}: invalid TOML: {' '.join(str(e).split())[:120]}") from None


def _bad(path: Path, key: str, value: Any, why: str) -> UsageError:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return UsageError(f"{path}: [tool.{SECTION}] {key}: {why}, got {shown}")


def _check(path: Path, key: str, value: Any, where: str = "") -> Any:
    validator = KEYS[key]
    try:
        return validator(value)
    except ValueError as e:
        raise _bad(path, f"{where}{key}", value, str(e)) from None
    except UsageError as e:
        raise UsageError(f"{path}: [tool.{SECTION}] {where}{key}: {e}") from None


def _unknown(path: Path, key: str, allowed: Any, where: str = "") -> UsageError:
    close = difflib.get_close_matches(key, list(allowed), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return UsageError(f"{path}: [tool.{SECTION}] unknown key {where}{key!r}{hint}")


def parse(table: Mapping[str, Any], path: Path) -> Config:
    """Validate a ``[tool.repro-check]`` table; ``path`` is the file it came from."""
    root = path.parent
    cfg = Config(path=path)
    if not isinstance(table, Mapping):
        raise UsageError(f"{path}: [tool.{SECTION}] must be a table")
    for key, value in table.items():
        if key not in KEYS:
            raise _unknown(path, key, KEYS)
        if key in ("atol", "rtol", "ulps"):
            try:
                parsed = KEYS[key](value)
            except UsageError as e:
                raise UsageError(f"{path}: [tool.{SECTION}] {e}") from None
            setattr(cfg.tolerances, key, parsed)
        elif key == "targets":
            cfg.targets = _targets(value, path)
        elif key == "doctor":
            cfg.doctor_ignore = _doctor(value, path)
        elif key in TOLERANCE_KEYS:
            field_name = {"band": "use_band"}.get(key, TOLERANCE_KEYS[key])
            setattr(cfg.tolerances, field_name, _check(path, key, value))
        else:
            checked = _check(path, key, value)
            cfg.values[key] = root / checked if key in PATH_KEYS else checked
    return cfg


def _targets(value: Any, path: Path) -> list[TargetEntry]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise _bad(path, "targets", value, "expected a list of targets (strings or tables)")
    out: list[TargetEntry] = []
    for i, item in enumerate(value):
        where = f"targets[{i}]."
        if isinstance(item, str):
            if not item.strip():
                raise _bad(path, f"targets[{i}]", item, "expected a non-empty TARGET")
            out.append(TargetEntry(item))
            continue
        if not isinstance(item, Mapping):
            raise _bad(path, f"targets[{i}]", item, "expected a TARGET string or a table")
        if "target" not in item:
            raise UsageError(f"{path}: [tool.{SECTION}] targets[{i}]: a table needs a 'target'")
        target = item["target"]
        if not isinstance(target, str) or not target.strip():
            raise _bad(path, f"{where}target", target, "expected a non-empty TARGET")
        entry = TargetEntry(target.strip())
        for key, val in item.items():
            if key not in TARGET_KEYS:
                raise _unknown(path, key, TARGET_KEYS, where)
            if key == "target":
                continue
            checked = _check(path, key, val, where)
            if key == "golden":
                entry.golden = path.parent / checked
            else:
                entry.settings[key] = checked
        out.append(entry)
    texts = [e.target for e in out]
    dup = next((t for t in texts if texts.count(t) > 1), None)
    if dup is not None:
        raise _bad(path, "targets", dup, "each target may be listed once")
    return out


def _doctor(value: Any, path: Path) -> frozenset[str]:
    """``[tool.repro-check.doctor]``: only ``ignore``, a list of known codes."""
    if not isinstance(value, Mapping):
        raise UsageError(f"{path}: tool.{SECTION}.doctor must be a table")
    unknown = sorted(set(value) - {"ignore"})
    if unknown:
        raise UsageError(f"{path}: unknown key {unknown[0]!r} in [tool.{SECTION}.doctor] "
                         "(known: ignore)")
    ignore = value.get("ignore", [])
    if not isinstance(ignore, list):
        raise UsageError(f"{path}: tool.{SECTION}.doctor.ignore must be a list of codes, "
                         f"got {ignore!r}")
    return parse_codes(ignore, f"{path}: tool.{SECTION}.doctor.ignore")


def read_table(file: Path) -> Any:
    """The ``[tool.repro-check]`` value of a pyproject.toml as written; None when it has none."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{file}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    if SECTION not in text:  # no need to parse it
        return None
    data = _toml_loads(text, file)
    tool = data.get("tool", {})
    return tool.get(SECTION) if isinstance(tool, Mapping) else None


def load(path: str | Path | None = None, start: Path | None = None, *,
         with_table: bool = False) -> Config:
    """The configuration in ``path`` (or the nearest pyproject.toml); empty when there is none.

    ``with_table`` passes over pyproject.toml files without a ``[tool.repro-check]`` table to the
    nearest that has one (how ``doctor`` finds its settings).
    """
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise UsageError(f"--config {str(file)!r}: no such file")
        found: Iterator[Path] = iter([file])
    else:
        found = candidates(start)
    for file in found:
        table = read_table(file)
        if table is not None:
            return parse(table, file.resolve())
        if not with_table:
            return Config(path=file.resolve())
    return Config()
