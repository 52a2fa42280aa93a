"""The result of a check, as an object and as the JSON report other tools read.

The JSON keys ``reproducible``, ``first_divergent_step``, ``divergent_signal``, ``steps``,
``metrics``, ``runs``, ``seed`` and ``error`` are a public API; everything else is added beside
them, never renamed.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from repro_check.trace import values
from repro_check.compare.steps import ComparisonResult, Policy
from repro_check.errors import ExitCode
from repro_check.run.runner import RunResult

REPORT_VERSION = 1


def replay_command(
    target: str,
    args: Sequence[str],
    seed: int | None,
    components: Sequence[str],
    runs: int,
    max_steps: int | None,
    threads: int | None,
    all_components: Sequence[str],
    command: str = "repro-check",
) -> str:
    """One copy-pasteable command that replays a check (up to ``max_steps``)."""
    parts = [command, target]
    if not components:
        parts.append("--no-seed")
    else:
        parts += ["--seed", str(seed)]
        off = [c for c in all_components if c not in components]
        if off:
            parts += ["--without", ",".join(off)]
        if threads is not None and threads != 1:
            parts += ["--threads", str(threads)]
    if runs != 2:
        parts += ["--runs", str(runs)]
    if max_steps is not None:
        parts += ["--max-steps", str(max_steps)]
    if args:
        parts += ["--", *args]
    return " ".join(shlex.quote(p) for p in parts)


@dataclass
class Report:
    """What ``repro_check.check`` returns and the CLI prints."""

    target: str
    args: list[str]
    seed: int | None
    components: list[str]
    runs: int
    results: list[RunResult]
    comparison: ComparisonResult | None
    policy: Policy = field(default_factory=Policy)
    max_steps: int | None = None
    threads: int | None = None
    error: str | None = None
    interrupted: bool = False
    trace_dir: str | None = None
    replay: str | None = None
    warnings: list[str] = field(default_factory=list)
    cause: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def reproducible(self) -> bool:
        return (
            self.error is None
            and not self.interrupted
            and self.comparison is not None
            and self.comparison.reproducible
        )

    @property
    def first_divergent_step(self) -> int | None:
        return self.comparison.first_divergent_step if self.comparison else None

    @property
    def divergent_signal(self) -> str | None:
        return self.comparison.divergent_signal if self.comparison else None

    @property
    def exit_code(self) -> ExitCode:
        if self.interrupted:
            return ExitCode.INTERRUPTED
        if self.error is not None:
            return ExitCode.TARGET_FAILED
        return ExitCode.REPRODUCIBLE if self.reproducible else ExitCode.NOT_REPRODUCIBLE

    def metrics_readable(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for k in range(1, self.runs + 1):
            got = self.comparison.metrics_of(k) if self.comparison else {}  # type: ignore[attr-defined]
            out.append({name: _plain(v) for name, v in got.items()})
        return out

    def to_dict(self) -> dict[str, Any]:
        cmp = self.comparison
        divergence = cmp.divergence.to_dict() if cmp and cmp.divergence else None
        return {
            "report_version": REPORT_VERSION,
            "reproducible": self.reproducible,
            "first_divergent_step": self.first_divergent_step,
            "divergent_signal": self.divergent_signal,
            "steps": [r.steps for r in self.results],
            "metrics": self.metrics_readable(),
            "runs": self.runs,
            "seed": self.seed,
            "error": self.error,
            "exit_code": int(self.exit_code),
            "cause": self.cause,
            "target": self.target,
            "args": self.args,
            "components": self.components,
            "threads": self.threads,
            "max_steps": self.max_steps,
            "tolerance": self.policy.describe(),
            "divergence": divergence,
            "divergences": [d.to_dict() for d in (cmp.per_run.values() if cmp else []) if d],
            "metric_divergences": [d.to_dict() for d in (cmp.metric_divergences if cmp else [])],
            "steps_compared": cmp.steps_compared if cmp else 0,
            "identical_groups": cmp.groups if cmp else [],
            "judged": dict(cmp.judged) if cmp else {},
            "run_results": [
                {
                    "run": r.index,
                    "status": r.status,
                    "returncode": r.returncode,
                    "signal": r.signal,
                    "steps": r.steps,
                    "seconds": round(r.seconds, 3),
                    "error": r.error,
                    "trace": r.trace_path,
                    "warnings": r.warnings,
                }
                for r in self.results
            ],
            "environment": (self.results[0].header or {}).get("environment") if self.results else None,
            "interrupted": self.interrupted,
            "trace_dir": self.trace_dir,
            "replay": self.replay,
            "warnings": self.warnings,
            **self.extra,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"


def _plain(enc: Any) -> Any:
    """A metric as a plain JSON number (or a string for NaN/inf)."""
    if isinstance(enc, dict):
        v = enc.get("value")
        if enc.get("dtype") in ("float16", "bfloat16", "float32", "float64"):
            x = values.to_float(enc)
            return x if x == x and abs(x) != float("inf") else str(x)
        return v
    return enc
