"""Trace files written by hand, line by line as docs/trace-format.md describes them.

Nothing here uses repro-check's own writer: a trace from this module is what another tool that
follows the documented format would write, so ``repro-check diff`` on it tests the reader, the
comparison and the report against the documentation. Nothing is run, so every use is quick.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

#: the documented environment keys a run records, with plausible values
ENVIRONMENT: dict[str, Any] = {
    "python": "3.11.7",
    "numpy": "2.4.6",
    "torch": "2.14.1",
    "cuda": None,
    "cudnn": None,
    "platform": "Linux-x86_64",
    "machine": "x86_64",
    "cpu_capability": "AVX2",
    "threads": 1,
    "interop_threads": 1,
    "deterministic_algorithms": True,
    "cudnn_benchmark": False,
    "cudnn_deterministic": True,
    "device": "cpu",
    "device_count": 0,
    "seed": 7,
    "seed_components": ["python", "numpy", "torch", "threads"],
    "target_sha256": "ab" * 32,
}


def _readable(x: float) -> Any:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def f32(x: float) -> dict[str, Any]:
    """An encoded float32 scalar: big-endian hex of its 4 bytes, and a readable copy."""
    raw = struct.pack(">f", x)
    return {"dtype": "float32", "bits": raw.hex(), "value": _readable(struct.unpack(">f", raw)[0])}


def f64(x: float) -> dict[str, Any]:
    raw = struct.pack(">d", x)
    return {"dtype": "float64", "bits": raw.hex(), "value": _readable(x)}


def as_f32(x: float) -> float:
    """The value a float32 encoding of ``x`` holds."""
    return struct.unpack(">f", struct.pack(">f", x))[0]


def write_trace(
    path: Path,
    losses: Sequence[float],
    *,
    metrics: dict[str, float] | None = None,
    target: str = "train.py:main",
    args: Sequence[str] = ("--epochs", "1"),
    seed: int | None = 7,
    components: Sequence[str] = ("python", "numpy", "torch", "threads"),
    environment: dict[str, Any] | None = None,
    status: str = "completed",
    error: dict[str, Any] | None = None,
    extra_signals: Iterable[str] = (),
    end: bool = True,
) -> Path:
    """One trace: header, a step line per loss, the metrics, an optional error, the end line."""
    env = {**ENVIRONMENT, "seed": seed,
           "seed_components": list(components) if seed is not None else [], **(environment or {})}
    header = {
        "target": target,
        "args": list(args),
        "run": 1,
        "seed": seed,
        "components": list(components) if seed is not None else [],
        "seeding": {},
        "threads": 1 if seed is not None and "threads" in components else None,
        "max_steps": None,
        "environment": env,
        "started": 1_700_000_000.0,
        "golden": None,
    }
    lines: list[dict[str, Any]] = [{"format": "repro-check-trace", "version": 2, "header": header}]
    for step, loss in enumerate(losses, 1):
        signals: dict[str, Any] = {"loss": f32(loss)}
        for name in extra_signals:
            signals[name] = f"{step:032x}"
        lines.append({"step": step, "signals": signals})
    if metrics is not None:
        lines.append({"metrics": {k: f64(v) for k, v in metrics.items()}})
    if error is not None:
        lines.append({"error": error})
    if end:
        lines.append({"end": {"status": status, "returncode": 0 if status == "completed" else 1,
                              "signal": None, "seconds": 1.5, "steps": len(losses),
                              "output_tail": ""}})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line, allow_nan=False) + "\n" for line in lines),
                    encoding="utf-8")
    return path


def read_lines(path: str | Path) -> list[dict[str, Any]]:
    """Every JSON line of a trace file, blank lines skipped."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()
            if line.strip()]


def steps_of(path: str | Path) -> list[dict[str, Any]]:
    return [line for line in read_lines(path) if "step" in line]


LOSSES = [2.0 / s for s in range(1, 21)]
