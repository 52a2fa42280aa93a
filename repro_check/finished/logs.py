"""Scalar logs of two finished runs, read and compared scalar by scalar, step by step.

Each reader turns a log into one shape, :class:`ScalarLog` (every scalar's value at each step,
in the order the scalars first appear), so that one comparison serves every format. Values are
Python floats compared by their float64 bits (NaN equals NaN of the same bits): a log written
by the same code from the same numbers holds the same text or the same float32, so any other
difference is a difference of the runs. A step logged on one side only is a difference too (one
run stopped early, or logged at other steps).
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro_check.compare.series import Thinned
from repro_check.compare.steps import Policy
from repro_check.errors import UsageError
from repro_check.finished import detect
from repro_check.trace import values
from repro_check.trace.jsonfields import JsonRecord, json_field

#: points of each scalar's |A - B| kept for the sparkline
SPARK_POINTS = 256


@dataclass
class ScalarLog:
    """Every scalar of one log: ``scalars[name][step] = value`` (a step logged twice keeps its
    last value, as a resumed TensorBoard run shows it)."""

    path: str
    format: str
    scalars: dict[str, dict[int, float]] = field(default_factory=dict)

    def put(self, name: str, step: int, value: float) -> None:
        self.scalars.setdefault(name, {})[step] = value


def _readable(x: float | None) -> float | str | None:
    """A float as the JSON report holds it (NaN and the infinities as strings)."""
    return None if x is None else values.readable_float(x)


@dataclass
class ScalarDiff(JsonRecord):
    """One scalar of both logs: where it first differs (its values there, or the side that has
    no value at that step), how far apart it gets and where, how far apart it ends, and the
    steps it has on one side only."""

    name: str
    steps_compared: int = 0
    first_divergent_step: int | None = None
    #: ``value`` (both logged it, the values differ) or ``only_in_a`` / ``only_in_b``
    first_reason: str | None = None
    a_value: float | None = json_field(default=None, convert=_readable)
    b_value: float | None = json_field(default=None, convert=_readable)
    differing_steps: int = 0
    max_abs_diff: float | None = json_field(default=None, convert=_readable)
    max_abs_step: int | None = None
    final_abs_diff: float | None = json_field(default=None, convert=_readable)
    final_step: int | None = None
    steps_only_in_a: int = 0
    steps_only_in_b: int = 0
    #: |A - B| at each step both logged, thinned by peaks (the sparkline; not in the JSON)
    drift: list[tuple[int, float]] = json_field(default_factory=list, skip=True)

    @property
    def same(self) -> bool:
        return self.first_divergent_step is None

    JSON_PROPERTIES = ("same",)


@dataclass
class LogsDiff(JsonRecord):
    """Two scalar logs compared: each scalar both have, the scalars one side has alone, the
    timing figures left out, and the first step and scalar where the runs part."""

    format: str
    scalars: list[ScalarDiff] = field(default_factory=list)
    scalars_only_in_a: list[str] = field(default_factory=list)
    scalars_only_in_b: list[str] = field(default_factory=list)
    #: timing and memory figures (``train_runtime``), which differ in every run: not compared
    scalars_skipped: list[str] = field(default_factory=list)
    tolerance: str = "exact bits"

    @property
    def first(self) -> ScalarDiff | None:
        """The scalar that differs first: the lowest first divergent step, ties in A's order."""
        differing = [s for s in self.scalars if not s.same]
        return min(differing, key=lambda s: s.first_divergent_step or 0) if differing else None

    @property
    def first_divergent_step(self) -> int | None:
        first = self.first
        return first.first_divergent_step if first else None

    @property
    def first_divergent_scalar(self) -> str | None:
        first = self.first
        return first.name if first else None

    @property
    def same(self) -> bool:
        return self.first is None and not self.scalars_only_in_a and not self.scalars_only_in_b

    JSON_PROPERTIES = ("same", "first_divergent_step", "first_divergent_scalar")


def _bits(x: float) -> dict[str, Any]:
    return values.encode_float64(x)


def tolerance_for(policy: Policy, name: str) -> values.Tolerance:
    """A scalar's tolerance: ``--atol NAME=`` when NAME is a signal (``loss``), else
    ``--atol metric:NAME=`` (a log's scalars are the run's metrics), else the default."""
    if name in policy.per_name:
        return policy.per_name[name]
    return policy.for_name(f"metric:{name}")


