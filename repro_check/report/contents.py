"""The records a report's parts hold: typed, each written to JSON from its fields
(:mod:`repro_check.trace.jsonfields`), under the keys the JSON report has always had."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from repro_check.compare.cause import Cause
from repro_check.trace.jsonfields import JsonRecord, json_field


@dataclass
class RunEnd(JsonRecord):
    """How one run ended, as ``run_results`` lists it."""

    run: int
    status: str
    returncode: int | None
    signal: str | None
    steps: int
    seconds: float = json_field(digits=3)
    error: dict[str, Any] | None = None
    trace: str | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass
class FlaggedOp(JsonRecord):
    """An op PyTorch flags as nondeterministic: the earliest step and call site any run saw it
    at, and the runs that flagged it."""

    op: str
    step: int | None = None
    where: str | None = None
    runs: list[int] = field(default_factory=list)


@dataclass
class Source(JsonRecord):
    """One source of non-determinism ``diagnose`` found, and the pin that took it out of the next
    pair of runs (:mod:`repro_check.diagnose.sources`)."""

    step: int | None
    signal: str | None
    cause: Cause | None
    #: under torchrun: the rank where the difference entered
    rank: int | None = json_field(default=None)
    detail: str | None = None
    culprit: str | None = None
    culprit_op: str | None = None
    #: where in the script: ``{"file", "line", "function"}``
    location: dict[str, Any] | None = None
    stack: list[dict[str, Any]] | None = json_field(default=None, convert=lambda s: s or [])
    #: what the next pair pins (its replay plan), not in the JSON
    pin: dict[str, Any] | None = json_field(default=None, skip=True)
    pinned_by: str | None = None


@dataclass
class SourcesCost(JsonRecord):
    """What looking for the sources took: the pinned runs and their seconds."""

    runs: int
    seconds: float = json_field(digits=3)


@dataclass
class DesyncRankValue(JsonRecord):
    """A rank's parameters fingerprint at a rank desync."""

    rank: int
    run: int
    params: str
    differs: bool


@dataclass
class MetricRankValue(JsonRecord):
    """A rank's final metric in run 1 (``reference``) and in the divergent run."""

    rank: int
    reference: Any
    value: Any
    differs: bool


@dataclass
class StepRankValue(JsonRecord):
    """A rank's value of the divergent signal at the divergent step, in run 1 and the other run."""

    rank: int
    signal: str
    reference: Any
    value: Any
    differs: bool


RankValue = DesyncRankValue | MetricRankValue | StepRankValue


@dataclass
class FailedRank(JsonRecord):
    """The rank that failed first, and in which run."""

    run: int
    rank: int


@dataclass
class Localization(JsonRecord):
    """The outcome of comparing one step's probe records of two runs."""

    step: int
    found: bool = False
    phase: str | None = None
    module: str | None = None
    op: str | None = None
    op_index: int | None = None
    inputs_agree: bool | None = None
    differing_inputs: list[int] = field(default_factory=list)
    first_module_forward: str | None = None
    first_module_backward: str | None = None
    ops_compared: int = 0
    detail: str = ""
    #: ``"rng"`` when a random op drew different numbers from the same inputs, or a value from
    #: outside the recorded ops differs; else ``"compute"``
    cause: Literal["rng", "compute"] | None = None
    #: where a differing value from outside torch entered: ``{"file", "line", "function"}``
    entered: dict[str, Any] | None = None
    #: the function that made it a tensor (``torch.as_tensor``)
    entered_by: str | None = None
    #: the environment call that returned the differing observation:
    #: ``{"call": "reset" | "step", "file", "line", "function"}``
    env_call: dict[str, Any] | None = None

    @property
    def location(self) -> dict[str, Any] | None:
        """Where to fix it: the environment call, else the line where the value entered."""
        if self.env_call and self.env_call.get("file"):
            return {k: self.env_call[k] for k in ("file", "line", "function")}
        return dict(self.entered) if self.entered else None
