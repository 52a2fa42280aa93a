"""The records a report holds are typed: places in the script are :class:`Location` records (not
dicts) whose JSON is ``{"file", "line", "function"}`` as it always was, statuses, causes and
signals are their vocabularies' types, and no field written to the JSON is a free-form
``dict[str, Any]`` unless its keys are data (metric names, environment entries) or the run's
own record passed through."""

from __future__ import annotations

import dataclasses
import json

from repro_check.report import contents, model
from repro_check.report.contents import EnvCall, Localization, Source
from repro_check.report.model import Report
from repro_check.trace import results
from repro_check.trace.jsonfields import JsonRecord
from repro_check.trace.results import Location

#: fields written to the JSON that may stay ``dict[str, Any]``, and why
FREE_FORM = {
    ("RunEnd", "error"): "the run's error record as its trace has it (other keys accepted)",
    ("RankResult", "error"): "the rank's error record as its trace has it",
    ("ProcessResult", "error"): "the process's error record as its trace has it",
    ("ReportCore", "metrics"): "keyed by the script's metric names",
    ("ReportCore", "environment"): "keyed by the environment's entries",
    ("AcrossCell", "versions"): "keyed by the environment's entries",
}


def json_records() -> list[type]:
    """Every record class a JSON report is written from."""
    out = []
    for module in (contents, model, results):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, JsonRecord) \
                    and dataclasses.is_dataclass(value) and value.__module__ == module.__name__:
                out.append(value)
    return out


def written(field: dataclasses.Field[object]) -> bool:
    return not field.metadata.get("repro_check.json", {}).get("skip")


def test_no_field_written_to_the_json_is_a_free_form_dict_without_a_reason() -> None:
    loose = [f"{cls.__name__}.{f.name}: {f.type}" for cls in json_records()
             for f in dataclasses.fields(cls)
             if written(f) and "dict[str, Any]" in str(f.type)
             and (cls.__name__, f.name) not in FREE_FORM]
    assert not loose, "\n".join(loose)


def test_statuses_causes_and_signals_are_typed_by_their_vocabularies() -> None:
    wanted = {"status": "Status", "cause": "Cause", "divergent_signal": "Signal"}
    bare = [f"{cls.__name__}.{f.name}: {f.type}" for cls in json_records()
            for f in dataclasses.fields(cls)
            if f.name in wanted and wanted[f.name] not in str(f.type)
            and not (cls.__name__ == "Localization" and f.name == "cause")]  # rng | compute
    # a divergent signal under another name (Source, JudgedCommit, AcrossPair, BisectPart)
    bare += [f"{cls.__name__}.signal: {f.type}" for cls in json_records()
             for f in dataclasses.fields(cls)
             if f.name == "signal" and "Signal" not in str(f.type)
             and cls.__name__ not in ("RunEnd", "RankResult")]  # the POSIX signal that killed it
    assert not bare, "\n".join(bare)


def test_places_in_the_script_are_locations_written_as_file_line_function() -> None:
    made = Location("train.py", 3, "main")
    reset = Location("train.py", 4, "main")
    loc = Localization(4, found=True, cause="rng", entered=made, entered_by="torch.as_tensor",
                       env_call=EnvCall("reset", reset))
    assert loc.location == reset  # the environment call is where to fix it
    assert Localization(4, entered=made).location == made
    got = loc.to_dict()
    assert got["entered"] == {"file": "train.py", "line": 3, "function": "main"}
    assert got["env_call"] == {"call": "reset", "file": "train.py", "line": 4,
                               "function": "main"}
    assert list(got["env_call"]) == ["call", "file", "line", "function"]

    src = Source(2, "batch", "rng", location=Location("data.py", 9), stack=[made])
    assert src.to_dict()["location"] == {"file": "data.py", "line": 9, "function": None}
    assert src.to_dict()["stack"] == [{"file": "train.py", "line": 3, "function": "main"}]
    assert Source(2, "batch", "rng").to_dict()["stack"] == []  # as the null stack was written

    report = Report("t:main", [], 0, [], 2, [], None, cause="rng", cause_location=made)
    assert json.loads(report.to_json())["cause_location"] == \
        {"file": "train.py", "line": 3, "function": "main"}


def test_a_recorded_location_is_checked_and_cut_to_size() -> None:
    """What a run recorded comes from the target's process: malformed ones are no location."""
    assert Location.of({"file": "a.py", "line": 3, "function": "f"}) == Location("a.py", 3, "f")
    assert Location.of({"file": "a.py", "line": 3}) == Location("a.py", 3, None)
    for bad in (None, "a.py:3", {"file": "a.py"}, {"file": 3, "line": 3},
                {"file": "a.py", "line": True}, {"file": "a.py", "line": "3"}):
        assert Location.of(bad) is None, bad
    long = Location.of({"file": "x" * 10_000, "line": 1, "function": "f" * 1000})
    assert long is not None and len(long.file) == 4096 and len(long.function or "") == 200
    frames = [{"file": f"{k}.py", "line": k} for k in range(12)] + ["junk"]
    assert [f.line for f in Location.stack_of(frames)] == [5, 6, 7, 8, 9, 10, 11]
    assert Location.stack_of(None) == []
    assert Location("a.py", 3).site == "a.py:3"