def compare_scalar(name: str, a: dict[int, float], b: dict[int, float],
                   tol: values.Tolerance) -> ScalarDiff:
    """One scalar of both logs, over the steps either logged, in order."""
    out = ScalarDiff(name)
    drift = Thinned(SPARK_POINTS, peaks=True)
    for step in sorted(set(a) | set(b)):
        if step not in b or step not in a:
            reason = "only_in_a" if step not in b else "only_in_b"
            if reason == "only_in_a":
                out.steps_only_in_a += 1
            else:
                out.steps_only_in_b += 1
            if out.first_divergent_step is None:
                out.first_divergent_step, out.first_reason = step, reason
                out.a_value, out.b_value = a.get(step), b.get(step)
            continue
        x, y = a[step], b[step]
        out.steps_compared += 1
        same = values.equal(_bits(x), _bits(y), tol)
        d = 0.0 if _bits(x) == _bits(y) else abs(x - y)
        if math.isnan(x) and math.isnan(y):
            d = 0.0
        drift.add(step, d)
        top = out.max_abs_diff
        if math.isnan(d):  # a NaN on one side outranks any number
            if top is None or not math.isnan(top):
                out.max_abs_diff, out.max_abs_step = d, step
        elif top is None or (not math.isnan(top) and d > top):
            out.max_abs_diff, out.max_abs_step = d, step
        out.final_abs_diff, out.final_step = d, step
        if not same:
            out.differing_steps += 1
            if out.first_divergent_step is None:
                out.first_divergent_step, out.first_reason = step, "value"
                out.a_value, out.b_value = x, y
    out.drift = drift.values()
    return out


def compare_logs(a: ScalarLog, b: ScalarLog, policy: Policy) -> LogsDiff:
    """Every scalar of either log compared (A's order, then B's own); timing figures set aside."""
    out = LogsDiff(a.format, tolerance=policy.describe())
    for name in a.scalars:
        if policy.skips_metric(name):
            out.scalars_skipped.append(name)
        elif name not in b.scalars:
            out.scalars_only_in_a.append(name)
        else:
            out.scalars.append(compare_scalar(name, a.scalars[name], b.scalars[name],
                                              tolerance_for(policy, name)))
    for name in b.scalars:
        if name in a.scalars:
            continue
        if policy.skips_metric(name):
            out.scalars_skipped.append(name)
        else:
            out.scalars_only_in_b.append(name)
    return out


# ---- readers ----------------------------------------------------------------------------------
def _number(value: Any) -> float | None:
    """A logged value as a float, or None when it is no number (a string, a list, empty)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            return float(text)
        except ValueError:
            return None
    return None


def _step(value: Any, path: str, where: str) -> int:
    x = _number(value)
    if x is None or not x.is_integer():
        raise UsageError(f"{path}: {where} has step {value!r}, expected a whole number")
    return int(x)


def _rows(log: ScalarLog, rows: list[dict[str, Any]], what: str) -> ScalarLog:
    """Rows of named values into ``log``: each row's ``step`` (else its number from 1) and its
    numeric cells; an empty cell is a scalar not logged at that step (Lightning's train and
    validation rows)."""
    for i, row in enumerate(rows, 1):
        step = _step(row["step"], log.path, f"{what} {i}") if "step" in row \
            and row["step"] not in (None, "") else i
        for name, value in row.items():
            if name == "step" or name is None:
                continue
            x = _number(value)
            if x is not None:
                log.put(str(name), step, x)
    if not log.scalars:
        raise UsageError(f"{log.path}: no numeric values found; expected a {log.format} metrics "
                         "log (a step column or key and numeric values)")
    return log


def read_csv(path: str, fmt: str = "csv") -> ScalarLog:
    """A CSV of metrics: a header row, a ``step`` column (else the row number from 1)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames:
                raise UsageError(f"{path}: empty; expected a {fmt} metrics file with a header row")
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise UsageError(f"{path}: cannot read it as CSV ({e})") from None
    return _rows(ScalarLog(path, fmt), rows, "row")


def read_jsonl(path: str) -> ScalarLog:
    """A JSONL of metrics: an object a line, a ``step`` key (else the line's number from 1)."""
    rows: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    raise UsageError(f"{path}: line {n} is not JSON; expected a JSONL metrics "
                                     "file (one JSON object a line)") from None
                if not isinstance(row, dict):
                    raise UsageError(f"{path}: line {n} is not a JSON object; expected a JSONL "
                                     "metrics file (one JSON object a line)")
                rows.append(row)
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read it ({e})") from None
    return _rows(ScalarLog(path, "jsonl"), rows, "line")


