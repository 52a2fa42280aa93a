"""Which kind of file or folder ``repro-check diff`` was given: a saved trace (what ``diff``
always compared), a scalar log of a finished run, or a checkpoint.

Detection is conservative: a path that is not clearly a log or a checkpoint (by its name, its
suffix, the files a folder holds, or the first bytes of a JSON file) is taken for a trace, so
every file ``diff`` read before is read and refused as before. Only regular files are opened
here (a FIFO or a device is left for the trace reader, which refuses it)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from repro_check.errors import UsageError
from repro_check.finished.checkpoints import SAFETENSORS_SUFFIX, TENSOR_SUFFIXES, TORCH_SUFFIXES
from repro_check.trace.protocol import FORMAT as TRACE_FORMAT

TRACE = "trace"
TENSORBOARD = "tensorboard"
TRAINER_STATE = "trainer-state"
LIGHTNING = "lightning"
CSV = "csv"
JSONL = "jsonl"
WANDB = "wandb"
TORCH = "torch"
SAFETENSORS = "safetensors"
CHECKPOINT_FOLDER = "checkpoint-folder"

#: the scalar logs' formats and the checkpoints' (``--format NAME`` takes any, or ``trace``)
LOG_FORMATS = (TENSORBOARD, TRAINER_STATE, LIGHTNING, CSV, JSONL, WANDB)
CHECKPOINT_FORMATS = (TORCH, SAFETENSORS, CHECKPOINT_FOLDER)
FORMATS = (TRACE, *LOG_FORMATS, *CHECKPOINT_FORMATS)

#: bytes read of a file to tell a trace from a JSON log
SNIFF = 4096


def _head(path: str) -> str:
    """The first bytes of a regular file as text ('' for anything else or unreadable)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return ""
        with open(path, "rb") as f:
            return f.read(SNIFF).decode("utf-8", "replace")
    except OSError:
        return ""


def _jsonl_is_log(path: str) -> bool:
    """A JSONL file whose first line is a JSON object with no trace header's keys."""
    head = _head(path)
    if not head or TRACE_FORMAT in head:
        return False
    first = head.lstrip().split("\n", 1)[0]
    try:
        obj = json.loads(first)
    except ValueError:
        return False
    return isinstance(obj, dict) and not ({"format", "header", "version"} & set(obj))


def _is_wandb_run(p: Path) -> bool:
    return p.name.startswith("offline-run-") or any(f.suffix == ".wandb" for f in p.iterdir())


def _folder_format(p: Path) -> str | None:
    try:
        if any("tfevents" in f.name for f in p.rglob("*") if f.is_file()):
            return TENSORBOARD
        if _is_wandb_run(p):
            return WANDB
        if (p / "metrics.csv").is_file() and ((p / "hparams.yaml").is_file()
                                              or p.name.startswith("version_")):
            return LIGHTNING  # a CSVLogger version folder
        if any(f.name.endswith(TENSOR_SUFFIXES) for f in p.rglob("*") if f.is_file()):
            return CHECKPOINT_FOLDER
        if (p / "trainer_state.json").is_file():
            return TRAINER_STATE
    except OSError:
        return None
    return None


def _file_format(p: Path) -> str | None:
    name = p.name
    if "tfevents" in name:
        return TENSORBOARD
    if name.endswith(".wandb"):
        return WANDB
    if name.endswith(SAFETENSORS_SUFFIX):
        return SAFETENSORS
    if name.endswith(TORCH_SUFFIXES):
        return TORCH
    if name == "metrics.csv" and (p.parent / "hparams.yaml").is_file():
        return LIGHTNING  # in a CSVLogger version folder
    if name.endswith(".csv"):
        return CSV
    if name.endswith(".json"):
        head = _head(str(p))
        if name == "trainer_state.json" or ('"log_history"' in head and TRACE_FORMAT not in head):
            return TRAINER_STATE
        return None
    if name.endswith((".jsonl", ".ndjson")) and _jsonl_is_log(str(p)):
        return JSONL
    return None


def detect(path: str) -> str:
    """The format of ``path``: one of :data:`FORMATS` (``trace`` when nothing else is clear)."""
    p = Path(path)
    try:
        is_dir = p.is_dir()
    except OSError:
        return TRACE
    found = _folder_format(p) if is_dir else _file_format(p)
    return found or TRACE


def formats_of(a: str, b: str, given: str | None) -> str:
    """The one format A and B are read as: ``given`` (``--format``), else both detected, which
    must agree (a usage error naming both otherwise)."""
    if given is not None:
        if given not in FORMATS:
            raise UsageError(f"--format {given!r}: expected one of {', '.join(FORMATS)}")
        return given
    fa, fb = detect(a), detect(b)
    if {fa, fb} == {LIGHTNING, CSV}:
        return LIGHTNING  # one reader: Lightning's takes a version folder or any metrics CSV
    if fa != fb:
        raise UsageError(f"A and B are of different formats: {a} is {_named(fa)}, {b} is "
                         f"{_named(fb)}; diff compares two of one format (or give --format NAME)")
    return fa


def _named(fmt: str) -> str:
    return {TRACE: "a repro-check trace (or nothing diff reads)",
            TENSORBOARD: "a TensorBoard log", TRAINER_STATE: "an HF trainer_state.json",
            LIGHTNING: "a Lightning metrics.csv", CSV: "a CSV metrics file",
            JSONL: "a JSONL metrics file", WANDB: "a W&B offline run",
            TORCH: "a torch.save checkpoint", SAFETENSORS: "a .safetensors file",
            CHECKPOINT_FOLDER: "a checkpoint folder"}[fmt]
