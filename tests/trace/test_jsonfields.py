"""The JSON of a dataclass derived from its fields, and the merge of a report's parts."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import pytest

from repro_check.report.model import GatePart, Report, ResumePart
from repro_check.trace.jsonfields import JsonRecord, json_field, merge, to_dict


class Colour(str, enum.Enum):
    RED = "red"


@dataclass
class Inner(JsonRecord):
    x: int


@dataclass
class Outer(JsonRecord):
    name: str
    path: str | None = json_field(default=None, key="trace")
    note: str | None = json_field(default=None, omit_none=True)
    secret: int = json_field(default=0, skip=True)
    seconds: float = json_field(default=0.0, digits=3)
    stack: list[int] | None = json_field(default=None, convert=lambda s: s or [])
    colour: Colour = Colour.RED
    inner: list[Inner] = field(default_factory=list)


def test_fields_are_written_by_their_rules() -> None:
    got = Outer("a", path="t.jsonl", seconds=1.23456, inner=[Inner(1)]).to_dict()
    assert got == {"name": "a", "trace": "t.jsonl", "seconds": 1.235, "stack": [],
                   "colour": "red", "inner": [{"x": 1}]}
    assert "note" in to_dict(Outer("a", note="n"))


def test_a_key_two_parts_write_raises() -> None:
    assert merge([{"a": 1}, {"b": 2}]) == {"a": 1, "b": 2}
    with pytest.raises(ValueError, match="a"):
        merge([{"a": 1}, {"a": 2}])


class ClashingGate(GatePart):
    """A part that writes a key the report's body writes: one of them would be lost."""

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "runs": 7}


def test_a_report_part_that_overwrites_a_key_of_the_body_raises() -> None:
    report = Report("t:main", [], 0, [], 2, [], None, gate=GatePart("diff"))
    assert report.to_dict()["runs"] == 2
    report.gate = ClashingGate("diff")
    with pytest.raises(ValueError, match="runs"):
        report.to_dict()


class ClashingResume(ResumePart):
    """A resume part that writes the verdict key the report adds beside it."""

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "resumes_exactly": False}


def test_a_resume_part_that_writes_the_reports_verdict_key_raises() -> None:
    """``resumes_exactly`` is the report's verdict, written beside the resume part's keys: a part
    that wrote it too would be silently overwritten by a ``**`` merge."""
    report = Report("t:main", [], 0, [], 2, [], None, resume=ResumePart(at=3))
    assert report.to_dict()["resumes_exactly"] is False and report.to_dict()["resume_at"] == 3
    report.resume = ClashingResume(at=3)
    with pytest.raises(ValueError, match="resumes_exactly"):
        report.to_dict()


@dataclass
class Pair(JsonRecord):
    left: int
    right: int


@dataclass
class Moded(JsonRecord):
    """Keys one kind of record writes and another does not, a flattened record, computed keys
    and an envelope: the rules the report's parts use instead of a hand-written to_dict."""

    JSON_ENVELOPE = "box"
    JSON_PROPERTIES = ("total",)

    mode: str
    only_a: int = json_field(default=0, when=lambda m: m.mode == "a")
    pair: Pair = json_field(default_factory=lambda: Pair(1, 2), flatten=True)

    @property
    def total(self) -> int:
        return self.pair.left + self.pair.right


def test_when_flatten_properties_and_envelope() -> None:
    assert Moded("a").to_dict() == {"box": {"mode": "a", "only_a": 0, "left": 1, "right": 2,
                                            "total": 3}}
    assert Moded("b").to_dict() == {"box": {"mode": "b", "left": 1, "right": 2, "total": 3}}


@dataclass
class Clashing(JsonRecord):
    left: int
    pair: Pair = json_field(flatten=True)


def test_a_flattened_record_that_writes_a_key_of_its_parent_raises() -> None:
    with pytest.raises(ValueError, match="left"):
        Clashing(0, Pair(1, 2)).to_dict()


@pytest.mark.parametrize("mode, keys", [
    ("record", {"mode", "golden", "output"}),
    ("verify", {"mode", "golden", "labels", "environment_differences", "environment_note"}),
    ("diff", {"mode", "a", "b", "labels", "environment_differences", "environment_note"}),
])
def test_each_gate_mode_writes_its_own_keys(mode: str, keys: set[str]) -> None:
    assert set(GatePart(mode).to_dict()) == keys  # type: ignore[arg-type]
    if mode == "record":
        written = GatePart("record", golden="g.json").to_dict()
        assert {"band", "spread_steps", "widest_spread"} <= set(written)


def test_no_record_of_a_report_writes_its_json_by_hand() -> None:
    """Every record a report (check, gate, diagnose, torchrun, across, resume, bisect, doctor)
    is written from derives its JSON from its fields; only the report itself joins its parts
    (:func:`merge`, a key written twice refused)."""
    import importlib
    import pkgutil

    import repro_check

    names = [m.name for m in pkgutil.walk_packages(repro_check.__path__, "repro_check.")
             if m.name.split(".")[1] in ("report", "compare", "diagnose", "gate", "distributed",
                                         "doctor", "trace")]
    by_hand = sorted(
        f"{value.__module__}.{value.__qualname__}"
        for name in names for value in vars(importlib.import_module(name)).values()
        if isinstance(value, type) and value.__module__ == name and "to_dict" in vars(value)
        and value is not JsonRecord)
    assert by_hand == ["repro_check.report.model.Report",  # joins its parts with merge()
                       # one fingerprint key that differs (moved from child/ with the
                       # environment fingerprint); the reports write EnvironmentDifference
                       "repro_check.trace.environment.Difference",
                       # a run's configuration (the protocol), no report's record
                       "repro_check.trace.protocol.ControlSettings",
                       "repro_check.trace.protocol.ResumeSettings"]