def read_trainer_state(path: str) -> ScalarLog:
    """The HF Trainer's ``trainer_state.json``: its ``log_history`` entries, keyed by ``step``
    (``epoch`` is a scalar like the others)."""
    if os.path.isdir(path):
        path = os.path.join(path, "trainer_state.json")
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"{path}: cannot read it as JSON ({e}); expected a trainer_state.json"
                         ) from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list) or not all(isinstance(e, dict) for e in history):
        raise UsageError(f"{path}: no log_history list of objects; expected the HF Trainer's "
                         "trainer_state.json")
    for i, entry in enumerate(history, 1):
        if "step" not in entry:
            raise UsageError(f"{path}: log_history entry {i} has no step; expected the HF "
                             "Trainer's trainer_state.json")
    log = ScalarLog(path, "trainer-state")
    for i, entry in enumerate(history, 1):
        step = _step(entry["step"], path, f"log_history entry {i}")
        for name, value in entry.items():
            x = _number(value) if not isinstance(value, str) else None
            if name != "step" and x is not None:
                log.put(name, step, x)
    return log


def lightning_file(path: str) -> str:
    """The ``metrics.csv`` of a Lightning CSVLogger version folder, or the file itself."""
    return os.path.join(path, "metrics.csv") if os.path.isdir(path) else path


def read_lightning(path: str) -> ScalarLog:
    """Lightning's CSVLogger ``metrics.csv`` (a version folder holding it is accepted): rows
    merged by their ``step`` column, an empty cell not logged."""
    return read_csv(lightning_file(path), "lightning")


def event_files(path: str) -> list[Path]:
    """The TensorBoard event files of a folder (its subfolders too), or the one file given."""
    p = Path(path)
    if p.is_file():
        return [p]
    return sorted(f for f in p.rglob("*") if f.is_file() and "tfevents" in f.name)


def read_tensorboard(path: str) -> ScalarLog:
    """A TensorBoard log folder or event file, read with tensorboard's ``EventAccumulator``:
    every scalar (and every one-value tensor summary), a subfolder's tags prefixed by its path
    (``add_scalars`` writes one folder a curve)."""
    try:
        # tensorboard is optional: only a diff of TensorBoard logs needs it
        from tensorboard.backend.event_processing.event_accumulator import (
            TENSORS, SCALARS, EventAccumulator)
    except ImportError:
        raise UsageError("reading TensorBoard logs needs the tensorboard package (pip install "
                         "tensorboard)") from None
    files = event_files(path)
    if not files:
        raise UsageError(f"{path}: no TensorBoard event file (events.out.tfevents.*) in it")
    root = Path(path) if Path(path).is_dir() else Path(path).parent
    log = ScalarLog(path, "tensorboard")
    for file in files:
        prefix = file.parent.relative_to(root).as_posix()
        acc = EventAccumulator(str(file), size_guidance={SCALARS: 0, TENSORS: 0})
        try:
            acc.Reload()
        except Exception as e:  # a corrupt event file fails in the library's own ways
            raise UsageError(f"{file}: cannot read it as a TensorBoard event file ({e})") from None
        tags = acc.Tags()
        for tag in tags.get("scalars", []):
            name = tag if prefix == "." else f"{prefix}/{tag}"
            for ev in acc.Scalars(tag):
                log.put(name, int(ev.step), float(ev.value))
        for tag in tags.get("tensors", []):
            name = tag if prefix == "." else f"{prefix}/{tag}"
            for ev in acc.Tensors(tag):
                x = _tensor_scalar(ev.tensor_proto)
                if x is not None:
                    log.put(name, int(ev.step), x)
    if not log.scalars:
        raise UsageError(f"{path}: its event files hold no scalar")
    return log


def _tensor_scalar(proto: Any) -> float | None:
    """The value of a one-value tensor summary, else None (histograms, images, text)."""
    # tensorboard is optional: loaded only with a TensorBoard log
    from tensorboard.util import tensor_util

    try:
        arr = tensor_util.make_ndarray(proto)
    except Exception:  # a tensor the library cannot decode is not a scalar
        return None
    if arr.size != 1 or arr.dtype.kind not in "fiu":
        return None
    return float(arr.reshape(-1)[0])


#: a W&B run file (``run-ID.wandb``): this ident, then a LevelDB-style log of records
WANDB_IDENT = b":W&B"
WANDB_HEADER = 7
#: the log's blocks; a record's pieces never cross one, and its chunk headers are 7 bytes
WANDB_BLOCK = 32768
WANDB_FULL, WANDB_FIRST, WANDB_MIDDLE, WANDB_LAST = 1, 2, 3, 4


def wandb_records(path: str) -> list[bytes]:
    """The records of a W&B run file, joined from their chunks (the file's framing: W&B
    writes a LevelDB log after its 7-byte header). A file that breaks the framing raises
    :class:`UsageError`; a last record cut short (a run still writing, or killed) is left out."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f"{path}: cannot read it ({e})") from None
    if not data.startswith(WANDB_IDENT) or len(data) < WANDB_HEADER:
        raise UsageError(f"{path}: not a W&B run file (no {WANDB_IDENT.decode()} header); "
                         "expected the run-ID.wandb file of an offline run")
    records: list[bytes] = []
    pending: bytearray | None = None
    pos = WANDB_HEADER
    while pos + 7 <= len(data):
        room = WANDB_BLOCK - pos % WANDB_BLOCK
        if room < 7:  # the block's tail is padding
            pos += room
            continue
        length = int.from_bytes(data[pos + 4:pos + 6], "little")
        kind = data[pos + 6]
        if kind == 0 and length == 0:  # zeros: padding, or the end of what was written
            pos += room
            continue
        chunk = data[pos + 7:pos + 7 + length]
        if kind not in (WANDB_FULL, WANDB_FIRST, WANDB_MIDDLE, WANDB_LAST) or length > room - 7:
            raise UsageError(f"{path}: a W&B record at byte {pos} is malformed; expected the "
                             "run-ID.wandb file of an offline run")
        if len(chunk) < length:
            break  # cut short
        pos += 7 + length
        if kind == WANDB_FULL:
            records.append(bytes(chunk))
        elif kind == WANDB_FIRST:
            pending = bytearray(chunk)
        elif pending is not None:
            pending += chunk
            if kind == WANDB_LAST:
                records.append(bytes(pending))
                pending = None
    return records


def wandb_file(path: str) -> str:
    """The run file of a W&B offline run folder (``offline-run-*/run-ID.wandb``), or ``path``."""
    if not os.path.isdir(path):
        return path
    found = sorted(Path(path).glob("*.wandb"))
    if len(found) != 1:
        raise UsageError(f"{path}: {'no' if not found else 'several'} run-ID.wandb file(s) in "
                         "it; expected one W&B offline run folder (wandb/offline-run-*)")
    return str(found[0])


def read_wandb(path: str) -> ScalarLog:
    """A W&B offline run (its folder or its ``.wandb`` file): every number ``wandb.log`` wrote
    to the history, keyed by the history's step; W&B's own keys (``_step``, ``_runtime``,
    ``_timestamp``) left out. Decoding the records needs the wandb package."""
    try:
        # wandb is optional: only a diff of W&B runs needs its record schema
        from wandb.proto.wandb_internal_pb2 import Record
    except ImportError:
        raise UsageError("reading W&B offline runs needs the wandb package (pip install "
                         "wandb)") from None
    file = wandb_file(path)
    log = ScalarLog(path, "wandb")
    for n, raw in enumerate(wandb_records(file)):
        record = Record()
        try:
            record.ParseFromString(raw)
        except Exception:  # the protobuf library's own decode errors
            raise UsageError(f"{file}: record {n} is not a W&B record; expected the run-ID.wandb "
                             "file of an offline run") from None
        if record.WhichOneof("record_type") != "history":
            continue
        history = record.history
        step = history.step.num if history.HasField("step") else n
        # by name within a record: W&B does not keep the order the keys were logged in (two
        # runs of one script wrote them in either order), so the report's order would not hold
        named = sorted(((item.key or "/".join(item.nested_key), item) for item in history.item),
                       key=lambda pair: pair[0])
        for name, item in named:
            if not name or name.startswith("_"):
                continue
            try:
                value = json.loads(item.value_json)
            except ValueError:
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                log.put(name, int(step), float(value))
    if not log.scalars:
        raise UsageError(f"{path}: no numbers logged to its history; expected a W&B offline run "
                         "that called wandb.log")
    return log


def read_log(path: str, fmt: str) -> ScalarLog:
    """``path`` read as a scalar log of format ``fmt`` (one of the log formats of
    :mod:`repro_check.finished.detect`)."""
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file or folder")
    reader = {detect.TENSORBOARD: read_tensorboard, detect.TRAINER_STATE: read_trainer_state,
              detect.LIGHTNING: read_lightning, detect.CSV: read_csv, detect.JSONL: read_jsonl,
              detect.WANDB: read_wandb}.get(fmt)
    if reader is None:
        raise UsageError(f"{path}: {fmt!r} is not a scalar log format")
    return reader(path)
